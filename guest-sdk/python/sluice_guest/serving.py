"""Continuous batching: a *serving* function takes its requests from a host queue and
runs many of them together (one decode step for every active sequence), as the Rust
SDK's `sluice_guest::serving`.

The host calls `run` with no inputs in a serving invocation (`serving()` is true
there), which loops:

    from sluice_guest import serving

    active = []
    while True:
        wait = 0.05 if not active else 0.0   # never hold a step for new requests
        new = serving.next(8 - len(active), wait)
        if not new and not active:
            return []                          # idle: the serving invocation ends
        # start the new requests, run one step for all, `emit` each one's chunk,
        # `finish` those done, drop those `gone()`.

A function declares itself a serving function with a file named `serving` in its
directory (`cargo xtask build-functions` then adds the `sluice:serving` custom section
to the component, as the Rust SDK's `serving_function!` does). Each `Request` is its
own caller: its chunks go to its own stream; `finish` answers it, and a request dropped
unanswered is answered with an error by the host.
"""

from typing import List, Optional, Sequence

from componentize_py_types import Err, Ok
from wit_world.imports import requests as _wit

from .errors import host_call
from .function import run_error
from .io import Inputs, IoTensor

#: The longest wait `next` can ask for, in seconds (the WIT takes microseconds as u32).
_MAX_WAIT_US = 0xFFFF_FFFF


def serving() -> bool:
    """Whether this invocation is a serving one (its `run` was called to serve the queue)."""
    return _wit.serving()


def next(max: int, wait: float) -> List["Request"]:  # noqa: A001 — the Rust SDK's name
    """Up to `max` waiting requests, waiting up to `wait` seconds for one when none
    waits. Empty outside a serving invocation and once the host wants this invocation
    to end (finish what it holds, then return)."""
    wait_us = min(max_wait_us(wait), _MAX_WAIT_US)
    return [Request(r) for r in _wit.next(int(max), wait_us)]


def max_wait_us(seconds: float) -> int:
    """`seconds` as whole microseconds for the WIT (negative → 0, saturating at u32::MAX)."""
    return max(0, min(int(seconds * 1_000_000), _MAX_WAIT_US))


class Request:
    """One request of a serving invocation."""

    __slots__ = ("_raw",)

    def __init__(self, raw: "_wit.Request"):
        self._raw = raw

    def inputs(self) -> Inputs:
        """Its inputs (the first call takes them; later calls return none)."""
        return Inputs([IoTensor._from_wit(t) for t in self._raw.inputs()])

    def emit(self, chunk: Sequence[IoTensor]) -> None:
        """Sends `chunk` to this request's caller (dropped for a one-shot caller); raises
        `HostError` (`cancelled`) once its caller has gone."""
        host_call(self._raw.emit, [t._to_wit() for t in chunk])

    def gone(self) -> bool:
        """Whether its caller has gone or its time limit passed: drop it."""
        return self._raw.gone()

    def finish(self, outputs: Optional[Sequence[IoTensor]] = None, error: Optional[BaseException] = None) -> None:
        """Answers it with its outputs, or with `error` (an exception, mapped as one
        raised from `run` would be)."""
        if error is not None:
            self._raw.finish(Err(run_error(error)))
        else:
            self._raw.finish(Ok([t._to_wit() for t in outputs or []]))
