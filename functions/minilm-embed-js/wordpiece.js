/**
 * BERT's uncased WordPiece tokenizer in plain JavaScript, ported from the Python
 * function's `wordpiece.py`: as HF `tokenizers` defines it for all-MiniLM-L6-v2
 * (`BertNormalizer` with lowercasing, accent stripping and CJK padding;
 * `BertPreTokenizer`; `WordPiece` with `##` continuations, `[UNK]` for words over 100
 * characters or without a decomposition; `[CLS] … [SEP]`, truncated to `maxLen`).
 *
 * StarlingMonkey has no ICU, so the Unicode categories and the NFD decomposition come
 * from the tables of `unicode.js` (generated from Python's `unicodedata`, the data the
 * Python port uses). Lengths and slices count code points, as Python's do.
 */

import {
  COMBINING_CLASS,
  DECOMPOSITION,
  NONSPACING_MARK,
  OTHER,
  PUNCTUATION,
  SPACE_SEPARATOR,
} from './unicode.js';

/** Whether `cp` is in the sorted ranges `[lo, hi, …]` (of `stride` numbers each). */
function inRanges(table, cp, stride = 2) {
  let lo = 0;
  let hi = table.length / stride - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (cp < table[mid * stride]) {
      hi = mid - 1;
    } else if (cp > table[mid * stride + 1]) {
      lo = mid + 1;
    } else {
      return mid;
    }
  }
  return -1;
}

function combiningClass(cp) {
  const i = inRanges(COMBINING_CLASS, cp, 3);
  return i < 0 ? 0 : COMBINING_CLASS[i * 3 + 2];
}

/** Code point → its full canonical decomposition (parsed once, at build time). */
const DECOMPOSE = new Map(
  DECOMPOSITION.split(';').map((entry) => {
    const [cp, to] = entry.split(':');
    return [parseInt(cp, 16), to.split(' ').map((h) => parseInt(h, 16))];
  }),
);

/** `text` in Unicode normalisation form D (canonical decomposition and ordering). */
export function nfd(text) {
  const out = [];
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    if (cp >= 0xac00 && cp <= 0xd7a3) {
      // Hangul syllables decompose by formula into their jamo.
      const s = cp - 0xac00;
      out.push(0x1100 + Math.floor(s / 588), 0x1161 + Math.floor((s % 588) / 28));
      if (s % 28 !== 0) out.push(0x11a7 + (s % 28));
    } else {
      const d = DECOMPOSE.get(cp);
      if (d === undefined) out.push(cp);
      else out.push(...d);
    }
  }
  // Canonical ordering: a stable sort by combining class of each run of non-starters.
  for (let i = 0; i < out.length; ) {
    if (combiningClass(out[i]) === 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < out.length && combiningClass(out[j]) !== 0) j++;
    if (j - i > 1) {
      const run = out.slice(i, j).map((cp, k) => [combiningClass(cp), k, cp]);
      run.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      run.forEach(([, , cp], k) => {
        out[i + k] = cp;
      });
    }
    i = j;
  }
  return String.fromCodePoint(...out);
}

/** ASCII control characters other than tab, newline and carriage return are dropped,
 * those three become spaces. */
const ASCII_CLEAN = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|[\t\n\r]/g;
/** After cleaning and lowercasing, an ASCII word is a run of letters and digits; every
 * other printable character is punctuation (BERT's ASCII punctuation ranges). */
const ASCII_WORDS = /[a-z0-9]+|[^a-z0-9 ]/g;
/** What Python's `str.split()` splits on (`str.isspace`). */
const PY_WHITESPACE = /[\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/;

function isAscii(text) {
  return /^[\x00-\x7f]*$/.test(text);
}

function isControl(cp) {
  if (cp === 9 || cp === 10 || cp === 13) return false;
  return inRanges(OTHER, cp) >= 0;
}

function isWhitespace(cp) {
  return cp === 32 || cp === 9 || cp === 10 || cp === 13 || inRanges(SPACE_SEPARATOR, cp) >= 0;
}

function isPunctuation(cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126)) {
    return true;
  }
  return inRanges(PUNCTUATION, cp) >= 0;
}

