"""Shared by the gRPC client scripts: arguments, the echo cases, the MiniLM reference.

Each script is run by tests/tests/grpc_clients.rs against a real `sluice serve` with
`echo` and `minilm-embed` deployed for one tenant, as
`python grpc_<client>.py --url HOST:PORT --key KEY --refdata PATH`. A script prints one
line per check and exits non-zero, with the reason, at the first failure.
"""

import argparse
import json

import ml_dtypes
import numpy as np


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True, help="host:port of the gRPC endpoint")
    p.add_argument("--key", required=True, help="a tenant's API key")
    p.add_argument("--refdata", required=True, help="minilm_ref_visible.json")
    return p.parse_args()


def echo_cases():
    """(name, datatype, array) for every datatype sluice supports, several shapes."""
    return [
        ("f32", "FP32", np.array([[1.5, -2.0, 3.25], [0.0, 1e-30, -7.0]], dtype=np.float32)),
        ("f16", "FP16", np.array([0.5, -65504.0, 1.0 / 3.0], dtype=np.float16)),
        ("bf16", "BF16", np.array([1.0, -2.5, 1e30, 0.1], dtype=ml_dtypes.bfloat16)),
        ("i32", "INT32", np.array([np.iinfo(np.int32).min, -1, 0, 7], dtype=np.int32)),
        ("i64", "INT64", np.array([[np.iinfo(np.int64).max], [-(1 << 40)]], dtype=np.int64)),
        ("u8", "UINT8", np.array([0, 1, 128, 255], dtype=np.uint8)),
        # Empty and non-UTF-8 elements travel as they are.
        ("text", "BYTES", np.array([b"hello", b"", b"\xff\x00\xfe", "é".encode()], dtype=np.object_)),
    ]


def assert_same(name, got, want):
    if want.dtype == np.object_:
        got_list, want_list = [bytes(x) for x in got.reshape(-1)], [bytes(x) for x in want.reshape(-1)]
        assert got.shape == want.shape and got_list == want_list, f"{name}: {got!r} != {want!r}"
    else:
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"{name}: {got} != {want}"


def reference(path):
    """The 16 reference sentences and their embeddings."""
    with open(path) as f:
        records = json.load(f)["records"]
    assert len(records) == 16
    return [r["text"] for r in records], np.array([r["embedding"] for r in records], dtype=np.float64)


def check_embeddings(got, want):
    assert got.shape == want.shape, f"embeddings: shape {got.shape} != {want.shape}"
    got = got.astype(np.float64)
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cos.min() >= 0.9999, f"embeddings: lowest cosine {cos.min()}"
    return cos.min()


def ok(what):
    print(f"ok: {what}", flush=True)
