//! BERT text normalisation, as HF `tokenizers`' `BertNormalizer` does it: clean the text
//! (drop NUL, U+FFFD and control/format/unassigned/private-use characters, map every
//! whitespace to a plain space), put spaces around CJK ideographs, strip accents (NFD,
//! then drop nonspacing marks) and lowercase, in that order.

use unicode_general_category::{GeneralCategory, get_general_category};
use unicode_normalization::UnicodeNormalization;

/// Which normalisation steps run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormalizerFlags {
    /// Remove control characters and map whitespace to `' '`.
    pub clean_text: bool,
    /// Surround CJK ideographs with spaces so each becomes its own word.
    pub handle_chinese_chars: bool,
    /// NFD-decompose and drop nonspacing marks (Mn).
    pub strip_accents: bool,
    /// Lowercase every character.
    pub lowercase: bool,
}

impl Default for NormalizerFlags {
    /// The uncased BERT defaults (all steps on).
    fn default() -> Self {
        Self { clean_text: true, handle_chinese_chars: true, strip_accents: true, lowercase: true }
    }
}

/// Whitespace in BERT's sense: tab, newline and carriage return count, even though
/// they are control characters.
pub(crate) fn is_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

/// "Other" characters (Cc, Cf, Cs, Co, Cn) except the three whitespace controls.
fn is_control(c: char) -> bool {
    if matches!(c, '\t' | '\n' | '\r') {
        return false;
    }
    matches!(
        get_general_category(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::Surrogate
            | GeneralCategory::PrivateUse
            | GeneralCategory::Unassigned
    )
}

/// CJK Unified Ideographs and their extension / compatibility blocks, with the same
/// ranges as HF `tokenizers` (Hangul, Hiragana and Katakana are not included).
pub(crate) fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

/// Normalises `text` according to `flags`.
pub fn normalize(text: &str, flags: NormalizerFlags) -> String {
    let mut s: String = if flags.clean_text {
        text.chars()
            .filter(|&c| !(c == '\0' || c == '\u{FFFD}' || is_control(c)))
            .map(|c| if is_whitespace(c) { ' ' } else { c })
            .collect()
    } else {
        text.to_owned()
    };
    if flags.handle_chinese_chars && s.chars().any(is_chinese_char) {
        let mut out = String::with_capacity(s.len() + 8);
        for c in s.chars() {
            if is_chinese_char(c) {
                out.push(' ');
                out.push(c);
                out.push(' ');
            } else {
                out.push(c);
            }
        }
        s = out;
    }
    if flags.strip_accents {
        s = s.nfd().filter(|&c| get_general_category(c) != GeneralCategory::NonspacingMark).collect();
    }
    if flags.lowercase {
        // Per character, like HF (no final-sigma context rule of `str::to_lowercase`).
        s = s.chars().flat_map(char::to_lowercase).collect();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleans_controls_and_whitespace() {
        let f = NormalizerFlags::default();
        assert_eq!(normalize("a\tb\nc\r\u{0}d\u{FFFD}e\u{200B}f\u{7}g\u{3000}h", f), "a b c defg h");
    }

    #[test]
    fn strips_accents_and_lowercases() {
        let f = NormalizerFlags::default();
        assert_eq!(normalize("Café CRÈME Brûlée Ñandú", f), "cafe creme brulee nandu");
        let keep = NormalizerFlags { strip_accents: false, ..f };
        assert_eq!(normalize("Café", keep), "café");
    }

    #[test]
    fn spaces_around_cjk() {
        let f = NormalizerFlags::default();
        assert_eq!(normalize("日本語x", f), " 日  本  語 x");
        // Hiragana is not a "Chinese character" (and stripping accents drops its dakuten).
        assert_eq!(normalize("ひらがな", f), "ひらかな");
    }
}
