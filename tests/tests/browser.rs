//! The web console in a real browser: headless Chromium from Debian's packages, driven
//! over WebDriver (`chromedriver`, Debian's `chromium-driver`) with fantoccini. Signs
//! in with a tenant's key, deploys `echo` with an artifact through the page's form
//! (upload progress to 100 %), tries `echo` in the try-it panel, draws digits on the
//! MNIST pad and has them classified (with `cargo xtask fetch-mnist`'s weights; that
//! part skips, class "MNIST", without them), then signs in as the
//! admin and waits for the live timeline to show kernels of two tenants while a
//! latency-class `mlp` and a batch-class `gemm-burn` run. Any error in the browser's
//! log (an exception, a failed load, a Content-Security-Policy violation) fails it.
//!
//! `cargo xtask test` installs the browser (`cargo xtask browser`, apt as root) and
//! names it with `SLUICE_CHROMIUM` and `SLUICE_CHROMEDRIVER`; without them the test
//! looks in `/usr/bin`, and skips (class "browser") saying why when it finds none,
//! unless `SLUICE_REQUIRE_BROWSER=1` or `CI=true` makes that a failure. With
//! `SLUICE_SCREENSHOTS` naming a directory (`cargo xtask screenshots` names
//! `docs/img`) it saves the live view and the functions page there.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use sluice_tests::fixtures::mnist_dir;
use sluice_tests::skip::skip;
use sluice_tests::{ADMIN_KEY, Server, free_port, repo_root};

/// How long any one thing the page should do may take before the test gives up: a
/// guard against a stuck test, not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(90);

/// The browser and its driver, if present.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let find = |var: &str, default: &str| -> Option<PathBuf> {
        let path =
            std::env::var_os(var).filter(|v| !v.is_empty()).map_or_else(|| PathBuf::from(default), PathBuf::from);
        path.is_file().then_some(path)
    };
    let chromium = find("SLUICE_CHROMIUM", "/usr/bin/chromium");
    let driver = find("SLUICE_CHROMEDRIVER", "/usr/bin/chromedriver");
    if let (Some(c), Some(d)) = (&chromium, &driver) {
        return Some((c.clone(), d.clone()));
    }
    let reason = "no Chromium and chromedriver (Debian: `apt-get install chromium chromium-driver`; \
                  `cargo xtask browser` installs them as root; SLUICE_CHROMIUM / SLUICE_CHROMEDRIVER name them)";
    let required =
        std::env::var("SLUICE_REQUIRE_BROWSER").as_deref() == Ok("1") || std::env::var("CI").as_deref() == Ok("true");
    assert!(!required, "SLUICE_REQUIRE_BROWSER=1 or CI=true: {reason}");
    skip("browser", reason);
    None
}

/// A running chromedriver in a process group of its own, with the browser it starts;
/// the group is killed on drop, so a failing test leaves no browser behind.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start(path: &Path) -> Driver {
        let port = free_port();
        let child = Command::new(path)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + PATIENCE;
        while ureq::get(format!("{url}/status")).call().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { child, url }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session that logs everything the page logs.
async fn session(driver: &Driver, chromium: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1100", "--hide-scrollbars", "--disable-breakpad",
                     "--disable-crash-reporter"],
        }),
    );
    caps.insert("goog:loggingPrefs".into(), json!({ "browser": "ALL" }));
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector).capabilities(caps).connect(&driver.url).await.expect("a WebDriver session")
}

