"""`text-stream-py`: the streaming test function in Python, a twin of `text-stream`
for `text_input` and `max_tokens` (the generation contract, docs/generation.md): it
emits the prompt's words one per chunk (`text_output`, a space before all but the
first), each after a step on the device, stops after `max_tokens` words
(`finish_reason` `length`), and returns the whole text with `finish_reason`,
`prompt_tokens` and `completion_tokens`. It returns early once its caller has gone.
"""

from sluice_guest import Dtype, Inputs, InvalidInput, IoTensor, Tensor, export, streaming


def run(inputs: Inputs):
    names = [t.name for t in inputs]
    prompt = inputs["text_input"].as_strings()
    if len(prompt) != 1:
        raise InvalidInput("`text_input` must hold one string")
    max_tokens = None
    if "max_tokens" in names:
        max_tokens = inputs["max_tokens"].expect("INT32").data[0]
    words = prompt[0].split()
    one = Tensor.from_list([1], [1], Dtype.I32)
    step = Tensor.from_list([0], [1], Dtype.I32)
    text, finish, generated = "", "stop", 0
    for word in words:
        if max_tokens is not None and generated >= max_tokens:
            finish = "length"
            break
        if streaming.caller_gone():
            break
        step = step + one  # one step on the device, read back
        assert step.to_list() == [generated + 1]
        piece = word if generated == 0 else " " + word
        streaming.emit([IoTensor.text("text_output", [piece])])
        text += piece
        generated += 1
    return [
        IoTensor.text("text_output", [text]),
        IoTensor.text("finish_reason", [finish]),
        IoTensor.i32("prompt_tokens", [1], [len(words)]),
        IoTensor.i32("completion_tokens", [1], [generated]),
    ]


WitWorld = export(run)