function isCjk(cp) {
  return (
    (cp >= 0x4e00 && cp <= 0x9fff) ||
    (cp >= 0x3400 && cp <= 0x4dbf) ||
    (cp >= 0x20000 && cp <= 0x2a6df) ||
    (cp >= 0x2a700 && cp <= 0x2b73f) ||
    (cp >= 0x2b740 && cp <= 0x2b81f) ||
    (cp >= 0x2b820 && cp <= 0x2ceaf) ||
    (cp >= 0xf900 && cp <= 0xfaff) ||
    (cp >= 0x2f800 && cp <= 0x2fa1f)
  );
}

export class WordPiece {
  /** `vocabTxt`: the bytes of `vocab.txt`, one token a line. */
  constructor(vocabTxt, maxCharsPerWord = 100) {
    const tokens = new TextDecoder('utf-8').decode(vocabTxt).split('\n');
    if (tokens.length > 0 && tokens[tokens.length - 1] === '') tokens.pop();
    this.vocab = new Map();
    tokens.forEach((t, i) => this.vocab.set(t.replace(/\r+$/, ''), i));
    const id = (t) => {
      const i = this.vocab.get(t);
      if (i === undefined) throw new Error(`the vocabulary has no ${t}`);
      return i;
    };
    this.unk = id('[UNK]');
    this.cls = id('[CLS]');
    this.sep = id('[SEP]');
    this.pad = this.vocab.get('[PAD]') ?? 0;
    this.maxChars = maxCharsPerWord;
  }

  normalize(text) {
    if (isAscii(text)) {
      return text.replace(ASCII_CLEAN, (c) => (c === '\t' || c === '\n' || c === '\r' ? ' ' : '')).toLowerCase();
    }
    const out = [];
    for (const ch of text) {
      const cp = ch.codePointAt(0);
      if (cp === 0 || cp === 0xfffd || isControl(cp)) continue;
      if (isWhitespace(cp)) out.push(' ');
      else if (isCjk(cp)) out.push(` ${ch} `);
      else out.push(ch);
    }
    let stripped = '';
    for (const ch of nfd(out.join(''))) {
      if (inRanges(NONSPACING_MARK, ch.codePointAt(0)) < 0) stripped += ch;
    }
    return stripped.toLowerCase();
  }

  preTokenize(text) {
    if (isAscii(text)) {
      return text.match(ASCII_WORDS) ?? [];
    }
    const words = [];
    for (const chunk of text.split(PY_WHITESPACE)) {
      let word = '';
      for (const ch of chunk) {
        if (isPunctuation(ch.codePointAt(0))) {
          if (word) words.push(word);
          word = '';
          words.push(ch);
        } else {
          word += ch;
        }
      }
      if (word) words.push(word);
    }
    return words;
  }

  wordIds(word) {
    const chars = Array.from(word);
    if (chars.length > this.maxChars) return [this.unk];
    const ids = [];
    let start = 0;
    while (start < chars.length) {
      let end = chars.length;
      let found;
      while (start < end) {
        const piece = (start === 0 ? '' : '##') + chars.slice(start, end).join('');
        found = this.vocab.get(piece);
        if (found !== undefined) break;
        end -= 1;
      }
      if (found === undefined) return [this.unk];
      ids.push(found);
      start = end;
    }
    return ids;
  }

  /** The token ids of `text`: `[CLS]`, at most `maxLen - 2` word pieces, `[SEP]`. */
  encode(text, maxLen) {
    const ids = [];
    for (const word of this.preTokenize(this.normalize(text))) {
      ids.push(...this.wordIds(word));
    }
    return [this.cls, ...ids.slice(0, Math.max(maxLen - 2, 0)), this.sep];
  }
}
