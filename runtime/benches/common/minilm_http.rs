//! The MiniLM benchmark over HTTP (part of the CUDA run of `minilm.rs`, which includes
//! this file): a sluice server in this process on a fresh device, `minilm-embed`
//! deployed with its artifacts through the API like any tenant's function, and batch-1
//! requests over the Open Inference Protocol from a keep-alive client on loopback.
//! Reports the client's wall clock per request (JSON in and out included) next to the
//! server's own timing headers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_runtime::cli::client::{Client, ClientArgs};
use sluice_runtime::device::Device;
use sluice_runtime::platform::{Platform, PlatformConfig};
use sluice_runtime::server::{self, BodyLimits};
use ureq::http::Method;

use super::common::{self, percentile};

const ADMIN_KEY: &str = "bench-admin-key-0123456789abcdef";

/// A server on `device` with `minilm-embed` deployed for tenant `bench`.
pub struct HttpBench {
    client: Client,
    data_dir: PathBuf,
    rt: tokio::runtime::Runtime,
    _platform: Arc<Platform>,
}

impl HttpBench {
    /// Starts the server and deploys the function (component and artifacts over HTTP).
    pub fn start(device: Box<dyn Device>) -> anyhow::Result<HttpBench> {
        let data_dir = std::env::temp_dir().join(format!("sluice-bench-http-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        let config = PlatformConfig { data_dir: data_dir.clone(), ..PlatformConfig::default() };
        let platform = Platform::open(config, vec![device])?;
        platform.registry().ensure_admin_key(Some(ADMIN_KEY.to_owned()))?;
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let url = format!("http://{}", listener.local_addr()?);
        rt.spawn(server::serve(listener, platform.clone(), BodyLimits::default(), Duration::from_secs(1)));

        let admin = Client::new(&ClientArgs { url: url.clone(), key: Some(ADMIN_KEY.to_owned()) });
        let created = admin.json(Method::POST, "/v1/tenants", Some(&json!({ "id": "bench", "settings": {} })))?;
        let key = created["key"].as_str().ok_or_else(|| anyhow::anyhow!("no key in {created}"))?.to_owned();
        let client = Client::new(&ClientArgs { url, key: Some(key) });
        let wasm = common::component("minilm_embed");
        client.send(Method::PUT, "/v1/functions/minilm-embed", Some(("application/wasm", wasm)))?.ok()?;
        for (name, file) in common::minilm_files() {
            let bytes = std::fs::read(&file)?;
            let path = format!("/v1/functions/minilm-embed/artifacts/{name}");
            client.send(Method::PUT, &path, Some(("application/octet-stream", bytes)))?.ok()?;
        }
        Ok(HttpBench { client, data_dir, rt, _platform: platform })
    }

    /// Checks, warms up and times `text` at `precision`, batch 1; one JSON record.
    pub fn case(&self, text: &str, precision: &str, (warmup, runs): (usize, usize), want: &[f64]) -> Value {
        match self.try_case(text, precision, (warmup, runs), want) {
            Ok(v) => v,
            Err(e) => json!({ "ok": false, "error": format!("{e:#}") }),
        }
    }

    fn try_case(
        &self,
        text: &str,
        precision: &str,
        (warmup, runs): (usize, usize),
        want: &[f64],
    ) -> anyhow::Result<Value> {
        let body = serde_json::to_vec(&json!({ "inputs": [
            { "name": "text", "shape": [1], "datatype": "BYTES", "data": [text] },
            { "name": "precision", "shape": [1], "datatype": "BYTES", "data": [precision] },
        ]}))?;
        let invoke = || {
            self.client.send(Method::POST, "/v2/models/minilm-embed/infer", Some(("application/json", body.clone())))
        };
        let first = invoke()?.ok()?.json()?;
        let got: Vec<f64> = first["outputs"]
            .as_array()
            .and_then(|o| o.iter().find(|t| t["name"] == "embedding"))
            .and_then(|t| t["data"].as_array())
            .map(|d| d.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let cos = cosine(&got, want);
        for _ in 0..warmup {
            invoke()?.ok()?;
        }
        let (mut walls, mut server_us) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
        let series = Instant::now();
        while walls.len() < runs && (walls.len() < 5 || series.elapsed() < Duration::from_secs(15)) {
            let t0 = Instant::now();
            let reply = invoke()?.ok()?;
            walls.push(t0.elapsed().as_secs_f64() * 1e3);
            let header = |h: &str| reply.header(h).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
            server_us
                .push(header("x-sluice-queue-us") + header("x-sluice-instantiate-us") + header("x-sluice-execute-us"));
        }
        walls.sort_by(f64::total_cmp);
        server_us.sort_by(f64::total_cmp);
        let bound = if precision == "f32" { 0.9999 } else { 0.995 };
        let ok = got.len() == want.len() && cos >= bound;
        Ok(json!({
            "ok": ok,
            "error": (!ok).then(|| format!("embedding over HTTP: {} values, cosine {cos:.6} to the CPU's f32 (< {bound}?)", got.len())),
            "runs": walls.len(),
            "p50_ms": percentile(&walls, 0.5),
            "p99_ms": percentile(&walls, 0.99),
            "server_p50_ms": percentile(&server_us, 0.5) / 1e3,
            "min_cosine": cos,
        }))
    }
}

impl Drop for HttpBench {
    fn drop(&mut self) {
        let rt =
            std::mem::replace(&mut self.rt, tokio::runtime::Builder::new_current_thread().build().expect("runtime"));
        rt.shutdown_timeout(Duration::from_millis(200));
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return f64::NAN;
    }
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}
