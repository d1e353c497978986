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


def export(run):
    """The `WitWorld` class componentize-py exports, calling `run(Inputs)` per invocation."""

    class WitWorld:
        def run(self, inputs):
            try:
                outputs = run(Inputs([IoTensor._from_wit(t) for t in inputs]))
                return [o._to_wit() for o in outputs]
            except InvalidInput as e:
                raise Err(io.RunError_InvalidInput(str(e))) from None
            except Failed as e:
                raise Err(io.RunError_Failed(str(e))) from None
            except Err:
                raise
            except Exception as e:  # noqa: BLE001 — every other failure is the function's
                raise Err(io.RunError_Failed(f"{type(e).__name__}: {e}")) from None

    WitWorld.__name__ = WitWorld.__qualname__ = "WitWorld"
    return WitWorld
