//! BERT pre-tokenisation (HF `BertPreTokenizer`): split on whitespace (dropped) and
//! isolate every punctuation character as its own word. Punctuation is ASCII
//! punctuation plus every Unicode `P*` category, so `$`, `+`, `^` count too.

use unicode_general_category::{GeneralCategory, get_general_category};

/// `char::is_ascii_punctuation` or a Unicode punctuation category (Pc Pd Ps Pe Pi Pf Po).
pub fn is_bert_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(
            get_general_category(c),
            GeneralCategory::ConnectorPunctuation
                | GeneralCategory::DashPunctuation
                | GeneralCategory::OpenPunctuation
                | GeneralCategory::ClosePunctuation
                | GeneralCategory::InitialPunctuation
                | GeneralCategory::FinalPunctuation
                | GeneralCategory::OtherPunctuation
        )
}

/// Splits normalised text into words.
pub fn pre_tokenize(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        let ws = c.is_whitespace();
        let punct = !ws && is_bert_punctuation(c);
        if ws || punct {
            if let Some(s) = start.take() {
                words.push(&text[s..i]);
            }
            if punct {
                words.push(&text[i..i + c.len_utf8()]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        words.push(&text[s..]);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_whitespace_and_punctuation() {
        assert_eq!(pre_tokenize("  hello, world!! a+b "), ["hello", ",", "world", "!", "!", "a", "+", "b"]);
        assert_eq!(pre_tokenize("don't"), ["don", "'", "t"]);
        assert_eq!(pre_tokenize("“quoted”—dash¿"), ["“", "quoted", "”", "—", "dash", "¿"]);
        assert!(pre_tokenize("   ").is_empty());
    }

    #[test]
    fn symbols_that_are_not_punctuation_stay() {
        // '€' (Sc) and '🙂' (So) are not punctuation; '$' is ASCII punctuation.
        assert_eq!(pre_tokenize("5€ $5 🙂x"), ["5€", "$", "5", "🙂x"]);
    }
}
