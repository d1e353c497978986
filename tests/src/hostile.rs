//! The hostile-load suite, shared by its short form in the test run
//! (`tests/hostile.rs`, seconds) and `cargo xtask soak` (the `soak` binary, minutes).
//!
//! [`hostile_load`]: a victim tenant (latency class, `echo`, one client) measured alone
//! and then beside flooding (`misbehave` `leak`), looping (`loop`), memory-hungry
//! (`oom`), quota-breaking (`leak` under a 1 MiB quota) and trapping (`trap`) tenants,
//! and tenants that attack what the host shares besides the device (a GGUF bomb, slow
//! uploads, hoarded instance slots, an old version hammered, status and feed floods, a
//! disk filler: [`Attack`]), driven by many concurrent clients, while the victim also
//! deploys another function in a loop; it reports the victim's p50/p99 alone (a short
//! run, and one as long as the load: the bar's baseline) and beside them, every
//! response counted by tenant, status and code, the 5xx nobody should see (and any
//! failed victim deploy), the disk filler's acknowledged uploads missing afterwards, and
//! the server's resident memory: cold, at the start of the measured load (after a short
//! warm-up burst of it), right after, and settled, and how much of it is Wasm linear
//! memories (warm instances keep theirs until they go idle).
//!
//! The crash loop that the soak runs after it is [`crate::crash_loop`].

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use crate::attacks::Attack;
use crate::attacks::code_of;
use crate::resident::{WASM_MEMORIES, growth, resident_by_kind, rss_kib, threads};
use crate::wakeup::enter_idle_class;
use crate::{ADMIN_KEY, RawConn, Server, ServerOptions, fp32_request, function_wasm};

/// A hostile tenant: its name, its attack, and the 5xx codes its attack explains besides
/// [`ANY_HOSTILE`].
#[derive(Clone, Copy, Debug)]
pub struct Hostile {
    pub tenant: &'static str,
    pub attack: Attack,
    pub explained: &'static [&'static str],
}

