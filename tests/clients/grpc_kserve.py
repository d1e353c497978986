"""KServe's InferenceGRPCClient, default settings, against sluice (see grpc_common.py).

KServe's numpy codec has no BF16 (kserve.utils.numpy_codec), so BF16 is left to the
tritonclient script; every other datatype goes through here.
"""

import asyncio

import grpc
import numpy as np
from kserve import InferenceGRPCClient, InferInput, InferRequest

from grpc_common import assert_same, check_embeddings, echo_cases, ok, parse_args, reference


async def expect_error(code, coro):
    try:
        await coro
    except grpc.aio.AioRpcError as e:
        assert e.code() == code, f"expected {code}, got {e.code()}: {e.details()}"
        assert e.details(), "the error has no message"
        return e.details()
    raise AssertionError(f"expected {code}, the call succeeded")


def request(model, tensors, request_id=None):
    inputs = []
    for name, datatype, array in tensors:
        i = InferInput(name, list(array.shape), datatype)
        i.set_data_from_numpy(array)
        inputs.append(i)
    return InferRequest(model_name=model, infer_inputs=inputs, request_id=request_id)


async def main():
    args = parse_args()
    auth = (("authorization", f"Bearer {args.key}"),)
    client = InferenceGRPCClient(url=args.url, retries=0)

    assert await client.is_server_live() and await client.is_server_ready()
    ok("server live and ready")
    assert await client.is_model_ready("echo", headers=auth)
    ok("echo ready")

    cases = [c for c in echo_cases() if c[1] != "BF16"]
    response = await client.infer(request("echo", cases, "kserve-7"), headers=auth)
    assert response.id == "kserve-7", response.id
    by_name = {o.name: o for o in response.outputs}
    for name, datatype, array in cases:
        assert by_name[name].datatype == datatype, (name, by_name[name].datatype)
        assert_same(name, by_name[name].as_numpy(), array)
    ok(f"echo round-trips {', '.join(d for _, d, _ in cases)} (id echoed)")

    x = [("x", "FP32", np.array([1, 2], dtype=np.float32))]
    await expect_error(grpc.StatusCode.UNAUTHENTICATED, client.infer(request("echo", x)))
    await expect_error(
        grpc.StatusCode.UNAUTHENTICATED, client.infer(request("echo", x), headers=(("authorization", "bearer nope"),))
    )
    ok("no key and a wrong key: UNAUTHENTICATED")
    await expect_error(grpc.StatusCode.NOT_FOUND, client.infer(request("no-such-model", x), headers=auth))
    await expect_error(grpc.StatusCode.NOT_FOUND, client.is_model_ready("no-such-model", headers=auth))
    ok("unknown model: NOT_FOUND")

    texts, want = reference(args.refdata)
    text = [("text", "BYTES", np.array([t.encode() for t in texts], dtype=np.object_))]
    response = await client.infer(request("minilm-embed", text), headers=auth)
    embedding = next(o for o in response.outputs if o.name == "embedding").as_numpy()
    cos = check_embeddings(embedding, want)
    ok(f"minilm-embed: 16 sentences in one batch, lowest cosine {cos:.6f}")
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
