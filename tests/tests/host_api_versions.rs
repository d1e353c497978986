//! A host upgrade keeps every deployed component running: components built against each
//! frozen host API version (`host-api/wit-released/<version>`, the fixtures in
//! `functions/compat/` and `functions/compat-py-0-1-0/`) deploy and answer on today's
//! host, over HTTP, and each version shows the host API version it was built against.
//! A component that needs more than this host offers is refused at deploy with
//! `host_api_unsupported`, naming the interface and version, and changes nothing.

use serde_json::{Value, json};
use sluice_host_api::version::{CURRENT, RELEASED};
use sluice_tests::Server;

/// The input every fixture takes.
const X: [f32; 6] = [1.0, -2.0, 0.5, 3.0, 0.25, -1.0];

/// What every fixture computes from `X` (see `functions/compat/guest.rs`): `buf`, zeros
/// `[4, 2]` with rows 1..3 = `2 * (x @ w)`, and its row sums.
fn expected() -> (Vec<f32>, Vec<f32>) {
    let w = [[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]];
    let mut buf = vec![0.0f32; 8];
    for row in 0..2 {
        for col in 0..2 {
            let dot: f32 = (0..3).map(|k| X[row * 3 + k] * w[k][col]).sum();
            buf[(row + 1) * 2 + col] = 2.0 * dot;
        }
    }
    let sums = buf.chunks(2).map(|r| r[0] + r[1]).collect();
    (buf, sums)
}

fn infer(server: &Server, key: &str, name: &str) -> Vec<Value> {
    let request = json!({ "inputs": [{ "name": "x", "shape": [2, 3], "datatype": "FP32", "data": X }] });
    let outputs = server.post_json(&format!("/v2/models/{name}/infer"), key, &request).expect(200)["outputs"].clone();
    outputs.as_array().cloned().unwrap_or_default()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// Checks the common outputs of a fixture and returns the others.
fn check_common(name: &str, outputs: &[Value]) -> Vec<Value> {
    let (buf, sums) = expected();
    let by_name = |n: &str| outputs.iter().find(|o| o["name"] == n).unwrap_or_else(|| panic!("{name}: no `{n}`"));
    assert_eq!(by_name("buf")["shape"], json!([4, 2]), "{name}");
    assert_eq!(floats(&by_name("buf")["data"]), buf, "{name}: buf");
    assert_eq!(floats(&by_name("sum")["data"]), sums, "{name}: sum");
    outputs.iter().filter(|o| o["name"] != "buf" && o["name"] != "sum").cloned().collect()
}

/// The version a deployed function's newest version was built against, as the
/// function listing, the function's own view and the model metadata show it.
fn shown_host_api(server: &Server, key: &str, name: &str) -> Value {
    let listed = server.get("/v1/functions", key).expect(200);
    let listed =
        listed["functions"].as_array().unwrap().iter().find(|f| f["name"] == name).unwrap()["host_api"].clone();
    let own = server.get(&format!("/v1/functions/{name}"), key).expect(200);
    assert_eq!(own["host_api"], listed, "{name}");
    assert_eq!(own["versions"].as_array().unwrap().last().unwrap()["host_api"], listed, "{name}");
    assert_eq!(server.get(&format!("/v2/models/{name}"), key).expect(200)["host_api"], listed, "{name}");
    listed
}

#[test]
fn components_built_against_every_released_host_api_run_on_this_host() {
    let server = Server::start();
    let key = server.create_tenant("compat");
    assert_eq!(RELEASED.last(), Some(&CURRENT));
    // One Rust fixture per released version: releasing a version without one fails here.
    for version in &RELEASED {
        let wasm = format!("compat_v{}_{}_{}", version.major, version.minor, version.patch);
        let name = wasm.replace('_', "-");
        server.deploy(&key, &name, &wasm, "");
        if *version >= semver::Version::new(1, 1, 0) {
            // 1.1.0 added `artifacts.names`: the fixture returns what it sees.
            let body = Some(("application/octet-stream", b"hello".to_vec()));
            server.call("PUT", &format!("/v1/functions/{name}/artifacts/note.txt"), Some(&key), body).expect(201);
        }
        let extra = check_common(&name, &infer(&server, &key, &name));
        if *version >= semver::Version::new(1, 1, 0) {
            assert_eq!(
                extra,
                [json!({ "name": "artifacts", "shape": [1], "datatype": "BYTES", "data": ["note.txt"] })]
            );
        } else {
            assert_eq!(extra, Vec::<Value>::new(), "{name}");
        }
        assert_eq!(shown_host_api(&server, &key, &name), json!(version.to_string()), "{name}");
    }

    // A Python component of the unversioned era (componentize-py imports every interface).
    server.deploy(&key, "compat-py", "compat_py_0_1_0", "timeout_ms=60000");
    check_common("compat-py", &infer(&server, &key, "compat-py"));
    assert_eq!(shown_host_api(&server, &key, "compat-py"), json!("0.1.0"));

    // Today's SDK builds against the current version.
    server.deploy(&key, "echo", "echo", "");
    assert_eq!(shown_host_api(&server, &key, "echo"), json!(CURRENT.to_string()));
}

#[test]
fn a_component_needing_more_than_this_host_offers_is_refused_at_deploy_and_changes_nothing() {
    let server = Server::start();
    let key = server.create_tenant("compat");
    let deploy = |name: &str, wasm: Vec<u8>| server.put_bytes(&format!("/v1/functions/{name}"), &key, wasm);

    // Built against 1.2.0 and calling what it added (`artifacts.sizes`).
    let e = deploy("newer", sluice_tests::function_wasm("compat_newer")).expect_error(400, "host_api_unsupported");
    assert!(e.starts_with("the component was built against sluice:gpu/artifacts@1.2.0"), "{e}");
    assert!(e.contains(&format!("this server's {CURRENT}")), "{e}");
    server.get("/v1/functions/newer", &key).expect_error(404, "not_found");

    // Another major version: the 1.0.0 fixture's imports renamed to 2.0.0 (same length).
    let v1 = sluice_tests::function_wasm("compat_v1_0_0");
    let v2 = replace_all(&v1, b"sluice:gpu/types@1.0.0", b"sluice:gpu/types@2.0.0");
    assert_ne!(v1, v2);
    let e = deploy("major", v2).expect_error(400, "host_api_unsupported");
    assert!(e.contains("sluice:gpu/types@2.0.0") && e.contains("does not offer"), "{e}");
    server.get("/v1/functions/major", &key).expect_error(404, "not_found");
    assert_eq!(server.get("/v1/functions", &key).expect(200)["functions"], json!([]));

    // The same component at a version it can have still deploys.
    deploy("fine", v1).expect(201);
}

fn replace_all(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = haystack.to_vec();
    let mut i = 0;
    while let Some(at) = out[i..].windows(from.len()).position(|w| w == from) {
        out[i + at..i + at + to.len()].copy_from_slice(to);
        i += at + to.len();
    }
    out
}
