"""The `openai` Python client (default settings) against sluice's OpenAI-compatible
endpoints, on the `text-stream` function: chat and completions, streamed and not,
`max_tokens` and `stop`, usage, and the client's own exception for an unknown model.

Environment: SLUICE_URL (the server), SLUICE_KEY (a tenant key); `text-stream` deployed
under that name. Prints "all checks passed" at the end.
"""

import os
import sys

import openai

PROMPT = "the quick brown fox jumps over the lazy dog"


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}")
        sys.exit(1)


def main():
    client = openai.OpenAI(base_url=os.environ["SLUICE_URL"] + "/v1", api_key=os.environ["SLUICE_KEY"])
    messages = [{"role": "user", "content": PROMPT}]

    r = client.chat.completions.create(model="text-stream", messages=messages, temperature=0, seed=7)
    check(r.choices[0].message.content == PROMPT, f"chat text: {r}")
    check(r.choices[0].message.role == "assistant", f"chat role: {r}")
    check(r.choices[0].finish_reason == "stop", f"chat finish: {r}")
    check((r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (9, 9, 18), f"usage: {r}")

    pieces, finish, usage = [], None, None
    stream = client.chat.completions.create(
        model="text-stream", messages=messages, stream=True, max_tokens=5,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    check("".join(pieces) == "the quick brown fox jumps", f"streamed chat text: {pieces}")
    check(len(pieces) == 5, f"one chunk per word: {pieces}")
    check(finish == "length", f"streamed finish: {finish}")
    check(usage is not None and usage.completion_tokens == 5, f"streamed usage: {usage}")

    r = client.completions.create(model="text-stream", prompt=PROMPT, stop=["lazy"])
    check(r.choices[0].text == "the quick brown fox jumps over the", f"completion: {r}")
    check(r.choices[0].finish_reason == "stop", f"completion finish: {r}")

    text = "".join(
        c.choices[0].text for c in client.completions.create(model="text-stream", prompt=PROMPT, stream=True) if c.choices
    )
    check(text == PROMPT, f"streamed completion: {text!r}")

    try:
        client.chat.completions.create(model="no-such-function", messages=messages)
        check(False, "an unknown model must fail")
    except openai.NotFoundError as e:
        check(e.status_code == 404, f"unknown model: {e}")
    try:
        client.chat.completions.create(model="text-stream", messages=messages, max_tokens=-1)
        check(False, "a negative max_tokens must fail")
    except openai.BadRequestError as e:
        check(e.status_code == 400, f"bad max_tokens: {e}")

    print("all checks passed")


if __name__ == "__main__":
    main()
