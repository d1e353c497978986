//! The vocabulary: token → id, built without one allocation per token.
//!
//! A fresh sluice instance builds its tokenizer on every invocation, so building must
//! be cheap: the tokens stay in one string, and an open-addressing table of entry
//! indices (a hash of a token's ends and length, linear probing, at most half full)
//! finds them.

/// Token → id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Vocab {
    text: String,
    /// (start, end, id) of each entry in `text`.
    entries: Vec<(u32, u32, u32)>,
    /// Entry index + 1 per slot; 0 is empty.
    table: Vec<u32>,
}

/// The slot of `s` in a table of `1 << bits` slots. Tokens are short, so the hash
/// reads at most the first and last eight bytes and the length (a full byte-wise
/// hash made building the table cost over a millisecond), mixes them by
/// multiplication and takes the high bits.
fn slot_of(s: &str, bits: u32) -> usize {
    let b = s.as_bytes();
    let word = |chunk: &[u8]| {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        u64::from_le_bytes(w)
    };
    let head = word(&b[..b.len().min(8)]);
    let tail = word(&b[b.len().saturating_sub(8)..]);
    let h = (head ^ tail.rotate_left(29) ^ (b.len() as u64).wrapping_mul(0xA076_1D64_78BD_642F))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h ^ (h >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9) as usize >> (usize::BITS - bits)
}

impl Vocab {
    /// `vocab.txt`: one token per line, the id is the line number.
    pub(crate) fn from_lines(text: &str) -> Vocab {
        let mut v = Vocab { text: text.to_owned(), ..Vocab::default() };
        let mut start = 0usize;
        for (id, line) in text.split_inclusive('\n').enumerate() {
            let token = line.trim_end_matches('\n').trim_end_matches('\r');
            v.entries.push((start as u32, (start + token.len()) as u32, id as u32));
            start += line.len();
        }
        v.index();
        v
    }

    /// Any (token, id) pairs.
    pub(crate) fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, u32)>) -> Vocab {
        let mut v = Vocab::default();
        for (token, id) in pairs {
            let start = v.text.len() as u32;
            v.text.push_str(token);
            v.entries.push((start, v.text.len() as u32, id));
        }
        v.index();
        v
    }

    fn token(&self, entry: usize) -> &str {
        let (s, e, _) = self.entries[entry];
        &self.text[s as usize..e as usize]
    }

    fn index(&mut self) {
        let slots = (self.entries.len() * 2).next_power_of_two().max(16);
        let bits = slots.trailing_zeros();
        self.table = vec![0; slots];
        for i in 0..self.entries.len() {
            let mut slot = slot_of(self.token(i), bits);
            loop {
                match self.table[slot] {
                    0 => {
                        self.table[slot] = i as u32 + 1;
                        break;
                    }
                    // A repeated token: the later entry wins, as in a map insert.
                    j if self.token(j as usize - 1) == self.token(i) => {
                        self.table[slot] = i as u32 + 1;
                        break;
                    }
                    _ => slot = (slot + 1) & (slots - 1),
                }
            }
        }
    }

    /// The id of `token`.
    pub(crate) fn get(&self, token: &str) -> Option<u32> {
        let mask = self.table.len().checked_sub(1)?;
        let mut slot = slot_of(token, self.table.len().trailing_zeros());
        loop {
            match self.table[slot] {
                0 => return None,
                j if self.token(j as usize - 1) == token => return Some(self.entries[j as usize - 1].2),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    /// Number of distinct tokens.
    pub(crate) fn len(&self) -> usize {
        self.table.iter().filter(|&&s| s != 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_map_to_their_numbers() {
        let v = Vocab::from_lines("[PAD]\r\nhello\n##lo\n\nworld");
        assert_eq!(v.get("[PAD]"), Some(0));
        assert_eq!(v.get("hello"), Some(1));
        assert_eq!(v.get("##lo"), Some(2));
        assert_eq!(v.get(""), Some(3));
        assert_eq!(v.get("world"), Some(4));
        assert_eq!(v.get("hel"), None);
        assert_eq!(v.len(), 5);
    }

    #[test]
    fn pairs_and_repeats_behave_like_a_map() {
        let v = Vocab::from_pairs([("a", 7), ("b", 9), ("a", 11)]);
        assert_eq!((v.get("a"), v.get("b"), v.get("c")), (Some(11), Some(9), None));
        assert_eq!(v.len(), 2);
        assert_eq!(Vocab::default().get("a"), None);
    }

    #[test]
    fn many_tokens_all_found() {
        let text: String = (0..5000).map(|i| format!("tok{i}\n")).collect();
        let v = Vocab::from_lines(&text);
        for i in 0..5000 {
            assert_eq!(v.get(&format!("tok{i}")), Some(i));
        }
    }
}