const fn hostile(tenant: &'static str, attack: Attack, explained: &'static [&'static str]) -> Hostile {
    Hostile { tenant, attack, explained }
}

/// The hostile tenants: guests that misbehave on the device, then tenants that attack
/// what the host shares besides it (see [`Attack`]).
pub const HOSTILE: [Hostile; 11] = [
    hostile("flood", Attack::Invoke("leak"), &["quota_exceeded", "function_failed"]),
    hostile("looper", Attack::Invoke("loop"), &[]),
    hostile("hungry", Attack::Invoke("oom"), &["memory_limit_exceeded"]),
    hostile("quota", Attack::Invoke("leak"), &["quota_exceeded", "function_failed"]),
    hostile("trapper", Attack::Invoke("trap"), &["function_trapped"]),
    // The guest's `metadata` call is refused past the host's bound: the guest fails.
    hostile("bomber", Attack::GgufBomb, &["function_failed"]),
    hostile("trickler", Attack::SlowUpload, &[]),
    hostile("hoarder", Attack::SlotHoard, &[]),
    hostile("hammer", Attack::OldVersions, &[]),
    hostile("watcher", Attack::StatusFlood, &[]),
    hostile("filler", Attack::DiskFill, &[]),
];

/// Invocations the admin lets each hostile tenant have in flight: `HOSTILE.len() *
/// HOSTILE_CONCURRENCY` clients keep every hostile tenant at its admission limit without
/// a single 429 from it; more clients are refused the rest.
pub const HOSTILE_CONCURRENCY: usize = 8;

/// A server for the `hostile` tenants: its server-wide admission limit leaves room for
/// all of them at their own limits and for the victim.
pub fn server_for(hostile: &[Hostile]) -> Server {
    let limit = (hostile.len() * HOSTILE_CONCURRENCY + 16).max(64);
    Server::start_with(ServerOptions {
        args: vec!["--max-concurrency".into(), limit.to_string()],
        ..ServerOptions::default()
    })
}

/// 5xx any hostile tenant may get for its own invocations: its own deadline (504).
/// Everything else (`internal`, `storage`, `corrupt`, `insufficient_device_memory`, …)
/// is unexpected, and so is any error of the victim.
pub const ANY_HOSTILE: &[&str] = &["timeout"];

/// What [`hostile_load`] measured.
#[derive(Debug, Default)]
pub struct HostileReport {
    /// The victim alone, a short run right after set-up: (p50, p99).
    pub solo: (Duration, Duration),
    /// The victim alone for as long as the load lasts, (p50, p99, requests): the bar's
    /// baseline ([`HostileReport::p99_ratio`]).
    pub solo_window: (Duration, Duration, usize),
    /// The victim beside the hostile tenants: (p50, p99).
    pub loaded: (Duration, Duration),
    /// Victim requests measured under load.
    pub victim_requests: usize,
    /// Where the slowest 1 % of the victim's requests under load spent their time.
    pub slowest: Breakdown,
    /// Responses by `tenant status code` (code empty for 2xx).
    pub counts: BTreeMap<String, u64>,
    /// Responses no tenant should get: any victim error, any 5xx a hostile tenant's mode does not explain.
    pub unexpected: Vec<String>,
    /// The disk filler's acknowledged (201) artifacts missing from its newest version
    /// after the load (must be empty).
    pub lost: Vec<String>,
    /// Server RSS in KiB: before any hostile request (`cold`), at the start of the
    /// measured load (after a short warm-up burst of the same load and a settling
    /// pause), right after the load, and after a settling pause.
    pub rss: RssKib,
    /// What changed between the start and the settled point, by kind of mapping (KiB,
    /// largest change first).
    pub rss_growth: Vec<(&'static str, i64)>,
    /// The server's threads at the start of the measured load and settled after it.
    pub threads: (u64, u64),
}

/// Where a set of requests spent their time, on average, from the server's timing
/// headers (`x-sluice-queue-us`, `x-sluice-instantiate-us`, `x-sluice-execute-us`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Breakdown {
    /// Requests averaged.
    pub requests: usize,
    /// As the client saw it.
    pub total: Duration,
    /// From the server's receipt to the guest's start (admission, the hand-off to a
    /// guest thread).
    pub queue: Duration,
    /// Creating the instance (near zero for a warm one).
    pub instantiate: Duration,
    /// In the guest, its waits for the device included.
    pub execute: Duration,
}

impl Breakdown {
    /// The rest: the HTTP server, the response's way back, the client and the network.
    pub fn outside(&self) -> Duration {
        self.total.saturating_sub(self.queue + self.instantiate + self.execute)
    }

    /// The mean of the slowest `fraction` of `samples`.
    fn of_slowest(mut samples: Vec<Sample>, fraction: f64) -> Breakdown {
        samples.sort_by_key(|s| std::cmp::Reverse(s.total));
        let n = ((samples.len() as f64 * fraction).ceil() as usize).min(samples.len());
        let slowest = &samples[..n];
        let mean = |f: fn(&Sample) -> Duration| slowest.iter().map(f).sum::<Duration>() / n.max(1) as u32;
        Breakdown {
            requests: n,
            total: mean(|s| s.total),
            queue: mean(|s| s.queue),
            instantiate: mean(|s| s.instantiate),
            execute: mean(|s| s.execute),
        }
    }
}

/// One victim request: its latency and the server's timing headers.
#[derive(Debug, Clone, Copy)]
struct Sample {
    total: Duration,
    queue: Duration,
    instantiate: Duration,
    execute: Duration,
}

/// The server's resident set at the points [`hostile_load`] looks, in KiB.
#[derive(Debug, Default, Clone, Copy)]
pub struct RssKib {
    pub cold: u64,
    pub start: u64,
    pub after_load: u64,
    pub settled: u64,
    /// Of `start` and `settled`, the Wasm linear memories (warm instances keep theirs,
    /// up to their function's memory limit, until they go idle).
    pub wasm_start: u64,
    pub wasm_settled: u64,
}

impl RssKib {
    /// Settled against start: 1.0 is back where the measured load began.
    pub fn settled_ratio(&self) -> f64 {
        self.settled as f64 / self.start.max(1) as f64
    }

    /// [`RssKib::settled_ratio`] without the Wasm linear memories.
    pub fn settled_ratio_less_wasm(&self) -> f64 {
        self.settled.saturating_sub(self.wasm_settled) as f64 / self.start.saturating_sub(self.wasm_start).max(1) as f64
    }
}

impl HostileReport {
    /// The victim's p99 under load against its p99 alone over a window as long: both
    /// tails then take in the same span of the machine's own rare stalls (timer ticks,
    /// the kernel's housekeeping, the server's idle trims), which a short solo run
    /// mostly misses.
    pub fn p99_ratio(&self) -> f64 {
        self.loaded.1.as_secs_f64() / self.solo_window.1.as_secs_f64().max(1e-6)
    }

    /// A human-readable summary.
    pub fn print(&self) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!("victim solo, short run:        p50 {:.2} ms  p99 {:.2} ms", ms(self.solo.0), ms(self.solo.1));
        println!(
            "victim solo, the load's length: p50 {:.2} ms  p99 {:.2} ms  ({} requests)",
            ms(self.solo_window.0),
            ms(self.solo_window.1),
            self.solo_window.2
        );
        println!(
            "victim loaded:                 p50 {:.2} ms  p99 {:.2} ms  ({} requests; p99 {:.2}× the short solo run's, {:.2}× the solo window's)",
            ms(self.loaded.0),
            ms(self.loaded.1),
            self.victim_requests,
            ms(self.loaded.1) / ms(self.solo.1).max(1e-3),
            self.p99_ratio()
        );
        let b = self.slowest;
        println!(
            "victim's slowest {} requests under load: mean {:.2} ms = {:.2} before the guest ran + {:.2} instantiating + {:.2} in the guest + {:.2} outside the invocation (HTTP, client)",
            b.requests,
            ms(b.total),
            ms(b.queue),
            ms(b.instantiate),
            ms(b.execute),
            ms(b.outside())
        );
        for (k, n) in &self.counts {
            println!("  {k:<48} {n}");
        }
        println!(
            "unexpected responses: {} {:?}",
            self.unexpected.len(),
            self.unexpected.iter().take(5).collect::<Vec<_>>()
        );
        println!("acknowledged uploads lost: {} {:?}", self.lost.len(), self.lost.iter().take(5).collect::<Vec<_>>());
        let r = self.rss;
        println!(
            "server RSS: cold {} MiB, start {} MiB (after a warm-up burst), after load {} MiB, settled {} MiB ({:.2}× start)",
            r.cold / 1024,
            r.start / 1024,
            r.after_load / 1024,
            r.settled / 1024,
            r.settled_ratio()
        );
        println!(
            "server RSS of Wasm linear memories (warm instances keep theirs): start {} MiB, settled {} MiB; the rest settled at {:.2}× its start",
            r.wasm_start / 1024,
            r.wasm_settled / 1024,
            r.settled_ratio_less_wasm()
        );
        let growth: Vec<String> = self
            .rss_growth
            .iter()
            .take(4)
            .map(|(kind, kib)| format!("{kind} {:+.1} MiB", *kib as f64 / 1024.0))
            .collect();
        println!(
            "server RSS, start to settled, by kind: {}; threads {} → {}",
            growth.join(", "),
            self.threads.0,
            self.threads.1
        );
    }
}

