//! The Open Inference Protocol's three transports side by side, through a real
//! `sluice serve`: JSON over HTTP, the binary tensor data extension over HTTP, and gRPC
//! (`raw_input_contents`, as the standard clients send).
//!
//! `cargo run --release -p sluice-tests --bin oip-bench [-- --echo-requests N --minilm-requests N --clients C]`
//! starts the server (built with the same profile), deploys `echo` and `minilm-embed`
//! (the model from `SLUICE_MODEL_DIR` or `~/.cache/sluice/models`), and prints for each
//! workload and transport:
//!
//! - p50 latency of one client sending requests one after another on one connection;
//! - throughput of `C` clients at once, each on its own connection;
//! - the time sluice spends decoding the request and encoding the response (median of
//!   the server's own codec functions run in this process on the same bytes: the JSON
//!   parser and writer of `sluice_runtime::oip::json`, and prost plus
//!   `sluice_runtime::server::grpc::tensors` for gRPC).
//!
//! Workloads: `echo` on one FP32 tensor of 32×384 (the size of a batch of 32 MiniLM
//! embeddings) and `minilm-embed` on 32 sentences (the 16 reference sentences twice).

use std::time::{Duration, Instant};

use prost::Message;
use serde_json::{Value, json};
use sluice_runtime::engine::{IoData, IoTensor};
use sluice_runtime::oip::{self, InferResponse, ParamValue, Parameters};
use sluice_runtime::server::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use sluice_runtime::server::grpc::proto::model_infer_request::InferInputTensor;
use sluice_runtime::server::grpc::proto::{ModelInferRequest, ModelInferResponse};
use sluice_runtime::server::grpc::tensors;
use sluice_tests::fixtures::model_dir;
use sluice_tests::{RawConn, Resp, Server, repo_root};
use tonic::transport::Channel;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One workload: a model and its inputs.
struct Workload {
    label: &'static str,
    model: &'static str,
    inputs: Vec<IoTensor>,
    requests: usize,
}

/// The three request bodies of a workload.
struct Bodies {
    json: Vec<u8>,
    /// The JSON header's length and the whole body (header + binary).
    binary: (usize, Vec<u8>),
    grpc: ModelInferRequest,
}

fn bodies(inputs: &[IoTensor], model: &str) -> Bodies {
    let tensor_json = |t: &IoTensor, data: Option<Value>, size: Option<usize>| {
        let mut v = json!({ "name": t.name, "shape": t.shape, "datatype": oip::datatype_name(&t.data) });
        if let Some(d) = data {
            v["data"] = d;
        }
        if let Some(n) = size {
            v["parameters"] = json!({ "binary_data_size": n });
        }
        v
    };
    let json_inputs: Vec<Value> =
        inputs.iter().map(|t| tensor_json(t, Some(oip::json::data_json(&t.data)), None)).collect();
    let json = serde_json::to_vec(&json!({ "inputs": json_inputs })).unwrap();
    let mut binary = Vec::new();
    let mut raw = Vec::new();
    let header_inputs: Vec<Value> = inputs
        .iter()
        .map(|t| {
            let mut one = Vec::new();
            let n = oip::binary::encode(&t.data, &mut one);
            binary.extend_from_slice(&one);
            raw.push(one.into());
            tensor_json(t, None, Some(n))
        })
        .collect();
    let mut body =
        serde_json::to_vec(&json!({ "inputs": header_inputs, "parameters": { "binary_data_output": true } })).unwrap();
    let header_len = body.len();
    body.extend_from_slice(&binary);
    let grpc = ModelInferRequest {
        model_name: model.into(),
        inputs: inputs
            .iter()
            .map(|t| InferInputTensor {
                name: t.name.clone(),
                datatype: oip::datatype_name(&t.data).into(),
                shape: t.shape.iter().map(|&d| d as i64).collect(),
                ..Default::default()
            })
            .collect(),
        raw_input_contents: raw,
        ..Default::default()
    };
    Bodies { json, binary: (header_len, body), grpc }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Transport {
    Json,
    Binary,
    Grpc,
}

impl Transport {
    const ALL: [Transport; 3] = [Transport::Json, Transport::Binary, Transport::Grpc];

    fn label(self) -> &'static str {
        match self {
            Transport::Json => "JSON HTTP",
            Transport::Binary => "binary HTTP",
            Transport::Grpc => "gRPC",
        }
    }
}