/// The browser's log entries at level SEVERE since the last call (chromedriver's
/// log endpoint): exceptions, failed loads, CSP violations, `console.error`.
async fn severe(client: &Client, driver: &Driver) -> Vec<String> {
    let id = client.session_id().await.expect("session id").expect("a session");
    let url = format!("{}/session/{id}/se/log", driver.url);
    let agent = ureq::Agent::new_with_defaults();
    let body = serde_json::to_vec(&json!({ "type": "browser" })).unwrap();
    let mut response =
        agent.post(&url).header("content-type", "application/json").send(&body[..]).expect("reading the browser log");
    let text = response.body_mut().read_to_string().expect("the log");
    let log: Value = serde_json::from_str(&text).expect("the log as JSON");
    log["value"]
        .as_array()
        .expect("log entries")
        .iter()
        .filter(|e| e["level"] == "SEVERE")
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Polls `check` until it returns `Some`, or panics after [`PATIENCE`] saying `what`.
async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "the page never got there: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn text(client: &Client, css: &str) -> String {
    match client.find(Locator::Css(css)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn sign_in(client: &Client, key: &str, who: &str) {
    let input = client.wait().at_most(PATIENCE).for_element(Locator::Css("#key")).await.expect("the key field");
    until("the sign-in form", || async { input.is_displayed().await.ok().filter(|d| *d) }).await;
    input.clear().await.unwrap();
    input.send_keys(key).await.unwrap();
    client.find(Locator::Css("#signin-button")).await.unwrap().click().await.unwrap();
    until(&format!("signed in as {who}"), || async {
        let shown = text(client, "#who").await;
        shown.starts_with(who).then_some(())
    })
    .await;
}

async fn screenshot(client: &Client, name: &str) {
    let Some(dir) = std::env::var_os("SLUICE_SCREENSHOTS").filter(|v| !v.is_empty()) else { return };
    let dir = repo_root().join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let png = client.screenshot().await.expect("a screenshot");
    std::fs::write(dir.join(name), png).unwrap();
    eprintln!("saved {}", dir.join(name).display());
}

/// A stroke of the mouse: points, offsets from the pad's centre.
type Stroke = &'static [(i64, i64)];

/// Digits to draw on the 280×280 pad.
const DIGITS: &[(u8, &[Stroke])] = &[
    (1, &[&[(5, -90), (0, 0), (-5, 90)]]),
    (7, &[&[(-60, -80), (65, -80), (30, -10), (0, 90)]]),
    (0, &[&[(0, -90), (-45, -60), (-60, 0), (-45, 60), (0, 90), (45, 60), (60, 0), (45, -60), (0, -90)]]),
];

/// Draws `strokes` on `pad` with the mouse (pointer events, as a person would).
async fn draw(client: &Client, pad: &fantoccini::elements::Element, strokes: &[Stroke]) {
    let mut mouse = MouseActions::new("mouse".into());
    for stroke in strokes {
        let step = |(x, y): (i64, i64)| PointerAction::MoveToElement {
            element: pad.clone(),
            duration: Some(Duration::from_millis(20)),
            x: x as f64,
            y: y as f64,
        };
        mouse = mouse.then(step(stroke[0])).then(PointerAction::Down { button: MOUSE_BUTTON_LEFT });
        for w in stroke.windows(2) {
            // Intermediate points, so the stroke is drawn as a line, not a jump.
            for k in 1..=8 {
                let p = (w[0].0 + (w[1].0 - w[0].0) * k / 8, w[0].1 + (w[1].1 - w[0].1) * k / 8);
                mouse = mouse.then(step(p));
            }
        }
        mouse = mouse.then(PointerAction::Up { button: MOUSE_BUTTON_LEFT });
    }
    client.perform_actions(mouse).await.expect("drawing on the pad");
    client.release_actions().await.unwrap();
}

/// Sets its flag when dropped (also while unwinding from a failed assertion).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn the_console_signs_in_deploys_tries_and_shows_two_tenants_live() {
    let Some((chromium, driver_path)) = browser() else { return };
    let server = Server::start();
    let key_a = server.create_tenant("latency-co");
    let key_b = server.create_tenant("batch-co");
    let grant = serde_json::to_vec(&json!({ "max_priority": "latency", "weight": 3 })).unwrap();
    server.call("PATCH", "/v1/tenants/latency-co", Some(ADMIN_KEY), Some(("application/json", grant))).expect(200);
    server.deploy(&key_a, "echo", "echo", "priority=latency");
    server.deploy(&key_a, "mlp", "mlp", "priority=latency");
    server.deploy(&key_b, "burn", "gemm_burn", "priority=batch");
    let mnist = mnist_dir();
    if let Some(dir) = &mnist {
        let staged = server
            .put_bytes("/v1/functions/mnist?staged=true", &key_a, sluice_tests::function_wasm("mnist"))
            .expect(201);
        server
            .put_bytes(
                "/v1/functions/mnist/artifacts/model",
                &key_a,
                std::fs::read(dir.join("model.safetensors")).unwrap(),
            )
            .expect(201);
        let v = staged["version"].as_u64().unwrap();
        server.call("POST", &format!("/v1/functions/mnist/versions/{v}/publish"), Some(&key_a), None).expect(200);
    }
    let artifacts = tempfile::tempdir().unwrap();
    let notes = artifacts.path().join("notes.txt");
    std::fs::write(&notes, "an artifact uploaded from the console\n").unwrap();
    let component = repo_root().join("functions/target/wasm32-wasip2/release/echo.wasm");
    assert!(component.is_file(), "{}: run `cargo xtask build-functions` first", component.display());

    let driver = Driver::start(&driver_path);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        runtime.block_on(async {
            let client = session(&driver, &chromium).await;
            client.goto(&format!("{}/", server.url)).await.unwrap();
            assert!(client.current_url().await.unwrap().path().starts_with("/console/"), "/ leads to the console");

            // Sign in as a tenant and deploy a component with an artifact.
            sign_in(&client, &key_a, "tenant latency-co").await;
            client.find(Locator::Css("#nav-functions")).await.unwrap().click().await.unwrap();
            let name = client.wait().at_most(PATIENCE).for_element(Locator::Css("#deploy-name")).await.unwrap();
            name.send_keys("web-echo").await.unwrap();
            client.find(Locator::Css("#deploy-component")).await.unwrap().send_keys(component.to_str().unwrap()).await.unwrap();
            client.find(Locator::Css("#deploy-artifacts")).await.unwrap().send_keys(notes.to_str().unwrap()).await.unwrap();
            client.find(Locator::Css("#deploy-button")).await.unwrap().click().await.unwrap();
            let status = until("the deploy finished", || async {
                let t = text(&client, "#deploy-status").await;
                (t.starts_with("Deployed") || t.contains("error") || t.contains(": ")).then_some(t)
            })
            .await;
            assert_eq!(status, "Deployed web-echo v1 with 1 artifact(s).");
            let progress = client.execute("return document.getElementById('deploy-progress').value", vec![]).await.unwrap();
            assert_eq!(progress.as_f64(), Some(1.0), "the upload progress reached the end");
            let row = until("the new function listed", || async {
                let t = text(&client, "#function-web-echo").await;
                (!t.is_empty()).then_some(t)
            })
            .await;
            assert!(row.contains("notes") && row.contains("latency"), "{row}");
            let info = server.get("/v1/functions/web-echo", &key_a).expect(200).to_string();
            assert!(info.contains("\"notes\""), "the artifact is part of the version: {info}");
            screenshot(&client, "console-functions.png").await;

            // The try-it panel on echo: a request from the signature, and its answer.
            until("echo in the try-it list", || async {
                let options = client.find_all(Locator::Css("#try-function option[value='echo']")).await.ok()?;
                (!options.is_empty()).then_some(())
            })
            .await;
            client.find(Locator::Css("#try-function")).await.unwrap().select_by_value("echo").await.unwrap();
            let request = until("a request built", || async {
                let v = client.find(Locator::Css("#try-request")).await.ok()?.prop("value").await.ok()??;
                (!v.is_empty()).then_some(v)
            })
            .await;
            let request: Value = serde_json::from_str(&request).expect("the request is JSON");
            assert_eq!(request["inputs"][0]["datatype"], "FP32", "{request}");
            client.find(Locator::Css("#try-send")).await.unwrap().click().await.unwrap();
            let answer = until("the try-it answer", || async {
                let t = text(&client, "#try-response").await;
                t.contains("outputs").then_some(t)
            })
            .await;
            let body: Value = serde_json::from_str(answer.split_once('\n').expect("time, then JSON").1).unwrap();
            assert_eq!(body["outputs"][0]["data"], request["inputs"][0]["data"], "echo answers its input: {body}");

            // Digits drawn on the pad, classified by the MNIST CNN.
            if mnist.is_some() {
                client.find(Locator::Css("#nav-demos")).await.unwrap().click().await.unwrap();
                let pad = client.wait().at_most(PATIENCE).for_element(Locator::Css("#digit-pad")).await.unwrap();
                for (digit, strokes) in DIGITS {
                    client.find(Locator::Css("#digit-clear")).await.unwrap().click().await.unwrap();
                    draw(&client, &pad, strokes).await;
                    client.find(Locator::Css("#digit-classify")).await.unwrap().click().await.unwrap();
                    let got = until("a digit classified", || async {
                        let result = client.find(Locator::Css("#digit-result")).await.ok()?;
                        result.attr("data-digit").await.ok()?
                    })
                    .await;
                    assert_eq!(got, digit.to_string(), "the pad's drawing of {digit}");
                    if *digit == 7 {
                        screenshot(&client, "console-digits.png").await;
                    }
                }
            }

            // Sign out, sign in as the admin, watch both tenants' kernels live.
            client.find(Locator::Css("#sign-out")).await.unwrap().click().await.unwrap();
            sign_in(&client, ADMIN_KEY, "admin").await;
            client.find(Locator::Css("#nav-live")).await.unwrap().click().await.unwrap();
            client.wait().at_most(PATIENCE).for_element(Locator::Css("#timeline-0")).await.unwrap();
            // Stops the load however this block ends, so the scope can join it.
            let _stop = StopOnDrop(&stop);
            let load = s.spawn(|| {
                let mlp = json!({ "inputs": [{ "name": "input", "shape": [1, 16], "datatype": "FP32", "data": vec![0.5; 16] }] });
                let burn = json!({ "inputs": [
                    { "name": "duration_ms", "shape": [1], "datatype": "INT64", "data": [200] },
                    { "name": "size", "shape": [1], "datatype": "INT64", "data": [96] },
                ]});
                while !stop.load(Ordering::Relaxed) {
                    std::thread::scope(|inner| {
                        inner.spawn(|| server.post_json("/v2/models/burn/infer", &key_b, &burn).expect(200));
                        for _ in 0..20 {
                            server.post_json("/v2/models/mlp/infer", &key_a, &mlp).expect(200);
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    });
                }
            });
            let tenants = until("kernels of both tenants on the timeline", || async {
                let canvas = client.find(Locator::Css("#timeline-0")).await.ok()?;
                let drawn: Vec<String> = serde_json::from_str(&canvas.attr("data-tenants").await.ok()??).ok()?;
                (drawn.iter().any(|t| t == "latency-co") && drawn.iter().any(|t| t == "batch-co")).then_some(drawn)
            })
            .await;
            assert!(tenants.contains(&"latency-co".to_owned()) && tenants.contains(&"batch-co".to_owned()));
            // The status cards fill in from the snapshots (two are needed for a share).
            until("latency per function listed", || async {
                let t = text(&client, "#device-0").await;
                (t.contains("mlp") && t.contains("burn") && t.contains("latency-co: ")).then_some(())
            })
            .await;
            if std::env::var_os("SLUICE_SCREENSHOTS").is_some() {
                // A few seconds of co-location on the charts, and a closer look.
                tokio::time::sleep(Duration::from_secs(6)).await;
                client.find(Locator::Css("#device-0 button[data-zoom='2']")).await.unwrap().click().await.unwrap();
                screenshot(&client, "console-live.png").await;
            }
            // Pausing freezes the timeline; zooming changes its window.
            client.find(Locator::Css("#pause-0")).await.unwrap().click().await.unwrap();
            assert_eq!(text(&client, "#pause-0").await, "Resume");
            client.find(Locator::Css("#device-0 button[data-zoom='1']")).await.unwrap().click().await.unwrap();
            let zoomed = client.find(Locator::Css("#device-0 button[data-zoom='1']")).await.unwrap().attr("class").await.unwrap();
            assert_eq!(zoomed.as_deref(), Some("active"));
            stop.store(true, Ordering::Relaxed);
            load.join().unwrap();

            let errors = severe(&client, &driver).await;
            assert!(errors.is_empty(), "the browser logged errors: {errors:#?}");
            client.close().await.unwrap();
        });
    });
}