fn percentiles(samples: Vec<Sample>) -> (Duration, Duration) {
    let mut v: Vec<Duration> = samples.iter().map(|s| s.total).collect();
    if v.is_empty() {
        return (Duration::ZERO, Duration::ZERO);
    }
    v.sort();
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

/// The victim's latencies of `n` echo invocations on one keep-alive connection, or
/// until `stop` is set.
fn victim_run(
    server: &Server,
    key: &str,
    n: usize,
    stop: Option<&AtomicBool>,
    unexpected: &Mutex<Vec<String>>,
) -> Vec<Sample> {
    let body = serde_json::to_vec(&fp32_request(&[1.0, 2.0, 3.0, 4.0])).expect("json");
    let mut conn = RawConn::connect(server.addr()).expect("connect");
    let mut lat = Vec::with_capacity(n.min(1 << 16));
    while lat.len() < n && !stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
        let t = Instant::now();
        let r = conn.request("POST", "/v1/functions/echo/invoke", key, &body).expect("victim request");
        let total = t.elapsed();
        let us = |h: &str| Duration::from_micros(r.headers.get(h).and_then(|v| v.parse().ok()).unwrap_or(0));
        lat.push(Sample {
            total,
            queue: us("x-sluice-queue-us"),
            instantiate: us("x-sluice-instantiate-us"),
            execute: us("x-sluice-execute-us"),
        });
        if r.status != 200 {
            unexpected.lock().unwrap().push(format!("victim {} {}", r.status, String::from_utf8_lossy(&r.body)));
        }
    }
    lat
}

/// Where the hostile clients' threads run on this machine, which the server shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generator {
    /// At the process's own priority, beside the victim's client: they take cores from
    /// the server and the victim's client both, as no remote client could.
    SamePriority,
    /// In the idle class (`SCHED_IDLE`): they run on cores that nothing else wants, as
    /// clients on other machines would leave this one's cores to the server. The victim's
    /// client keeps its priority.
    IdleClass,
}

