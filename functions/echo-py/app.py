"""`echo-py`: `echo` in Python. Returns its inputs unchanged, in order, with the same
names, datatypes and shapes; every numeric input is uploaded as a device tensor and
read back (BYTES pass straight through). An input whose element count does not match
its shape is an `invalid-input` error.
"""

from sluice_guest import Inputs, IoTensor, export


def run(inputs: Inputs):
    outputs = []
    for t in inputs:
        if t.datatype == "BYTES":
            outputs.append(t.check())
        else:
            outputs.append(IoTensor.from_tensor(t.name, t.to_tensor()))
    return outputs


WitWorld = export(run)