/// One connection of one transport.
enum Conn {
    Http(RawConn),
    Grpc(GrpcInferenceServiceClient<Channel>, tokio::runtime::Handle),
}

impl Conn {
    fn open(transport: Transport, server: &Server, rt: &tokio::runtime::Runtime) -> Conn {
        match transport {
            Transport::Json | Transport::Binary => Conn::Http(RawConn::connect(server.addr()).unwrap()),
            Transport::Grpc => {
                let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr)).unwrap();
                let channel = rt.block_on(endpoint.tcp_nodelay(true).connect()).unwrap();
                Conn::Grpc(GrpcInferenceServiceClient::new(channel), rt.handle().clone())
            }
        }
    }

    /// One inference; panics unless it succeeds.
    fn infer(&mut self, transport: Transport, model: &str, key: &str, b: &Bodies) -> Option<ModelInferResponse> {
        let path = format!("/v2/models/{model}/infer");
        match (self, transport) {
            (Conn::Http(c), Transport::Json) => {
                check(c.request("POST", &path, key, &b.json).unwrap());
                None
            }
            (Conn::Http(c), _) => {
                let (header_len, body) = &b.binary;
                let head = format!(
                    "POST {path} HTTP/1.1\r\nhost: sluice\r\nauthorization: Bearer {key}\r\n\
                     content-type: application/octet-stream\r\ninference-header-content-length: {header_len}\r\n\
                     content-length: {}\r\n\r\n",
                    body.len()
                );
                c.write(&[head.as_bytes(), body].concat()).unwrap();
                let r = c.read_response().unwrap();
                assert!(r.headers.contains_key("inference-header-content-length"), "no binary response");
                check(r);
                None
            }
            (Conn::Grpc(client, rt), _) => {
                let mut request = tonic::Request::new(b.grpc.clone());
                request.metadata_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
                Some(rt.block_on(client.model_infer(request)).unwrap().into_inner())
            }
        }
    }
}

