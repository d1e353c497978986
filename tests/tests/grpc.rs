//! The gRPC endpoint over the wire, with a Rust client of the same `.proto`: errors as
//! gRPC statuses (each with its `x-sluice-code`), the size limit, keys, versions, typed
//! contents and the Triton extensions (configuration, statistics, decoupled streaming:
//! `ModelStreamInfer` with `text-stream`), and the model-repository extension on the HTTP
//! port. The standard Python clients are in
//! `grpc_clients.rs`.

use sluice_runtime::server::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use sluice_runtime::server::grpc::proto::model_infer_request::InferInputTensor;
use sluice_runtime::server::grpc::proto::*;
use sluice_tests::{ADMIN_KEY, Server, ServerOptions};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

/// A client on its own runtime, sending `key` (if any) with every call.
struct Client {
    rt: tokio::runtime::Runtime,
    inner: GrpcInferenceServiceClient<Channel>,
}

impl Client {
    fn connect(server: &Server) -> Client {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr)).unwrap();
        let inner = GrpcInferenceServiceClient::new(rt.block_on(endpoint.connect()).unwrap());
        Client { rt, inner }
    }

    fn infer(&mut self, key: Option<&str>, request: ModelInferRequest) -> Result<ModelInferResponse, Status> {
        let request = with_key(key, request);
        self.rt.block_on(self.inner.model_infer(request)).map(|r| r.into_inner())
    }
}

fn with_key<T>(key: Option<&str>, message: T) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(k) = key {
        request.metadata_mut().insert("authorization", format!("Bearer {k}").parse().unwrap());
    }
    request
}

/// An FP32 request for `model` with raw contents.
fn fp32(model: &str, values: &[f32]) -> ModelInferRequest {
    ModelInferRequest {
        model_name: model.into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![values.len() as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into()],
        ..Default::default()
    }
}

