//! The summary of skipped tests at the end of `cargo xtask test`.
//!
//! Tests that skip append `<class>\t<test>\t<reason>` to the skip log
//! (`tests/src/skip.rs`); a test may record the same skip more than once (helpers it
//! calls twice), so each test counts once per class. One line per class:
//! `CUDA: 10 tests skipped: no CUDA driver found`, with a count per reason when a class
//! has several, then the total.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};

/// Class → reason → the tests skipped for it.
type Skips = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// Prints the summary of the skip log at `log`.
pub fn summarize(log: &Path) -> Result<()> {
    let text = std::fs::read_to_string(log).with_context(|| format!("reading the skip log {}", log.display()))?;
    eprintln!();
    for line in summary_lines(&parse(&text)) {
        eprintln!("xtask: {line}");
    }
    Ok(())
}

/// Reads the log's lines (a malformed line counts under the class `unknown`).
fn parse(text: &str) -> Skips {
    let mut skips = Skips::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.splitn(3, '\t');
        let (class, test, reason) = match (fields.next(), fields.next(), fields.next()) {
            (Some(c), Some(t), Some(r)) => (c, t, r),
            _ => ("unknown", line, "malformed skip-log line"),
        };
        skips.entry(class.into()).or_default().entry(reason.into()).or_default().insert(test.into());
    }
    skips
}

/// One line per class, then the total.
fn summary_lines(skips: &Skips) -> Vec<String> {
    let mut lines = Vec::new();
    let mut total = 0;
    for (class, reasons) in skips {
        let tests: BTreeSet<&String> = reasons.values().flatten().collect();
        total += tests.len();
        let why = if reasons.len() == 1 {
            reasons.keys().next().cloned().unwrap_or_default()
        } else {
            reasons.iter().map(|(reason, t)| format!("{} for {reason}", t.len())).collect::<Vec<_>>().join("; ")
        };
        lines.push(format!("{class}: {} skipped: {why}", tests_word(tests.len())));
    }
    lines.push(match total {
        0 => "no test skipped".to_string(),
        n => format!("{} skipped in all", tests_word(n)),
    });
    lines
}

/// `1 test`, `2 tests`.
fn tests_word(n: usize) -> String {
    if n == 1 { "1 test".into() } else { format!("{n} tests") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_class_counting_each_test_once() {
        let log = "CUDA\ta\tno CUDA driver found\nCUDA\tb\tno CUDA driver found\nCUDA\ta\tno CUDA driver found\n\
                   GPU\tx\ta CUDA device is usable\nNVRTC\tc\tno lib\nNVRTC\td\tbroken lib\nbad line\n";
        assert_eq!(
            summary_lines(&parse(log)),
            [
                "CUDA: 2 tests skipped: no CUDA driver found",
                "GPU: 1 test skipped: a CUDA device is usable",
                "NVRTC: 2 tests skipped: 1 for broken lib; 1 for no lib",
                "unknown: 1 test skipped: malformed skip-log line",
                "6 tests skipped in all",
            ]
        );
        assert_eq!(summary_lines(&parse("")), ["no test skipped"]);
    }
}