/// Runs the hostile-load scenario on `server` for `load` with `clients` hostile clients
/// spread over `hostile` (all of [`HOSTILE`], or some of them to see which hurts), their
/// threads run as `generator` says. The victim is first measured alone twice:
/// `solo_requests` requests, then for as long as `load` (the bar's baseline).
pub fn hostile_load(
    server: &Server,
    hostile: &[Hostile],
    load: Duration,
    clients: usize,
    generator: Generator,
    solo_requests: usize,
) -> HostileReport {
    let victim = server.create_tenant("victim");
    let grant = serde_json::to_vec(&json!({ "max_priority": "latency" })).expect("json");
    server.call("PATCH", "/v1/tenants/victim", Some(ADMIN_KEY), Some(("application/json", grant))).expect(200);
    server.deploy(&victim, "echo", "echo", "priority=latency");
    let mut tenants: Vec<(Hostile, String)> = Vec::new();
    for h in hostile {
        let key = server.create_tenant(h.tenant);
        h.attack.set_up(server, &key);
        tenants.push((*h, key));
    }
    // The admin bounds each hostile tenant, so together they stay within the server's
    // admission limit and the victim is admitted.
    for h in hostile {
        let bound = serde_json::to_vec(&json!({ "max_concurrency": HOSTILE_CONCURRENCY })).expect("json");
        server
            .call("PATCH", &format!("/v1/tenants/{}", h.tenant), Some(ADMIN_KEY), Some(("application/json", bound)))
            .expect(200);
    }
    if hostile.iter().any(|h| h.tenant == "quota") {
        let quota = serde_json::to_vec(&json!({ "memory_quota_bytes": 1 << 20 })).expect("json");
        server.call("PATCH", "/v1/tenants/quota", Some(ADMIN_KEY), Some(("application/json", quota))).expect(200);
    }

    let unexpected = Mutex::new(Vec::new());
    let warm = victim_run(server, &victim, 50, None, &unexpected);
    drop(warm);
    let solo = percentiles(victim_run(server, &victim, solo_requests, None, &unexpected));
    // The bar's baseline: alone for as long as the load will last.
    let solo_window = {
        let stop = AtomicBool::new(false);
        let samples = std::thread::scope(|s| {
            let run = s.spawn(|| victim_run(server, &victim, usize::MAX, Some(&stop), &unexpected));
            std::thread::sleep(load);
            stop.store(true, Ordering::Relaxed);
            run.join().expect("victim thread")
        });
        let n = samples.len();
        let (p50, p99) = percentiles(samples);
        (p50, p99, n)
    };
    let pid = server.pid();
    let cold = rss_kib(pid);
    // A short burst of the same load first, so that what the server keeps for good
    // (compiled code, warm instances, tenant state, threads) is there when the measured
    // load starts; its responses are checked, not counted.
    let warm_up = (load / 10).clamp(Duration::from_millis(300), Duration::from_secs(3));
    let mut tally = Tally { unexpected, ..Tally::default() };
    hostile_burst(server, &tenants, clients, generator, warm_up, None, &tally);
    // The warm-up's responses are checked, not counted.
    tally.counts = Mutex::new(BTreeMap::new());
    std::thread::sleep(SETTLE);
    let start = rss_kib(pid);
    let start_kinds = resident_by_kind(pid);
    let start_threads = threads(pid);

    let loaded = hostile_burst(server, &tenants, clients, generator, load, Some(&victim), &tally);
    let after_load = rss_kib(pid);
    std::thread::sleep(SETTLE);
    let settled = rss_kib(pid);
    let settled_kinds = resident_by_kind(pid);
    let rss_growth = growth(&start_kinds, &settled_kinds);
    let wasm = |kinds: &BTreeMap<&str, u64>| kinds.get(WASM_MEMORIES).copied().unwrap_or(0);
    let (wasm_start, wasm_settled) = (wasm(&start_kinds), wasm(&settled_kinds));
    let Tally { counts, acked, unexpected } = tally;
    let lost = missing_artifacts(server, &tenants, &acked.into_inner().unwrap());
    HostileReport {
        solo,
        solo_window,
        victim_requests: loaded.len(),
        slowest: Breakdown::of_slowest(loaded.clone(), 0.01),
        loaded: percentiles(loaded),
        counts: counts.into_inner().unwrap(),
        unexpected: unexpected.into_inner().unwrap(),
        lost,
        rss: RssKib { cold, start, after_load, settled, wasm_start, wasm_settled },
        rss_growth,
        threads: (start_threads, threads(pid)),
    }
}

/// Long enough for the server's idle heap trim (it looks every 2 s) to have run.
const SETTLE: Duration = Duration::from_secs(5);

