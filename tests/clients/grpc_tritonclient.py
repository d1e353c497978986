"""tritonclient.grpc, default settings, against sluice (see grpc_common.py)."""

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from grpc_common import assert_same, check_embeddings, echo_cases, ok, parse_args, reference


def expect_error(status, fn):
    try:
        fn()
    except InferenceServerException as e:
        assert e.status() == status, f"expected {status}, got {e.status()}: {e.message()}"
        assert e.message(), "the error has no message"
        return e.message()
    raise AssertionError(f"expected {status}, the call succeeded")


def main():
    args = parse_args()
    auth = {"authorization": f"Bearer {args.key}"}
    client = grpcclient.InferenceServerClient(url=args.url)

    assert client.is_server_live() and client.is_server_ready()
    ok("server live and ready")
    meta = client.get_server_metadata(headers=auth)
    assert meta.name == "sluice", meta
    ok(f"server metadata: {meta.name} {meta.version} {list(meta.extensions)}")
    assert client.is_model_ready("echo", headers=auth)
    assert client.is_model_ready("echo", "1", headers=auth)
    ok("echo ready, unversioned and version 1")
    model = client.get_model_metadata("echo", headers=auth)
    assert model.name == "echo" and "1" in model.versions, model
    ok(f"echo metadata: versions {list(model.versions)}, platform {model.platform}")

    cases = echo_cases()
    inputs = []
    for name, datatype, array in cases:
        i = grpcclient.InferInput(name, list(array.shape), datatype)
        i.set_data_from_numpy(array)
        inputs.append(i)
    result = client.infer("echo", inputs, request_id="req-42", headers=auth)
    response = result.get_response()
    assert response.id == "req-42", response.id
    assert response.model_name == "echo" and response.model_version == "1", response
    for name, datatype, array in cases:
        out = response.outputs[[o.name for o in response.outputs].index(name)]
        assert out.datatype == datatype, (name, out.datatype)
        assert_same(name, result.as_numpy(name), array)
    ok(f"echo round-trips {', '.join(d for _, d, _ in cases)} (id echoed)")

    x = grpcclient.InferInput("x", [2], "FP32")
    x.set_data_from_numpy(np.array([1, 2], dtype=np.float32))
    expect_error("StatusCode.UNAUTHENTICATED", lambda: client.infer("echo", [x]))
    expect_error("StatusCode.UNAUTHENTICATED", lambda: client.infer("echo", [x], headers={"authorization": "Bearer nope"}))
    expect_error("StatusCode.UNAUTHENTICATED", lambda: client.is_model_ready("echo"))
    ok("no key and a wrong key: UNAUTHENTICATED")
    expect_error("StatusCode.NOT_FOUND", lambda: client.infer("no-such-model", [x], headers=auth))
    expect_error("StatusCode.NOT_FOUND", lambda: client.get_model_metadata("no-such-model", headers=auth))
    expect_error("StatusCode.NOT_FOUND", lambda: client.is_model_ready("echo", "99", headers=auth))
    ok("unknown model and version: NOT_FOUND")
    bad = grpcclient.InferInput("x", [3], "FP32")
    bad.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    bad._input.shape[:] = [4]  # the shape no longer matches the data
    msg = expect_error("StatusCode.INVALID_ARGUMENT", lambda: client.infer("echo", [bad], headers=auth))
    ok(f"shape/data mismatch: INVALID_ARGUMENT ({msg})")

    model = client.get_model_metadata("minilm-embed", headers=auth)
    declared = {(t.name, t.datatype, tuple(t.shape)) for t in model.inputs}
    assert ("text", "BYTES", (-1,)) in declared, model
    assert ("embedding", "FP32", (-1, 384)) in {(t.name, t.datatype, tuple(t.shape)) for t in model.outputs}, model
    config = client.get_model_config("minilm-embed", headers=auth).config
    assert config.max_batch_size == 0 and "text" in [i.name for i in config.input], config
    ok("minilm-embed metadata and config: the declared signature")

    texts, want = reference(args.refdata)
    text = grpcclient.InferInput("text", [len(texts)], "BYTES")
    text.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
    outputs = [grpcclient.InferRequestedOutput("embedding")]
    result = client.infer("minilm-embed", [text], outputs=outputs, headers=auth)
    assert [o.name for o in result.get_response().outputs] == ["embedding"], result.get_response().outputs
    cos = check_embeddings(result.as_numpy("embedding"), want)
    ok(f"minilm-embed: 16 sentences in one batch, only the requested output, lowest cosine {cos:.6f}")
    unknown = [grpcclient.InferRequestedOutput("no-such-output")]
    expect_error("StatusCode.INVALID_ARGUMENT", lambda: client.infer("minilm-embed", [text], outputs=unknown, headers=auth))
    ok("an unknown requested output: INVALID_ARGUMENT")
    client.close()


if __name__ == "__main__":
    main()