fn check(r: Resp) {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// The outputs of a gRPC response, decoded (what the server encoded).
fn outputs(r: &ModelInferResponse) -> Vec<(IoTensor, Parameters)> {
    r.outputs
        .iter()
        .zip(&r.raw_output_contents)
        .map(|(o, raw)| {
            let shape: Vec<u64> = o.shape.iter().map(|&d| d as u64).collect();
            let data = oip::binary::decode(&o.datatype, shape.iter().product(), raw).unwrap();
            (IoTensor { name: o.name.clone(), shape, data }, Parameters::new())
        })
        .collect()
}

/// Median time of `f` over enough runs to take about 0.3 s (at least 5).
fn codec_time(mut f: impl FnMut()) -> Duration {
    let t = Instant::now();
    f();
    let runs = ((0.3 / t.elapsed().as_secs_f64().max(1e-7)) as usize).clamp(5, 2000);
    median((0..runs).map(|_| (Instant::now(), f())).map(|(t, ())| t.elapsed()).collect())
}

/// (decode, encode) medians of `transport`'s server-side codec on these bodies.
fn codec(transport: Transport, b: &Bodies, response: &InferResponse) -> (Duration, Duration) {
    match transport {
        Transport::Json => (
            codec_time(|| drop(oip::json::parse_request(&b.json).unwrap())),
            codec_time(|| drop(oip::json::encode_http_response(response, &Parameters::new()))),
        ),
        Transport::Binary => {
            let (n, body) = &b.binary;
            let binary_out: Parameters = [("binary_data_output".to_owned(), ParamValue::Bool(true))].into();
            (
                codec_time(|| drop(oip::json::parse_request_parts(&body[..*n], Some(&body[*n..])).unwrap())),
                codec_time(|| drop(oip::json::encode_http_response(response, &binary_out))),
            )
        }
        Transport::Grpc => {
            let wire = b.grpc.encode_to_vec();
            let copy = || InferResponse {
                model_name: response.model_name.clone(),
                model_version: response.model_version.clone(),
                id: None,
                outputs: response.outputs.clone(),
                timing: Default::default(),
            };
            (
                codec_time(|| {
                    let message = ModelInferRequest::decode(wire.as_slice()).unwrap();
                    drop(tensors::decode_request(message).unwrap())
                }),
                // The copy of the outputs is timed too; it is the smaller part.
                codec_time(|| drop(tensors::encode_response(copy()).encode_to_vec())),
            )
        }
    }
}

fn main() {
    let clients = arg("--clients", 4);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = Server::start();
    let key = server.create_tenant("bench");
    server.deploy(&key, "echo", "echo", "");
    server.deploy(&key, "minilm-embed", "minilm_embed", "timeout_ms=60000");
    for (artifact, file) in [("model", "model.safetensors"), ("vocab", "vocab.txt"), ("config", "config.json")] {
        let bytes = std::fs::read(model_dir().join(file)).expect("the model: run `cargo xtask fetch-model`");
        server.put_bytes(&format!("/v1/functions/minilm-embed/artifacts/{artifact}"), &key, bytes).expect(201);
    }
    let reference: Value =
        serde_json::from_slice(&std::fs::read(repo_root().join("tests/data/minilm_ref_visible.json")).unwrap())
            .unwrap();
    let texts: Vec<Vec<u8>> = reference["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["text"].as_str().unwrap().as_bytes().to_vec())
        .collect();
    let sentences: Vec<Vec<u8>> = texts.iter().chain(&texts).cloned().collect();
    let echo_data: Vec<f32> = (0..32 * 384).map(|i| (i as f32 * 0.37).sin()).collect();
    let workloads = [
        Workload {
            label: "echo, FP32 32×384",
            model: "echo",
            inputs: vec![IoTensor { name: "x".into(), shape: vec![32, 384], data: IoData::F32(echo_data) }],
            requests: arg("--echo-requests", 300),
        },
        Workload {
            label: "minilm-embed, batch 32",
            model: "minilm-embed",
            inputs: vec![IoTensor { name: "text".into(), shape: vec![32], data: IoData::Bytes(sentences) }],
            requests: arg("--minilm-requests", 8),
        },
    ];

    println!(
        "sluice OIP transports benchmark: {} CPUs, {clients} concurrent clients for throughput",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<24} {:<12} {:>10} {:>12} {:>14} {:>14}",
        "workload", "transport", "p50 ms", "req/s", "decode µs", "encode µs"
    );
    for w in &workloads {
        let b = bodies(&w.inputs, w.model);
        // The server's response, for timing the encoder on what it really sends.
        let sample = Conn::open(Transport::Grpc, &server, &rt).infer(Transport::Grpc, w.model, &key, &b).unwrap();
        let response = InferResponse {
            model_name: w.model.into(),
            model_version: Some(sample.model_version.clone()),
            id: None,
            outputs: outputs(&sample),
            timing: Default::default(),
        };
        for transport in Transport::ALL {
            let mut conn = Conn::open(transport, &server, &rt);
            for _ in 0..w.requests.div_ceil(10).max(2) {
                conn.infer(transport, w.model, &key, &b);
            }
            let p50 = median(
                (0..w.requests)
                    .map(|_| {
                        let t = Instant::now();
                        conn.infer(transport, w.model, &key, &b);
                        t.elapsed()
                    })
                    .collect(),
            );
            let per_client = w.requests.div_ceil(clients).max(2);
            let started = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..clients {
                    s.spawn(|| {
                        let mut c = Conn::open(transport, &server, &rt);
                        for _ in 0..per_client {
                            c.infer(transport, w.model, &key, &b);
                        }
                    });
                }
            });
            let throughput = (per_client * clients) as f64 / started.elapsed().as_secs_f64();
            let (decode, encode) = codec(transport, &b, &response);
            println!(
                "{:<24} {:<12} {:>10.2} {:>12.1} {:>14.1} {:>14.1}",
                w.label,
                transport.label(),
                ms(p50),
                throughput,
                decode.as_secs_f64() * 1e6,
                encode.as_secs_f64() * 1e6
            );
        }
    }
}
