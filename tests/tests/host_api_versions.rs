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

/// What `functions/compat/v1_2_0` gives `ops.kv-attention` (its constants): query heads,
/// key and value heads, head size, RoPE base, scale, and two steps of two sequences as
/// `(rows, position)` each.
const HEADS: usize = 2;
const KV_HEADS: usize = 1;
const D: usize = 4;
const ROPE_BASE: f64 = 10_000.0;
const SCALE: f64 = 0.5;
const STEPS: [[(usize, usize); 2]; 2] = [[(3, 0), (2, 0)], [(1, 3), (1, 2)]];

/// Element `i` of input `which` (0 q, 1 k, 2 v) of step `step`, as the fixture makes it.
fn kv_value(step: usize, which: usize, i: usize) -> f64 {
    ((i * 7 + step * 5 + which * 3) % 17) as f64 / 4.0 - 2.0
}

/// Rows of `D` of a head-interleaved row turned by RoPE at `position` (adjacent pairs).
fn rope(x: &[f64], position: usize) -> Vec<f64> {
    let mut out = x.to_vec();
    for head in out.chunks_exact_mut(D) {
        for (i, pair) in head.chunks_exact_mut(2).enumerate() {
            let theta = position as f64 * ROPE_BASE.powf(-2.0 * i as f64 / D as f64);
            let (c, s) = (theta.cos(), theta.sin());
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * c - b * s;
            pair[1] = a * s + b * c;
        }
    }
    out
}

/// The fixture's two steps computed here in f64, from the WIT's definition: per
/// sequence, RoPE of its q and k rows at their positions, k and v appended to its
/// caches, causal grouped-query attention over what the caches hold. `[7, HEADS, D]`.
fn kv_attention_reference() -> Vec<f64> {
    let mut caches = vec![(Vec::<Vec<f64>>::new(), Vec::<Vec<f64>>::new()); 2];
    let mut out = Vec::new();
    for (step, spans) in STEPS.iter().enumerate() {
        let mut first = 0;
        for (&(rows, position), (keys, values)) in spans.iter().zip(&mut caches) {
            assert_eq!(keys.len(), position);
            let row_of = |which: usize, heads: usize, row: usize| -> Vec<f64> {
                (row * heads * D..(row + 1) * heads * D).map(|i| kv_value(step, which, i)).collect()
            };
            for r in 0..rows {
                keys.push(rope(&row_of(1, KV_HEADS, first + r), position + r));
                values.push(row_of(2, KV_HEADS, first + r));
            }
            for r in 0..rows {
                let q = rope(&row_of(0, HEADS, first + r), position + r);
                for (h, qh) in q.chunks_exact(D).enumerate() {
                    let g = (h / (HEADS / KV_HEADS)) * D..(h / (HEADS / KV_HEADS) + 1) * D;
                    let scores: Vec<f64> = keys[..=position + r]
                        .iter()
                        .map(|k| SCALE * qh.iter().zip(&k[g.clone()]).map(|(a, b)| a * b).sum::<f64>())
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    out.extend((0..D).map(|e| {
                        weights.iter().zip(values.iter()).map(|(w, v)| w * v[g.start + e]).sum::<f64>() / total
                    }));
                }
            }
            first += rows;
        }
    }
    out
}

/// Checks the 1.2.0 fixture's `kv` (two steps of `ops.kv-attention`) and `chain` (the
/// same through `rope`, `write-rows` and `gqa-attention`, which the WIT says it equals
/// exactly): bit for bit the same, and both the reference computed here; removes them
/// from `extra`.
fn check_kv_attention(name: &str, extra: &mut Vec<Value>) {
    let mut take = |n: &str| {
        let at = extra.iter().position(|o| o["name"] == n).unwrap_or_else(|| panic!("{name}: no `{n}`"));
        let output = extra.remove(at);
        assert_eq!(output["shape"], json!([7, HEADS, D]), "{name}: {n}");
        assert_eq!(output["datatype"], "FP32", "{name}: {n}");
        floats(&output["data"])
    };
    let (kv, chain) = (take("kv"), take("chain"));
    assert_eq!(kv, chain, "{name}: kv-attention is not its chain");
    let reference = kv_attention_reference();
    assert!(reference.iter().any(|v| v.abs() > 0.5) && reference.chunks(D).any(|row| row != &reference[..D]));
    for (i, (got, want)) in kv.iter().zip(&reference).enumerate() {
        assert!((f64::from(*got) - want).abs() < 1e-4, "{name}: kv[{i}] = {got}, want {want}");
    }
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
        let mut extra = check_common(&name, &infer(&server, &key, &name));
        if *version >= semver::Version::new(1, 2, 0) {
            // 1.2.0 added `ops.kv-attention`: the fixture returns it and its chain.
            check_kv_attention(&name, &mut extra);
        }
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

    // Built against an invented 1.3.0 and calling what it added (`artifacts.sizes`).
    let e = deploy("newer", sluice_tests::function_wasm("compat_newer")).expect_error(400, "host_api_unsupported");
    assert!(e.starts_with("the component was built against sluice:gpu/artifacts@1.3.0"), "{e}");
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
