"""Artifacts uploaded with the function (weights, vocabularies, configs), by name: the
Rust SDK's `sluice_guest::artifacts` under the same names.

    from sluice_guest import artifacts

    meta = json.loads(artifacts.metadata("model"))   # a GGUF file's metadata
    w = artifacts.load_tensor("model", "blk.0.attn_q.weight")  # Q4_1 stays Q4_1
    if "vocab" in artifacts.names(): ...
"""

from typing import List

from wit_world.imports import artifacts as _wit

from .errors import host_call
from .tensor import load_tensor, read_artifact

#: The raw bytes of an artifact (`read_artifact`); a missing one is `not-found`.
read = read_artifact

__all__ = ["load_tensor", "metadata", "names", "read"]


def metadata(artifact: str) -> str:
    """The metadata of the GGUF artifact `artifact` as one JSON object, key → value
    (arrays as JSON arrays, e.g. `tokenizer.ggml.tokens`; a non-finite float as `null`).
    An artifact that is not GGUF is `invalid-argument`."""
    return host_call(_wit.metadata, artifact)


def names() -> List[str]:
    """The names of the artifacts this function version sees, in byte order: how a
    function that ships optional files finds which were uploaded. Host API 1.1.0 and
    later."""
    return list(_wit.names())
