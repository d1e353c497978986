"""The tokenizer the GGUF file defines, in pure Python (no native wheels in a
componentize-py guest): GPT-2 style byte-level BPE over `tokenizer.ggml.tokens` (ids
are positions) and `tokenizer.ggml.merges` (`"a b"` pairs, in rank order), the `smollm`
pre-tokenizer (each digit alone, then GPT-2's split regex), and the special tokens
(token type 3, control, or 4, user-defined) matched whole in the text, leftmost and
longest first, so a ChatML prompt's `<|im_start|>` is one token.

It does what `functions/smollm2-chat/src/tokenizer.rs` builds with Hugging Face
`tokenizers` (`BPE` + `Sequence[Digits(individual), ByteLevel(use_regex)]` + added
special tokens, `ByteLevel` decoder), written out by hand: the GPT-2 regex
`'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+` is a
scanner over Unicode categories (Python's `re` has no `\\p{…}`). No sluice imports: it
is unit tested natively (`tests/test_bpe.py`).
"""

import re
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

#: ggml token types that are special (matched whole, never split): control, user-defined.
SPECIAL_TYPES = (3, 4)

#: The contractions GPT-2's regex takes first, in its order (after an apostrophe).
_CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's map of the 256 byte values onto printable characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = list(keep)
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


_BYTE_CHAR = bytes_to_unicode()
_CHAR_BYTE = {c: b for b, c in _BYTE_CHAR.items()}


def _kind(c: str) -> str:
    """`L` (letter), `N` (number), `S` (white space) or `O` (anything else)."""
    cat = unicodedata.category(c)
    if cat[0] in "LN":
        return cat[0]
    # Unicode White_Space (what the regex's \s is); Python's isspace adds U+001C..U+001F.
    if c.isspace() and not ("\x1c" <= c <= "\x1f"):
        return "S"
    return "O"


def split_digits(text: str) -> List[str]:
    """The `Digits(individual_digits)` pre-tokenizer: every number character alone."""
    out, start = [], 0
    for i, c in enumerate(text):
        if unicodedata.category(c)[0] == "N":
            if i > start:
                out.append(text[start:i])
            out.append(c)
            start = i + 1
    if start < len(text):
        out.append(text[start:])
    return out


def gpt2_split(text: str) -> List[str]:
    """The matches of GPT-2's pre-tokenizer regex in `text`, in order (they cover it)."""
    kinds = [_kind(c) for c in text]
    n, i, out = len(text), 0, []
    while i < n:
        c, k = text[i], kinds[i]
        j = i
        if c == "'":
            rest = text[i + 1 : i + 3]
            hit = next((s for s in _CONTRACTIONS if rest.startswith(s)), None)
            if hit is not None:
                out.append(text[i : i + 1 + len(hit)])
                i += 1 + len(hit)
                continue
        lead = 1 if c == " " and i + 1 < n and kinds[i + 1] in "LNO" else 0
        if lead or k in "LNO":
            want = kinds[i + lead]
            j = i + lead
            while j < n and kinds[j] == want:
                j += 1
            out.append(text[i:j])
            i = j
            continue
        # White space: `\s+(?!\S)`, else (one character before a non-space) `\s+`.
        while j < n and kinds[j] == "S":
            j += 1
        if j < n and j - i > 1:
            j -= 1
        out.append(text[i:j])
        i = j
    return out


class Tokenizer:
    """Byte-level BPE with special tokens; `encode` and `decode` as HF `tokenizers`
    does them for this vocabulary (`add_special_tokens=False`, `skip_special_tokens=False`)."""

    def __init__(self, tokens: Sequence[str], merges: Sequence[str], token_types: Optional[Sequence[int]] = None):
        self.tokens = list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks: Dict[Tuple[str, str], int] = {}
        for rank, m in enumerate(merges):
            a, sep, b = m.partition(" ")
            if not sep:
                raise ValueError(f"merge {m!r} is not a pair")
            self.ranks.setdefault((a, b), rank)
        types = token_types or []
        special = [t for i, t in enumerate(self.tokens) if i < len(types) and types[i] in SPECIAL_TYPES]
        self.special = {t: self.ids[t] for t in special}
        # Longest first: at one position the longest special token wins.
        alternatives = sorted(special, key=len, reverse=True)
        self._special_re = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None
        self._cache: Dict[str, List[int]] = {}

    @staticmethod
    def from_metadata(meta: dict) -> "Tokenizer":
        """From the GGUF metadata (the host's JSON object, parsed)."""
        model = meta.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"the GGUF tokenizer is {model!r}, not gpt2 (byte-level BPE)")
        tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
        if not isinstance(tokens, list) or not isinstance(merges, list):
            raise ValueError("the GGUF metadata has no tokenizer.ggml.tokens or tokenizer.ggml.merges")
        return Tokenizer(tokens, merges, meta.get("tokenizer.ggml.token_type"))

    def encode(self, text: str) -> List[int]:
        """Token ids of `text`: special tokens matched whole, nothing added around it."""
        ids: List[int] = []
        start = 0
        if self._special_re is not None:
            for m in self._special_re.finditer(text):
                self._encode_plain(text[start : m.start()], ids)
                ids.append(self.special[m.group()])
                start = m.end()
        self._encode_plain(text[start:], ids)
        return ids

    def _encode_plain(self, text: str, ids: List[int]) -> None:
        for piece in split_digits(text):
            for word in gpt2_split(piece):
                ids.extend(self._word(word))

    def _word(self, word: str) -> List[int]:
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        symbols = [_BYTE_CHAR[b] for b in word.encode("utf-8")]
        ranks = self.ranks
        while len(symbols) > 1:
            best, at = None, -1
            for i in range(len(symbols) - 1):
                r = ranks.get((symbols[i], symbols[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            a, b = symbols[at], symbols[at + 1]
            merged, i = [], 0
            while i < len(symbols):
                if i < len(symbols) - 1 and symbols[i] == a and symbols[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        out = [self.ids[s] for s in symbols]
        if len(self._cache) < 65536:
            self._cache[word] = out
        return out

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`, special tokens included as their text (an incomplete UTF-8
        sequence becomes U+FFFD, as Rust's `from_utf8_lossy`)."""
        out = bytearray()
        for i in ids:
            token = self.tokens[i]
            try:
                out.extend([_CHAR_BYTE[c] for c in token])
            except KeyError:
                out.extend(token.encode("utf-8"))
        return out.decode("utf-8", errors="replace")
