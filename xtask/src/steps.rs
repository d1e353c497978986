//! Running a command's steps one after another with a progress line before each, its
//! time after it, and a table of every step at the end.
//!
//! A failing step does not stop the ones after it (each prints why it failed), so one
//! run shows every problem; [`Steps::finish`] fails if any step did.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// The outcome of one step.
struct Outcome {
    name: String,
    took: Duration,
    error: Option<String>,
}

/// The steps run so far, out of a known total.
pub struct Steps {
    total: usize,
    done: Vec<Outcome>,
}

impl Steps {
    /// Steps to come: `total` of them (for the `[3/12]` counter).
    pub fn new(total: usize) -> Self {
        Self { total, done: Vec::new() }
    }

    /// Runs the step `name`, printing its start, its time and whether it passed.
    pub fn run(&mut self, name: &str, step: impl FnOnce() -> Result<()>) {
        let number = self.done.len() + 1;
        eprintln!("\nxtask: [{number}/{}] {name}", self.total);
        let start = Instant::now();
        let result = step();
        let took = start.elapsed();
        let error = match result {
            Ok(()) => {
                eprintln!("xtask: [{number}/{}] {name}: passed in {}", self.total, seconds(took));
                None
            }
            Err(e) => {
                eprintln!("xtask: [{number}/{}] {name}: FAILED in {}: {e:#}", self.total, seconds(took));
                Some(format!("{e:#}"))
            }
        };
        self.done.push(Outcome { name: name.to_string(), took, error });
    }

    /// Prints every step with its time and result; fails if any step failed.
    pub fn finish(self, what: &str) -> Result<()> {
        eprintln!("\nxtask: {what}: {} steps", self.done.len());
        for outcome in &self.done {
            let result = if outcome.error.is_some() { "FAILED" } else { "passed" };
            eprintln!("  {:>8}  {result}  {}", seconds(outcome.took), outcome.name);
        }
        let total: Duration = self.done.iter().map(|o| o.took).sum();
        eprintln!("  {:>8}  in all", seconds(total));
        let failed: Vec<&str> = self.done.iter().filter(|o| o.error.is_some()).map(|o| o.name.as_str()).collect();
        if !failed.is_empty() {
            bail!("{what}: {} of {} steps failed: {}", failed.len(), self.done.len(), failed.join("; "));
        }
        Ok(())
    }
}

/// `12.3 s`.
fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
