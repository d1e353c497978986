//! A small Rust tokenizer for the module-cycle check: identifiers, `::`, string
//! literals and single punctuation characters, each with its line number.
//!
//! Comments (nested block comments included), character literals and lifetimes are
//! dropped; string literals (plain, byte, raw) keep their text so `#[path = "…"]` can be
//! read. Numbers become identifiers, which is harmless for path scanning.

/// One token of Rust source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    /// An identifier or keyword (`r#` prefix removed), or a number.
    Ident(String),
    /// `::`.
    PathSep,
    /// A string literal's contents, unescaped only for raw strings.
    Str(String),
    /// Any other single punctuation character.
    Punct(char),
}

/// A token and the 1-based line it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spanned {
    pub token: Token,
    pub line: usize,
}

/// Splits `source` into tokens.
pub fn tokenize(source: &str) -> Vec<Spanned> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start_line = line;
        let at = |k: usize| chars.get(i + k).copied().unwrap_or('\0');
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(1) == '*' {
            i = skip_block_comment(&chars, i, &mut line);
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            let (text, end) = raw_string(&chars, hashes, &mut line);
            tokens.push(Spanned { token: Token::Str(text), line: start_line });
            i = end;
        } else if c == '"' || (c == 'b' && at(1) == '"') {
            let open = if c == 'b' { i + 1 } else { i };
            let (text, end) = quoted(&chars, open, &mut line);
            tokens.push(Spanned { token: Token::Str(text), line: start_line });
            i = end;
        } else if c == '\'' || (c == 'b' && at(1) == '\'') {
            i = skip_char_or_lifetime(&chars, if c == 'b' { i + 1 } else { i });
        } else if c == ':' && at(1) == ':' {
            tokens.push(Spanned { token: Token::PathSep, line });
            i += 2;
        } else if c.is_alphanumeric() || c == '_' {
            if c == 'r' && at(1) == '#' && (at(2).is_alphabetic() || at(2) == '_') {
                i += 2;
            }
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Spanned { token: Token::Ident(chars[start..i].iter().collect()), line });
        } else {
            tokens.push(Spanned { token: Token::Punct(c), line });
            i += 1;
        }
    }
    tokens
}

/// Skips `/* … */` (nested) starting at `i`; returns the index after it.
fn skip_block_comment(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1).copied().unwrap_or('\0')) {
            ('/', '*') => {
                depth += 1;
                i += 2;
            }
            ('*', '/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            (c, _) => {
                if c == '\n' {
                    *line += 1;
                }
                i += 1;
            }
        }
    }
    i
}

/// If a raw string (`r"`, `r#"`, `br##"` …) starts at `i` (always the start of a word:
/// the identifier branch consumes whole words): the index just after its `r`.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    let r = match chars[i] {
        'r' => i,
        'b' if chars.get(i + 1) == Some(&'r') => i + 1,
        _ => return None,
    };
    let mut j = r + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some(r + 1)
}

/// Reads a raw string whose hashes start at `start`; returns its text and the index after it.
fn raw_string(chars: &[char], start: usize, line: &mut usize) -> (String, usize) {
    let mut i = start;
    let mut hashes = 0;
    while chars[i] == '#' {
        hashes += 1;
        i += 1;
    }
    i += 1; // the opening quote
    let body = i;
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return (chars[body..i].iter().collect(), i + 1 + hashes);
        }
        if chars[i] == '\n' {
            *line += 1;
        }
        i += 1;
    }
    (chars[body..].iter().collect(), i)
}

/// Reads a `"…"` literal whose quote is at `open`; returns its text (escapes kept) and
/// the index after it.
fn quoted(chars: &[char], open: usize, line: &mut usize) -> (String, usize) {
    let mut i = open + 1;
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\\' {
            i += 1;
        }
        if chars.get(i) == Some(&'\n') {
            *line += 1;
        }
        i += 1;
    }
    (chars[open + 1..i.min(chars.len())].iter().collect(), i + 1)
}

/// Skips a character literal or a lifetime whose quote is at `i`.
fn skip_char_or_lifetime(chars: &[char], i: usize) -> usize {
    let next = chars.get(i + 1).copied().unwrap_or('\0');
    if next == '\\' {
        // An escaped character: up to the closing quote.
        let mut j = i + 2;
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        return j + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    // A lifetime or label: the quote and its identifier.
    let mut j = i + 1;
    while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
        j += 1;
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(src: &str) -> Vec<String> {
        tokenize(src)
            .into_iter()
            .map(|t| match t.token {
                Token::Ident(s) => s,
                Token::PathSep => "::".into(),
                Token::Str(s) => format!("\"{s}\""),
                Token::Punct(c) => c.to_string(),
            })
            .collect()
    }

    #[test]
    fn drops_comments_chars_and_lifetimes() {
        let src =
            "use crate::a; // crate::b\n/* crate::c /* nested */ crate::d */ fn f<'a>(x: &'a str) -> char { 'x' }";
        assert_eq!(
            idents(src),
            [
                "use", "crate", "::", "a", ";", "fn", "f", "<", ">", "(", "x", ":", "&", "str", ")", "-", ">", "char",
                "{", "}"
            ]
        );
    }

    #[test]
    fn keeps_strings_and_counts_lines() {
        let tokens = tokenize("#[path = \"x/y.rs\"]\nmod y;\nlet s = r#\"crate::z\n\"#; b'\\n';\ncrate::w");
        assert_eq!(tokens[4].token, Token::Str("x/y.rs".into()));
        assert_eq!((tokens[6].token.clone(), tokens[6].line), (Token::Ident("mod".into()), 2));
        assert!(tokens.iter().all(|t| t.token != Token::Ident("z".into())));
        let last = tokens.last().unwrap();
        assert_eq!((last.token.clone(), last.line), (Token::Ident("w".into()), 5));
    }
}
