"""Errors a Python function raises or meets.

`InvalidInput` and `Failed` are the function's own verdicts: raised from `run`, they
become the protocol's `invalid-input` (HTTP 400 `invalid_input`) and `failed` (500
`function_failed`). `HostError` is a host call the host refused (a shape mismatch, a
missing artifact, a full quota): its `code` is the WIT `error-code`; uncaught, it
fails the invocation like `Failed`. Any other exception fails it too, with its type
and message.
"""

from componentize_py_types import Err
from wit_world.imports import types


class InvalidInput(Exception):
    """The request's inputs are wrong (missing, wrong datatype or shape): the caller's fault."""


class Failed(Exception):
    """The function failed for a reason of its own."""


class HostError(Exception):
    """A host call was refused; `code` says why (`types.ErrorCode`)."""

    def __init__(self, code: "types.ErrorCode", message: str):
        super().__init__(f"{code.name.lower().replace('_', '-')}: {message}")
        self.code = code
        self.message = message


def host_call(call, *args):
    """Runs a generated binding, turning the host's `Err(types.Error)` into `HostError`."""
    try:
        return call(*args)
    except Err as e:
        err = e.value
        if isinstance(err, types.Error):
            raise HostError(err.code, err.message) from None
        raise
