"""sluice driven over HTTP by the standard Open Inference Protocol clients, with their
default settings (binary tensor data on): tritonclient.http and KServe's
InferenceRESTClient.

Run by tests/tests/oip_clients.rs, which starts `sluice serve`, deploys `echo` and
`minilm-embed` and sets SLUICE_URL (http://host:port), SLUICE_KEY (a tenant key) and
SLUICE_REFDATA (the MiniLM reference embeddings). Prints one line per check; any failure
raises, so the exit status says whether every check passed.
"""

import asyncio
import json
import os

import ml_dtypes
import numpy as np
import tritonclient.http as triton
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig
from kserve.protocol.infer_type import RequestedOutput
from tritonclient.utils import InferenceServerException

URL = os.environ["SLUICE_URL"]
HOST = URL.removeprefix("http://")
HEADERS = {"Authorization": f"Bearer {os.environ['SLUICE_KEY']}"}
REFDATA = os.environ["SLUICE_REFDATA"]

# Every datatype sluice carries, with edge values; BYTES with an empty and a non-UTF-8 element.
ECHO = [
    ("fp32", "FP32", np.array([[1.5, -2.25, 3.0], [0.0, 1e-3, -7.0]], dtype=np.float32)),
    ("fp16", "FP16", np.array([1.5, -0.5, 65504.0], dtype=np.float16)),
    ("bf16", "BF16", np.array([1.0, -2.0, 0.5, 3.0e38], dtype=ml_dtypes.bfloat16)),
    ("int32", "INT32", np.array([np.iinfo(np.int32).min, -1, 0, np.iinfo(np.int32).max], dtype=np.int32)),
    ("int64", "INT64", np.array([np.iinfo(np.int64).min, 5, np.iinfo(np.int64).max], dtype=np.int64)),
    ("uint8", "UINT8", np.array([[0, 7], [128, 255]], dtype=np.uint8)),
    ("bytes", "BYTES", np.array([b"", b"\xff\xfe\x00raw", "h\u00e9llo".encode()], dtype=np.object_)),
]


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}", flush=True)


def same(got, want):
    if want.dtype == np.object_:  # BYTES: KServe's client hands back text, tritonclient bytes
        as_bytes = np.vectorize(lambda x: x.encode() if isinstance(x, str) else x, otypes=[np.object_])
        got = as_bytes(got) if got.size else got
    return got.shape == want.shape and (got == want).all()


def cosine(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def reference():
    with open(REFDATA) as f:
        records = json.load(f)["records"]
    return [r["text"] for r in records], np.array([r["embedding"] for r in records])


def triton_inputs(items, binary=True):
    inputs = []
    for name, datatype, array in items:
        tensor = triton.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    return inputs


def triton_checks():
    client = triton.InferenceServerClient(url=HOST)
    # tritonclient writes Inference-Header-Content-Length into the headers dict it is
    # given, so each call gets its own copy.
    h = lambda: dict(HEADERS)  # noqa: E731
    check(client.is_server_live(headers=h()) and client.is_server_ready(headers=h()), "triton: server live and ready")
    meta = client.get_server_metadata(headers=h())
    check("binary_tensor_data" in meta["extensions"], "triton: server metadata lists binary_tensor_data")
    check(client.is_model_ready("echo", headers=h()), "triton: is_model_ready(echo)")
    check(client.is_model_ready("echo", "1", headers=h()), "triton: is_model_ready(echo, '1')")
    check(not client.is_model_ready("echo", "99", headers=h()), "triton: is_model_ready(echo, '99') is False")
    check(client.get_model_metadata("echo", "1", headers=h())["versions"] == ["1"], "triton: versioned metadata")

    # Defaults: binary inputs, no outputs named → every output as binary data.
    result = client.infer("echo", triton_inputs(ECHO), request_id="req-7", headers=h())
    check(result.get_response()["id"] == "req-7", "triton: request id echoed")
    for name, datatype, array in ECHO:
        out = result.get_output(name)
        check(out["datatype"] == datatype and "binary_data_size" in out["parameters"], f"triton: {name} came back binary")
        check(same(result.as_numpy(name), array), f"triton: echo {datatype} binary round trip")

    # The same through JSON (BF16/FP16 and non-UTF-8 BYTES have no exact JSON form).
    json_items = [e for e in ECHO if e[1] not in ("FP16", "BF16", "BYTES")]
    outputs = [triton.InferRequestedOutput(name, binary_data=False) for name, _, _ in json_items]
    result = client.infer("echo", triton_inputs(json_items, binary=False), outputs=outputs, headers=h())
    for name, datatype, array in json_items:
        check("data" in result.get_output(name), f"triton: {name} came back as JSON")
        check(same(result.as_numpy(name), array), f"triton: echo {datatype} JSON round trip")

    # Output selection, the versioned route, and a lower priority.
    outputs = [triton.InferRequestedOutput("int64"), triton.InferRequestedOutput("bytes")]
    result = client.infer("echo", triton_inputs(ECHO), outputs=outputs, model_version="1", priority=2, headers=h())
    names = [o["name"] for o in result.get_response()["outputs"]]
    check(names == ["int64", "bytes"], f"triton: only the requested outputs, in order ({names})")
    check(result.get_response()["model_version"] == "1", "triton: versioned infer ran version 1")
    try:
        client.infer("echo", triton_inputs(ECHO[:1]), outputs=[triton.InferRequestedOutput("nope")], headers=h())
        raise AssertionError("an unknown output name was accepted")
    except InferenceServerException as e:
        check(e.status() == "400" and "nope" in e.message(), f"triton: unknown output → 400 ({e.message()})")
    try:
        client.infer("echo", triton_inputs(ECHO[:1]), model_version="99", headers=h())
        raise AssertionError("an unknown version was accepted")
    except InferenceServerException as e:
        check(e.status() == "404", f"triton: unknown version → 404 ({e.message()})")

    # MiniLM: its declared signature, a request that does not match it, and the embeddings.
    meta = client.get_model_metadata("minilm-embed", headers=h())
    check(meta["inputs"][0] == {"name": "text", "datatype": "BYTES", "shape": [-1]}, "triton: minilm signature")
    check(meta["outputs"][0] == {"name": "embedding", "datatype": "FP32", "shape": [-1, 384]}, "triton: outputs")
    try:
        client.infer("minilm-embed", triton_inputs([("text", "FP32", np.zeros(2, dtype=np.float32))]), headers=h())
        raise AssertionError("a request against the signature was accepted")
    except InferenceServerException as e:
        check(e.status() == "400" and "BYTES" in e.message(), f"triton: signature mismatch → 400 ({e.message()})")
    texts, want = reference()
    text = np.array([t.encode() for t in texts], dtype=np.object_)
    outputs = [triton.InferRequestedOutput("embedding")]
    result = client.infer("minilm-embed", triton_inputs([("text", "BYTES", text)]), outputs=outputs, headers=h())
    got = result.as_numpy("embedding")
    check(got.shape == (len(texts), 384), "triton: minilm embedding shape")
    worst = min(cosine(g, w) for g, w in zip(got, want))
    check(worst >= 0.9999, f"triton: minilm embeddings match the reference (worst cosine {worst:.6f})")


def kserve_inputs(items):
    inputs = []
    for name, datatype, array in items:
        tensor = InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)  # binary by default
        inputs.append(tensor)
    return inputs