fn mode(model: &str, mode: &str) -> ModelInferRequest {
    ModelInferRequest {
        model_name: model.into(),
        inputs: vec![InferInputTensor {
            name: "mode".into(),
            datatype: "BYTES".into(),
            shape: vec![1],
            contents: Some(InferTensorContents { bytes_contents: vec![mode.into()], ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[track_caller]
fn expect(result: Result<ModelInferResponse, Status>, code: Code, sluice_code: &str) -> String {
    let status = result.expect_err("the call should fail");
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(status.metadata().get("x-sluice-code").map(|v| v.to_str().unwrap()), Some(sluice_code), "{status:?}");
    assert!(!status.message().is_empty());
    status.message().to_owned()
}

#[test]
fn errors_are_grpc_statuses_with_the_project_code_and_change_nothing() {
    let server =
        Server::start_with(ServerOptions { args: vec!["--max-request-mib".into(), "1".into()], ..Default::default() });
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    server.deploy(&key, "bad", "misbehave", "timeout_ms=300");
    let mut c = Client::connect(&server);
    let ok = fp32("echo", &[1.0, 2.5]);

    expect(c.infer(None, ok.clone()), Code::Unauthenticated, "unauthorized");
    expect(c.infer(Some("not-a-key"), ok.clone()), Code::Unauthenticated, "unauthorized");
    expect(c.infer(Some(ADMIN_KEY), ok.clone()), Code::PermissionDenied, "forbidden");
    expect(c.infer(Some(&key), fp32("nope", &[1.0])), Code::NotFound, "not_found");
    for version in ["2", "latest"] {
        let request = ModelInferRequest { model_version: version.into(), ..ok.clone() };
        expect(c.infer(Some(&key), request), Code::NotFound, "not_found");
    }
    let mut short = ok.clone();
    short.inputs[0].shape = vec![3];
    let msg = expect(c.infer(Some(&key), short), Code::InvalidArgument, "invalid_request");
    assert!(msg.contains("\"x\""), "{msg}");
    let msg =
        expect(c.infer(Some(&key), fp32("echo", &vec![0.5; 300_000])), Code::ResourceExhausted, "payload_too_large");
    assert!(msg.contains("too large"), "{msg}");
    expect(c.infer(Some(&key), mode("bad", "loop")), Code::DeadlineExceeded, "timeout");
    expect(c.infer(Some(&key), mode("bad", "trap")), Code::Internal, "function_trapped");

    // Nothing of that changed anything: the same connection still serves.
    let r = c.infer(Some(&key), ok).unwrap();
    assert_eq!(r.raw_output_contents[0].as_ref(), [1.0f32, 2.5].map(f32::to_le_bytes).concat());
    let r = c.infer(Some(&key), mode("bad", "ok")).unwrap();
    assert_eq!(r.raw_output_contents[0].as_ref(), b"\x02\0\0\0ok");
}

#[test]
fn versions_typed_contents_health_and_the_triton_extensions() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "echo", "echo", "");
    server.deploy(&key, "echo", "echo", "");
    let mut c = Client::connect(&server);
    let rt = &c.rt;

    // Health needs no key; metadata any key.
    assert!(rt.block_on(c.inner.server_live(ServerLiveRequest {})).unwrap().into_inner().live);
    assert!(rt.block_on(c.inner.server_ready(ServerReadyRequest {})).unwrap().into_inner().ready);
    let e = rt.block_on(c.inner.server_metadata(ServerMetadataRequest {})).unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    let meta = rt.block_on(c.inner.server_metadata(with_key(Some(ADMIN_KEY), ServerMetadataRequest {}))).unwrap();
    assert_eq!(meta.get_ref().name, "sluice");

    // Every version is listed and can be named; both are ready (the older one loads on use).
    let req = |version: &str| ModelMetadataRequest { name: "echo".into(), version: version.into() };
    let all = rt.block_on(c.inner.model_metadata(with_key(Some(&key), req("")))).unwrap().into_inner();
    assert_eq!(all.versions, ["1", "2"]);
    let one = rt.block_on(c.inner.model_metadata(with_key(Some(&key), req("1")))).unwrap().into_inner();
    assert_eq!(one.versions, ["1"]);
    for version in ["", "1", "2"] {
        let ready = ModelReadyRequest { name: "echo".into(), version: version.into() };
        assert!(rt.block_on(c.inner.model_ready(with_key(Some(&key), ready))).unwrap().into_inner().ready, "{version}");
    }

    // Typed contents in, raw contents out; the version asked for runs; the id comes back.
    let typed = ModelInferRequest {
        model_name: "echo".into(),
        model_version: "1".into(),
        id: "typed-1".into(),
        inputs: vec![InferInputTensor {
            name: "n".into(),
            datatype: "INT64".into(),
            shape: vec![2, 1],
            contents: Some(InferTensorContents { int64_contents: vec![-5, 1 << 40], ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let r = c.infer(Some(&key), typed).unwrap();
    assert_eq!((r.model_version.as_str(), r.id.as_str()), ("1", "typed-1"));
    assert_eq!((r.outputs[0].datatype.as_str(), r.outputs[0].shape.as_slice()), ("INT64", &[2, 1][..]));
    assert_eq!(r.raw_output_contents[0].as_ref(), [(-5i64).to_le_bytes(), (1i64 << 40).to_le_bytes()].concat());
    let newest = c.infer(Some(&key), fp32("echo", &[1.0])).unwrap();
    assert_eq!(newest.model_version, "2");

    // Triton's configuration (echo declares no signature: no tensors) and statistics.
    let rt = &c.rt;
    let config = ModelConfigRequest { name: "echo".into(), version: String::new() };
    let config = rt.block_on(c.inner.model_config(with_key(Some(&key), config))).unwrap().into_inner().config.unwrap();
    assert_eq!((config.name.as_str(), config.max_batch_size), ("echo", 0));
    let stats = ModelStatisticsRequest { name: "echo".into(), version: String::new() };
    let stats = rt.block_on(c.inner.model_statistics(with_key(Some(&key), stats))).unwrap().into_inner();
    let [echo] = stats.model_stats.as_slice() else { panic!("{stats:?}") };
    let inference = echo.inference_stats.unwrap();
    assert_eq!((echo.name.as_str(), echo.inference_count), ("echo", 2));
    assert_eq!((inference.success.unwrap().count, inference.fail.unwrap().count), (2, 0));
    assert!(inference.success.unwrap().ns >= inference.compute_infer.unwrap().ns);
    let unknown = ModelStatisticsRequest { name: "nope".into(), version: String::new() };
    let e = rt.block_on(c.inner.model_statistics(with_key(Some(&key), unknown))).unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

/// The one string of a raw BYTES output (a 4-byte length, then the bytes).
fn raw_string(raw: &[u8]) -> String {
    let n = u32::from_le_bytes(raw[..4].try_into().unwrap()) as usize;
    assert_eq!(raw.len(), 4 + n, "one element");
    String::from_utf8(raw[4..].to_vec()).unwrap()
}

#[test]
fn model_stream_infer_sends_each_chunk_then_the_final_outputs() {
    let server = Server::start();
    let key = server.create_tenant("acme");
    server.deploy(&key, "text-stream", "text_stream", "");
    let mut client = Client::connect(&server);
    let request = |model: &str, text: &str, id: &str| ModelInferRequest {
        model_name: model.into(),
        id: id.into(),
        inputs: vec![InferInputTensor {
            name: "text_input".into(),
            datatype: "BYTES".into(),
            shape: vec![1],
            contents: Some(InferTensorContents { bytes_contents: vec![text.into()], ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let requests =
        vec![request("text-stream", "a b c", "r1"), request("nope", "x", "r2"), request("text-stream", "d e", "r3")];
    let responses: Vec<ModelStreamInferResponse> = client.rt.block_on(async {
        let call = client.inner.model_stream_infer(with_key(Some(&key), tokio_stream::iter(requests)));
        let mut stream = call.await.expect("the stream opens").into_inner();
        let mut all = Vec::new();
        while let Some(r) = stream.message().await.expect("a response") {
            all.push(r);
        }
        all
    });
    // (id, final, text_output or the error) of each response, in order.
    let seen: Vec<(String, Option<bool>, String)> = responses
        .iter()
        .map(|r| match &r.infer_response {
            None => (String::new(), None, r.error_message.clone()),
            Some(i) => {
                let last = match i.parameters["triton_final_response"].parameter_choice {
                    Some(infer_parameter::ParameterChoice::BoolParam(b)) => b,
                    ref other => panic!("triton_final_response is {other:?}"),
                };
                let text = i
                    .outputs
                    .iter()
                    .position(|o| o.name == "text_output")
                    .map(|k| raw_string(&i.raw_output_contents[k]));
                (i.id.clone(), Some(last), text.unwrap_or_default())
            }
        })
        .collect();
    let chunk = |id: &str, text: &str| (id.to_owned(), Some(false), text.to_owned());
    assert_eq!(
        seen[..4],
        [chunk("r1", "a"), chunk("r1", " b"), chunk("r1", " c"), ("r1".into(), Some(true), "a b c".into())]
    );
    assert_eq!(seen[4].1, None, "an unknown model is an error in the stream: {seen:?}");
    assert!(seen[4].2.contains("nope"), "{seen:?}");
    assert_eq!(
        seen[5..],
        [chunk("r3", "d"), chunk("r3", " e"), ("r3".into(), Some(true), "d e".into())],
        "the stream goes on"
    );
}

/// A `ModelStreamInfer` stream opened with a key ends with UNAUTHENTICATED once the key
/// is revoked: the next request on it is not run. Before, the stream kept running
/// requests for as long as the client kept it open.
#[test]
fn a_stream_ends_when_its_key_is_revoked() {
    let server = Server::start();
    let created = server.post_json("/v1/tenants", ADMIN_KEY, &serde_json::json!({ "id": "acme" })).expect(201);
    let (key, key_id) = (created["key"].as_str().unwrap().to_owned(), created["key_id"].as_str().unwrap().to_owned());
    server.deploy(&key, "text-stream", "text_stream", "");
    let mut client = Client::connect(&server);
    let request = |text: &str| ModelInferRequest {
        model_name: "text-stream".into(),
        inputs: vec![InferInputTensor {
            name: "text_input".into(),
            datatype: "BYTES".into(),
            shape: vec![1],
            contents: Some(InferTensorContents { bytes_contents: vec![text.into()], ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let revoke = || assert_eq!(server.delete(&format!("/v1/tenants/acme/keys/{key_id}"), ADMIN_KEY).status, 204);
    let (before, after) = client.rt.block_on(async {
        let requests = tokio_stream::wrappers::ReceiverStream::new(rx);
        let call = client.inner.model_stream_infer(with_key(Some(&key), requests));
        tx.send(request("a b")).await.unwrap();
        let mut stream = call.await.expect("the stream opens").into_inner();
        let mut before = 0;
        while before < 3 {
            stream.message().await.expect("a response").expect("the stream goes on");
            before += 1; // "a", " b", then the final outputs
        }
        revoke(); // blocks this (current-thread) runtime briefly: the server is another process
        tx.send(request("c d")).await.unwrap();
        (before, stream.message().await)
    });
    assert_eq!(before, 3);
    let status = after.expect_err("the stream ends with an error after the revocation");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert_eq!(status.metadata().get("x-sluice-code").map(|v| v.to_str().unwrap()), Some("unauthorized"));
}

/// The model-repository extension over gRPC, on the HTTP port (which serves gRPC too,
/// as one Knative `h2c` port must): a bundle laid out after the start is listed,
/// loaded, served and unloaded; an absent one is NOT_FOUND, a load parameter
/// INVALID_ARGUMENT, a call without a key UNAUTHENTICATED.
#[test]
fn the_repository_extension_over_grpc_on_the_http_port() {
    let repo = tempfile::tempdir().unwrap();
    let server = Server::start_with(ServerOptions {
        args: vec!["--model-dir".into(), repo.path().display().to_string()],
        ..ServerOptions::default()
    });
    let key = server.create_tenant("acme");
    let bundle = repo.path().join("rep-echo");
    std::fs::create_dir(&bundle).unwrap();
    std::fs::write(bundle.join("echo.wasm"), sluice_tests::function_wasm("echo")).unwrap();
    std::fs::write(bundle.join("sluice.toml"), "[function]\ntenant = \"acme\"\n").unwrap();

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let endpoint = tonic::transport::Endpoint::from_shared(server.url.clone()).unwrap();
    let mut client = GrpcInferenceServiceClient::new(rt.block_on(endpoint.connect()).unwrap());
    let index = |client: &mut GrpcInferenceServiceClient<Channel>| -> Vec<(String, String)> {
        let request = with_key(Some(&key), RepositoryIndexRequest::default());
        let models = rt.block_on(client.repository_index(request)).unwrap().into_inner().models;
        models.into_iter().map(|m| (m.name, m.state)).collect()
    };
    assert_eq!(index(&mut client), [("rep-echo".to_owned(), "UNAVAILABLE".to_owned())]);
    let load = |name: &str| RepositoryModelLoadRequest { model_name: name.into(), ..Default::default() };

    let refused = rt.block_on(client.repository_model_load(with_key(None, load("rep-echo")))).unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    let absent = rt.block_on(client.repository_model_load(with_key(Some(&key), load("absent")))).unwrap_err();
    assert_eq!(absent.code(), Code::NotFound, "{absent:?}");
    let mut with_parameter = load("rep-echo");
    let config = ModelRepositoryParameter {
        parameter_choice: Some(model_repository_parameter::ParameterChoice::StringParam("{}".into())),
    };
    with_parameter.parameters.insert("config".into(), config);
    let bad = rt.block_on(client.repository_model_load(with_key(Some(&key), with_parameter))).unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
    assert_eq!(index(&mut client), [("rep-echo".to_owned(), "UNAVAILABLE".to_owned())], "refusals change nothing");

    rt.block_on(client.repository_model_load(with_key(Some(&key), load("rep-echo")))).unwrap();
    assert_eq!(index(&mut client), [("rep-echo".to_owned(), "READY".to_owned())]);
    let answer = rt.block_on(client.model_infer(with_key(Some(&key), fp32("rep-echo", &[1.5, 2.5])))).unwrap();
    assert_eq!(
        answer.into_inner().raw_output_contents[0],
        [1.5f32, 2.5].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()
    );

    let unload = RepositoryModelUnloadRequest { model_name: "rep-echo".into(), ..Default::default() };
    rt.block_on(client.repository_model_unload(with_key(Some(&key), unload))).unwrap();
    assert_eq!(index(&mut client), [("rep-echo".to_owned(), "UNAVAILABLE".to_owned())]);
    let gone = rt.block_on(client.model_infer(with_key(Some(&key), fp32("rep-echo", &[1.0])))).unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
}
