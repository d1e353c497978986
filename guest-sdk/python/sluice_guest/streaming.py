"""Streaming output: chunks sent to the caller while the function runs (a generation's
tokens, one chunk each), and whether the caller is still there.

    from sluice_guest import IoTensor, streaming

    for piece in pieces:
        if streaming.caller_gone():
            break
        streaming.emit([IoTensor.text("text_output", [piece])])

A one-shot caller gets no chunks (`emit` drops them), so a streaming function returns
its whole result from `run` as well. Once the caller has gone (closed its connection),
`emit` and every host call that can fail raise `HostError` with code
`ErrorCode.CANCELLED`: let it propagate, and the host frees the invocation's memory.
"""

from typing import Sequence

from wit_world.imports import streaming as _wit

from .errors import host_call
from .io import IoTensor


def emit(chunk: Sequence[IoTensor]) -> None:
    """Sends `chunk` (named outputs) to a streaming caller now; raises `HostError`
    (`cancelled`) once the caller has gone."""
    host_call(_wit.emit, [t._to_wit() for t in chunk])


def caller_gone() -> bool:
    """Whether the caller has gone: stop early (its result would not be read)."""
    return _wit.caller_gone()