async def kserve_checks():
    client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=120))
    try:
        check(await client.is_model_ready(URL, "echo", headers=HEADERS), "kserve: is_model_ready(echo)")
        # BF16 has no NumPy type in KServe's client, and its response decoding turns
        # BYTES into text (a non-UTF-8 element fails in the client, after sluice
        # answered): the round trips use UTF-8 elements, and the non-UTF-8 input is sent
        # below with only another output requested back.
        utf8 = ("bytes", "BYTES", np.array([b"", "h\u00e9llo".encode(), b"x"], dtype=np.object_))
        items = [e for e in ECHO if e[1] not in ("BF16", "BYTES")] + [utf8]
        for binary_out in (True, False):
            parameters = {"binary_data_output": True} if binary_out else None
            sent = [e for e in items if binary_out or e[1] != "FP16"]
            request = InferRequest("echo", kserve_inputs(sent), request_id="k-1", parameters=parameters)
            response = await client.infer(URL, request, model_name="echo", headers=dict(HEADERS))
            check(response.id == "k-1", "kserve: request id echoed")
            got = {o.name: o for o in response.outputs}
            for name, datatype, array in sent:
                check(same(got[name].as_numpy(), array), f"kserve: echo {datatype} (binary outputs: {binary_out})")
        raw = [e for e in ECHO if e[1] == "BYTES"] + [e for e in ECHO if e[1] == "INT64"]
        request = InferRequest("echo", kserve_inputs(raw), request_outputs=[RequestedOutput("int64")])
        response = await client.infer(URL, request, model_name="echo", headers=dict(HEADERS))
        check(same(response.outputs[0].as_numpy(), raw[1][2]), "kserve: a non-UTF-8 BYTES input is accepted")
        request = InferRequest(
            "echo", kserve_inputs(items), request_outputs=[RequestedOutput("uint8"), RequestedOutput("fp32")]
        )
        response = await client.infer(URL, request, model_name="echo", headers=dict(HEADERS))
        check([o.name for o in response.outputs] == ["uint8", "fp32"], "kserve: only the requested outputs")

        texts, want = reference()
        text = np.array([t.encode() for t in texts], dtype=np.object_)
        request = InferRequest("minilm-embed", kserve_inputs([("text", "BYTES", text)]))
        response = await client.infer(URL, request, model_name="minilm-embed", headers=dict(HEADERS))
        got = next(o for o in response.outputs if o.name == "embedding").as_numpy()
        worst = min(cosine(g, w) for g, w in zip(got, want))
        check(worst >= 0.9999, f"kserve: minilm embeddings match the reference (worst cosine {worst:.6f})")
    finally:
        await client.close()


if __name__ == "__main__":
    triton_checks()
    asyncio.run(kserve_checks())
    print("all checks passed", flush=True)
