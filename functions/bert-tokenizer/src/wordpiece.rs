//! Greedy longest-match-first WordPiece over one pre-tokenised word: the first piece
//! is looked up as is, later ones with the continuation prefix (`##`). A word with
//! any part that matches nothing, or longer than the character limit, becomes the
//! unknown token as a whole.

use crate::vocab::Vocab;

/// A WordPiece vocabulary with its unknown-token policy.
#[derive(Debug, Clone)]
pub struct WordPiece {
    pub(crate) vocab: Vocab,
    pub(crate) unk_id: u32,
    pub(crate) prefix: String,
    pub(crate) max_input_chars_per_word: usize,
}

impl WordPiece {
    /// Appends the ids of `word`'s pieces to `out`.
    pub fn tokenize_word(&self, word: &str, out: &mut Vec<u32>) {
        if word.chars().count() > self.max_input_chars_per_word {
            out.push(self.unk_id);
            return;
        }
        let first = out.len();
        let mut start = 0;
        let mut buf = String::with_capacity(word.len() + self.prefix.len());
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while start < end {
                buf.clear();
                if start > 0 {
                    buf.push_str(&self.prefix);
                }
                buf.push_str(&word[start..end]);
                if let Some(id) = self.vocab.get(buf.as_str()) {
                    found = Some(id);
                    break;
                }
                // Step back one whole character.
                end -= word[start..end].chars().next_back().map_or(1, char::len_utf8);
            }
            match found {
                Some(id) => {
                    out.push(id);
                    start = end;
                }
                None => {
                    out.truncate(first);
                    out.push(self.unk_id);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wp() -> WordPiece {
        let vocab = Vocab::from_pairs(
            ["[UNK]", "un", "##aff", "##able", "a", "##b", "é"].iter().enumerate().map(|(i, t)| (*t, i as u32)),
        );
        WordPiece { vocab, unk_id: 0, prefix: "##".into(), max_input_chars_per_word: 10 }
    }

    #[test]
    fn greedy_longest_match() {
        let mut out = vec![];
        wp().tokenize_word("unaffable", &mut out);
        assert_eq!(out, [1, 2, 3]);
    }

    #[test]
    fn unknown_part_makes_whole_word_unknown() {
        let mut out = vec![9];
        wp().tokenize_word("unaffablez", &mut out);
        assert_eq!(out, [9, 0]);
    }

    #[test]
    fn too_long_word_is_unknown() {
        let mut out = vec![];
        wp().tokenize_word("abbbbbbbbbb", &mut out);
        assert_eq!(out, [0]);
        out.clear();
        wp().tokenize_word("abbbbbbbbb", &mut out);
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn multibyte_chars() {
        let mut out = vec![];
        wp().tokenize_word("é", &mut out);
        assert_eq!(out, [6]);
    }
}
