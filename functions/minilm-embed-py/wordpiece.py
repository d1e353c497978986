"""BERT's uncased WordPiece tokenizer in pure Python, as HF `tokenizers` defines it for
all-MiniLM-L6-v2 (`BertNormalizer` with lowercasing, accent stripping and CJK padding;
`BertPreTokenizer`; `WordPiece` with `##` continuations, `[UNK]` for words over 100
characters or without a decomposition; `[CLS] … [SEP]`, truncated to `max_len`).
"""

import re
import unicodedata

#: ASCII text (the common case) skips the Unicode tables: control characters other than
#: tab, newline and carriage return are dropped, those three become spaces.
_ASCII_CLEAN = {c: None for c in [*range(0, 9), 11, 12, *range(14, 32), 127]}
_ASCII_CLEAN.update({9: " ", 10: " ", 13: " "})
#: After cleaning and lowercasing, an ASCII word is a run of letters and digits; every
#: other printable character is punctuation (BERT's ASCII punctuation ranges).
_ASCII_WORDS = re.compile(r"[a-z0-9]+|[^a-z0-9 ]")


def _is_control(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class WordPiece:
    def __init__(self, vocab_txt: bytes, max_chars_per_word: int = 100):
        tokens = vocab_txt.decode("utf-8").split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        self.vocab = {t.rstrip("\r"): i for i, t in enumerate(tokens)}
        self.unk, self.cls, self.sep = (self.vocab[t] for t in ("[UNK]", "[CLS]", "[SEP]"))
        self.pad = self.vocab.get("[PAD]", 0)
        self.max_chars = max_chars_per_word

    def normalize(self, text: str) -> str:
        if text.isascii():
            return text.translate(_ASCII_CLEAN).lower()
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or _is_control(ch):
                continue
            if _is_whitespace(ch):
                out.append(" ")
            elif _is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        text = unicodedata.normalize("NFD", "".join(out))
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
        return text.lower()

    def pre_tokenize(self, text: str):
        if text.isascii():
            return _ASCII_WORDS.findall(text)
        words = []
        for chunk in text.split():
            word = []
            for ch in chunk:
                if _is_punctuation(ch):
                    if word:
                        words.append("".join(word))
                        word = []
                    words.append(ch)
                else:
                    word.append(ch)
            if word:
                words.append("".join(word))
        return words

    def word_ids(self, word: str):
        if len(word) > self.max_chars:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end, found = len(word), None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    found = self.vocab[piece]
                    break
                end -= 1
            if found is None:
                return [self.unk]
            ids.append(found)
            start = end
        return ids

    def encode(self, text: str, max_len: int):
        ids = []
        for word in self.pre_tokenize(self.normalize(text)):
            ids.extend(self.word_ids(word))
        return [self.cls] + ids[: max(max_len - 2, 0)] + [self.sep]
