"""The GGUF's chat template (`tokenizer.chat_template`), ChatML as SmolLM2 writes it:
each message `<|im_start|>{role}\\n{content}<|im_end|>\\n`, preceded by the template's
own default system message when the first message is not a system one, and followed by
`<|im_start|>assistant\\n` (the generation prompt). The default system prompt is read
from the template's text, not written here. A port of `smollm2-chat/src/template.rs`.
"""

import json
from typing import List, Tuple

from sluice_guest import Failed, InvalidInput

#: How the template writes the default system message (the prompt follows).
SYSTEM_OPENING = "'<|im_start|>system\n"


class ChatTemplate:
    """What the template is made of: its default system prompt."""

    def __init__(self, template: str):
        chatml = ["'<|im_start|>' + message['role'] + '\n'", "<|im_end|>", "<|im_start|>assistant\n"]
        missing = next((p for p in chatml if p not in template), None)
        if missing is not None:
            raise Failed(f"the chat template is not ChatML (no {missing!r})")
        start = template.find(SYSTEM_OPENING)
        if start < 0:
            raise Failed("the chat template has no default system message")
        start += len(SYSTEM_OPENING)
        end = template.find("<|im_end|>", start)
        if end < 0:
            raise Failed("the chat template's system message does not end")
        self.default_system = template[start:end]

    def render(self, messages: List[Tuple[str, str]]) -> str:
        """The prompt for `messages` (`(role, content)` pairs), ending with the
        generation prompt."""
        out = []
        if messages and messages[0][0] != "system":
            out.append(f"<|im_start|>system\n{self.default_system}<|im_end|>\n")
        for role, content in messages:
            out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        out.append("<|im_start|>assistant\n")
        return "".join(out)


def messages(text: str) -> List[Tuple[str, str]]:
    """Parses the `messages` input: a JSON array of `{role, content}` (strings)."""
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, list):
            raise ValueError("not an array")
        out = []
        for m in parsed:
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise ValueError(f"{json.dumps(m)[:80]} is not {{role, content}}")
            out.append((m["role"], m["content"]))
        return out
    except ValueError as e:  # json.JSONDecodeError is one
        raise InvalidInput(f"`messages` must be a JSON array of {{role, content}}: {e}") from None
