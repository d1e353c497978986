"""Declaring a function: `export(run)` makes the world's export from a plain callable.

    from sluice_guest import export, Inputs, IoTensor

    def run(inputs: Inputs) -> list[IoTensor]:
        ...

    WitWorld = export(run)

componentize-py looks for the class `WitWorld` in the app module; `export` builds it.
Raised `InvalidInput` and `Failed` become the protocol's `invalid-input` and `failed`;
any other exception (an uncaught `HostError` included) becomes `failed` with its type
and message.
"""

from componentize_py_types import Err
from wit_world.imports import io

from .errors import Failed, InvalidInput
from .io import Inputs, IoTensor


def run_error(e: BaseException) -> "io.RunError":
    """The WIT `run-error` for an exception raised by the function: `InvalidInput` →
    `invalid-input`, `Failed` → `failed` with its message, anything else → `failed` with
    its type and message."""
    if isinstance(e, InvalidInput):
        return io.RunError_InvalidInput(str(e))
    if isinstance(e, Failed):
        return io.RunError_Failed(str(e))
    return io.RunError_Failed(f"{type(e).__name__}: {e}")


def export(run):
    """The `WitWorld` class componentize-py exports, calling `run(Inputs)` per invocation."""

    class WitWorld:
        def run(self, inputs):
            try:
                outputs = run(Inputs([IoTensor._from_wit(t) for t in inputs]))
                return [o._to_wit() for o in outputs]
            except Err:
                raise
            except Exception as e:  # noqa: BLE001 — every other failure is the function's
                raise Err(run_error(e)) from None

    WitWorld.__name__ = WitWorld.__qualname__ = "WitWorld"
    return WitWorld
