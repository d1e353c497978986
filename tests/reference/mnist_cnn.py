"""An independent NumPy forward of digit-recognizer-py 0.1.0's CNN, the reference that
`tests/tests/mnist.rs` holds sluice's `mnist` function against.

Written from the package's PyTorch definition (digit_recognizer/model.py), not from
sluice's code: three blocks of Conv2d(3x3, padding 1) + ReLU + MaxPool2d(2, 2) with 32,
64 and 128 channels (28 -> 14 -> 7 -> 3), flattened in NCHW order, Linear(1152, 256) +
ReLU, Linear(256, 10). Inputs are normalised as the package's transform does:
(p / 255 - 0.1307) / 0.3081. Arithmetic in float64, so the reference carries no rounding
of its own worth speaking of.

    python mnist_cnn.py MODEL.safetensors SAMPLES.bin REF_VISIBLE.json

SAMPLES.bin holds rows of 784 pixels and a label (cargo xtask fetch-mnist). Prints one
JSON object: the predicted digit and the top-two logit margin of every row, and the
logits of REF_VISIBLE.json's items. NumPy comes with the clients' environment
(tritonclient depends on it).
"""

import json
import struct
import sys

import numpy as np


def load_safetensors(path):
    """The F32 tensors of a safetensors file, by name, as float64 arrays."""
    with open(path, "rb") as f:
        raw = f.read()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    data = raw[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{name}: dtype {info['dtype']}, expected F32")
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype="<f4").reshape(info["shape"])
        tensors[name] = array.astype(np.float64)
    return tensors


def conv3x3_same(x, weight, bias):
    """Conv2d(kernel 3, stride 1, padding 1) of x (n, c, h, w) by weight (o, c, 3, 3)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    # Columns (n, h, w, c * 9) in the (c, kh, kw) order of the weight's flattening.
    columns = np.empty((n, h, w, c, 3, 3))
    for kh in range(3):
        for kw in range(3):
            columns[:, :, :, :, kh, kw] = padded[:, :, kh : kh + h, kw : kw + w].transpose(0, 2, 3, 1)
    out = columns.reshape(n * h * w, c * 9) @ weight.reshape(weight.shape[0], -1).T + bias
    return out.reshape(n, h, w, -1).transpose(0, 3, 1, 2)


def max_pool_2x2(x):
    """MaxPool2d(2, 2): floor division of odd sizes drops the last row and column."""
    n, c, h, w = x.shape
    x = x[:, :, : h // 2 * 2, : w // 2 * 2]
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def forward(params, pixels):
    """Logits (n, 10) of pixels (n, 784), 0..255."""
    x = (pixels.astype(np.float64) / 255.0 - 0.1307) / 0.3081
    x = x.reshape(-1, 1, 28, 28)
    for i in (0, 3, 6):
        x = conv3x3_same(x, params[f"conv_layers.{i}.weight"], params[f"conv_layers.{i}.bias"])
        x = max_pool_2x2(np.maximum(x, 0.0))
    x = x.reshape(x.shape[0], -1)
    x = np.maximum(x @ params["fc_layers.0.weight"].T + params["fc_layers.0.bias"], 0.0)
    return x @ params["fc_layers.2.weight"].T + params["fc_layers.2.bias"]


def main():
    model, samples, visible = sys.argv[1:4]
    params = load_safetensors(model)
    rows = np.fromfile(samples, dtype=np.uint8).reshape(-1, 785)
    predictions, margins = [], []
    for start in range(0, len(rows), 250):
        logits = forward(params, rows[start : start + 250, :784])
        top2 = np.sort(logits, axis=1)[:, -2:]
        predictions += [int(d) for d in logits.argmax(axis=1)]
        margins += [float(m) for m in top2[:, 1] - top2[:, 0]]
    with open(visible) as f:
        items = json.load(f)["items"]
    pixels = np.array([item["pixels"] for item in items], dtype=np.uint8)
    visible_logits = forward(params, pixels).tolist()
    json.dump({"predictions": predictions, "margins": margins, "visible_logits": visible_logits}, sys.stdout)


if __name__ == "__main__":
    main()