/// What the hostile clients' responses came to.
#[derive(Default)]
struct Tally {
    /// Responses by `tenant status code`.
    counts: Mutex<BTreeMap<String, u64>>,
    /// The disk filler's acknowledged artifacts.
    acked: Mutex<Vec<String>>,
    /// Responses no tenant should get.
    unexpected: Mutex<Vec<String>>,
}

/// `clients` hostile clients round-robin over the hostile `tenants` (with their keys) for `load`,
/// counting their responses; with `victim`, the victim's latencies meanwhile.
fn hostile_burst(
    server: &Server,
    tenants: &[(Hostile, String)],
    clients: usize,
    generator: Generator,
    load: Duration,
    victim: Option<&str>,
    tally: &Tally,
) -> Vec<Sample> {
    let Tally { counts, acked, unexpected } = tally;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for c in 0..clients {
            let (Hostile { tenant, attack, explained }, key) = tenants[c % tenants.len()].clone();
            let stop = &stop;
            s.spawn(move || {
                if generator == Generator::IdleClass && !enter_idle_class() {
                    eprintln!("hostile client: the idle class was refused; it runs at normal priority");
                }
                let Ok(mut conn) = RawConn::connect(server.addr()) else { return };
                let mut n = c as u64;
                while !stop.load(Ordering::Relaxed) {
                    n += clients as u64;
                    let Some((status, code)) = attack.step(server, &mut conn, &key, n, stop) else {
                        if stop.load(Ordering::Relaxed) {
                            return; // cut short by the end of the load
                        }
                        unexpected.lock().unwrap().push(format!("{tenant}: connection failed"));
                        return;
                    };
                    *counts.lock().unwrap().entry(format!("{tenant} {status} {code}")).or_default() += 1;
                    if attack == Attack::DiskFill && status == 201 {
                        acked.lock().unwrap().push(format!("a{n}"));
                    }
                    if status >= 500 && !explained.contains(&code.as_str()) && !ANY_HOSTILE.contains(&code.as_str()) {
                        unexpected.lock().unwrap().push(format!("{tenant} {status} {code}"));
                    }
                    if status == 429 {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    // A step that hung up, or a refusal that closed the connection (an
                    // upload refused before its body was read ends its connection).
                    let refused_upload = attack == Attack::DiskFill && status >= 400;
                    if matches!(attack, Attack::SlowUpload | Attack::StatusFlood)
                        || refused_upload
                        || status == 408
                        || status == 413
                    {
                        match RawConn::connect(server.addr()) {
                            Ok(fresh) => conn = fresh,
                            Err(_) => return,
                        }
                    }
                }
            });
        }
        // The victim's control plane: deploys of another function go on under the load.
        let control = victim.map(|key| {
            let stop = &stop;
            s.spawn(move || {
                let wasm = function_wasm("echo");
                let mut deploys = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match server.try_call(
                        "PUT",
                        "/v1/functions/spare",
                        Some(key),
                        Some(("application/wasm", wasm.clone())),
                    ) {
                        Ok(r) if r.status == 201 => deploys += 1,
                        Ok(r) => {
                            unexpected.lock().unwrap().push(format!("victim deploy {} {}", r.status, code_of(&r.body)))
                        }
                        Err(e) => unexpected.lock().unwrap().push(format!("victim deploy: {e}")),
                    }
                    // Compiling takes a core for a while: one deploy a second is a busy team's pace.
                    std::thread::sleep(Duration::from_secs(1));
                }
                deploys
            })
        });
        let measured = victim.map(|key| s.spawn(|| victim_run(server, key, usize::MAX, Some(&stop), unexpected)));
        std::thread::sleep(load);
        stop.store(true, Ordering::Relaxed);
        if let Some(deploys) = control.map(|c| c.join().expect("control-plane thread")) {
            *counts.lock().unwrap().entry("victim deploys 201".into()).or_default() += deploys;
        }
        measured.map(|m| m.join().expect("victim thread")).unwrap_or_default()
    })
}

/// The disk filler's `acked` artifacts that its function's newest version lacks.
fn missing_artifacts(server: &Server, tenants: &[(Hostile, String)], acked: &[String]) -> Vec<String> {
    let Some((_, key)) = tenants.iter().find(|(h, _)| h.attack == Attack::DiskFill) else { return Vec::new() };
    let info = server.get("/v1/functions/fill", key).expect(200);
    let newest = info["versions"].as_array().and_then(|v| v.iter().max_by_key(|v| v["version"].as_u64()));
    let have = newest.map(|v| v["artifacts"].clone()).unwrap_or(Value::Null);
    acked.iter().filter(|a| have.get(a.as_str()).is_none()).cloned().collect()
}
