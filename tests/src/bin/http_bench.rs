//! HTTP benchmark of `echo` through a real `sluice serve` process.
//!
//! `cargo run --release -p sluice-tests --bin http-bench [-- --requests N --seconds S]`
//! starts the server (built with the same profile), creates a tenant, and prints:
//!
//! - deploy → first successful invoke (one keep-alive connection, wall clock);
//! - 1 client, HTTP/1.1 keep-alive: p50/p90/p99 latency of `POST /v1/functions/echo/invoke`
//!   with a 4-element FP32 input, plus the server's own timing headers (median);
//! - 16 concurrent clients (one keep-alive connection each): requests/s and latency.
//!
//! Targets (DESIGN.md / the HTTP issue): p50 ≤ 250 µs, deploy → first invoke ≤ 200 ms.

use std::time::{Duration, Instant};

use sluice_tests::{RawConn, Server, fp32_request, function_wasm};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

fn main() {
    let requests = arg("--requests", 5000) as usize;
    let seconds = arg("--seconds", 5);
    let clients = arg("--clients", 16) as usize;
    let server = Server::start();
    let key = server.create_tenant("bench");
    let body = serde_json::to_vec(&fp32_request(&[1.0, 2.0, 3.0, 4.0])).unwrap();
    let wasm = function_wasm("echo");
    let mut conn = RawConn::connect(server.addr()).unwrap();

    // Deploy → first successful invoke.
    let t0 = Instant::now();
    let r = conn.request_typed("PUT", "/v1/functions/echo", &key, "application/wasm", &wasm).unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let deployed = t0.elapsed();
    loop {
        let r = conn.request("POST", "/v1/functions/echo/invoke", &key, &body).unwrap();
        if r.status == 200 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "echo never answered: {}", String::from_utf8_lossy(&r.body));
    }
    let first_invoke = t0.elapsed();

    // One client, keep-alive.
    for _ in 0..200 {
        conn.request("POST", "/v1/functions/echo/invoke", &key, &body).unwrap();
    }
    let mut lat = Vec::with_capacity(requests);
    let (mut queue, mut inst, mut exec) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..requests {
        let t = Instant::now();
        let r = conn.request("POST", "/v1/functions/echo/invoke", &key, &body).unwrap();
        lat.push(t.elapsed());
        assert_eq!(r.status, 200);
        let h = |name: &str| r.headers.get(name).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        queue.push(h("x-sluice-queue-us"));
        inst.push(h("x-sluice-instantiate-us"));
        exec.push(h("x-sluice-execute-us"));
    }
    lat.sort();
    for v in [&mut queue, &mut inst, &mut exec] {
        v.sort();
    }
    let med = |v: &[u64]| v[v.len() / 2];

    // The HTTP floor: the same connection on endpoints that run no function.
    let mut floor = |method: &str, path: &str| {
        let mut l: Vec<Duration> = (0..2000)
            .map(|_| {
                let t = Instant::now();
                let r = conn.request(method, path, &key, b"").unwrap();
                assert_eq!(r.status, 200);
                t.elapsed()
            })
            .collect();
        l.sort();
        percentile(&l, 0.5)
    };
    let health = floor("GET", "/v2/health/live");
    let authed = floor("GET", "/v2");

    // Concurrent clients, each with its own keep-alive connection.
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let per_client: Vec<(u64, Vec<Duration>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| {
                    let mut c = RawConn::connect(server.addr()).unwrap();
                    let (mut n, mut l) = (0u64, Vec::new());
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let r = c.request("POST", "/v1/functions/echo/invoke", &key, &body).unwrap();
                        l.push(t.elapsed());
                        if r.status == 200 {
                            n += 1;
                        }
                    }
                    (n, l)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = started.elapsed();
    let ok: u64 = per_client.iter().map(|(n, _)| n).sum();
    let total: usize = per_client.iter().map(|(_, l)| l.len()).sum();
    let mut all: Vec<Duration> = per_client.into_iter().flat_map(|(_, l)| l).collect();
    all.sort();

    println!(
        "sluice HTTP benchmark: echo, 4 x FP32, HTTP/1.1 keep-alive, {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("deploy (PUT → 201):              {:>9.1} ms", deployed.as_secs_f64() * 1e3);
    println!("deploy → first successful invoke: {:>9.1} ms   (target ≤ 200 ms)", first_invoke.as_secs_f64() * 1e3);
    println!(
        "1 client, {requests} requests:       p50 {:.0} µs  p90 {:.0} µs  p99 {:.0} µs  (target p50 ≤ 250 µs)",
        us(percentile(&lat, 0.5)),
        us(percentile(&lat, 0.9)),
        us(percentile(&lat, 0.99))
    );
    println!(
        "  HTTP floor (p50):               GET /v2/health/live {:.0} µs, GET /v2 (with key check) {:.0} µs",
        us(health),
        us(authed)
    );
    println!(
        "  server-side medians:            queue {} µs  instantiate {} µs  execute {} µs",
        med(&queue),
        med(&inst),
        med(&exec)
    );
    println!(
        "{clients} clients, {:.1} s:             {:.0} requests/s ({ok} ok of {total})  p50 {:.0} µs  p99 {:.0} µs",
        elapsed.as_secs_f64(),
        ok as f64 / elapsed.as_secs_f64(),
        us(percentile(&all, 0.5)),
        us(percentile(&all, 0.99))
    );
}
