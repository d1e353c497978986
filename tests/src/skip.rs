//! Recording a skipped test, so that a skip is never silent: the reason goes to the
//! test's output, and a line to the run's skip log, from which `cargo xtask test`
//! prints one summary line per class ("CUDA: 10 tests skipped: no CUDA driver found").
//!
//! The log is the file named by `SLUICE_SKIP_LOG` (the xtask sets it); each skip appends
//! one line `<class>\t<test>\t<reason>`, where `<test>` is the name of the running test
//! (libtest names each test's thread after it). Without the variable only the reason is
//! printed. This file is shared by path (`#[path = …] mod skip;`) with the test crates
//! that cannot depend on `sluice-tests`, such as the CUDA backend's.

use std::io::Write;

/// Prints `skipping (<class>): <reason>` and records the skip of the running test in
/// the skip log. The caller then returns from the test.
pub fn skip(class: &str, reason: &str) {
    eprintln!("skipping ({class}): {reason}");
    let Some(log) = std::env::var_os("SLUICE_SKIP_LOG").filter(|v| !v.is_empty()) else { return };
    let thread = std::thread::current();
    let test = thread.name().filter(|n| *n != "main").unwrap_or("<unnamed test>");
    let line = format!("{}\t{}\t{}\n", one_line(class), one_line(test), one_line(reason));
    // One write of one short line to a file opened for appending: lines from tests
    // running in parallel (and from other test processes) do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("could not record the skip in {}: {e}", log.to_string_lossy());
    }
}

/// `text` with tabs and line breaks replaced by spaces (the log's separators).
fn one_line(text: &str) -> String {
    text.replace(['\t', '\n', '\r'], " ")
}
