//! Continuous batching: a *serving* function takes its requests from a host queue and
//! runs many of them together, so that a generation's decode step is one pass over the
//! weights for every active sequence.
//!
//! A function that uses this module is a serving function (its component imports
//! `sluice:gpu/requests`): the host queues its requests and calls its `run` with no
//! inputs in a serving invocation ([`serving`] is true there), which loops:
//!
//! ```ignore
//! use std::time::Duration;
//! use sluice_guest::serving;
//!
//! fn serve() -> sluice_guest::Result<Vec<IoTensor>> {
//!     let mut active = Vec::new();
//!     loop {
//!         // Wait for work only when nothing runs; a step is never held for new requests.
//!         let wait = if active.is_empty() { Duration::from_millis(50) } else { Duration::ZERO };
//!         let new = serving::next(8 - active.len() as u32, wait);
//!         if new.is_empty() && active.is_empty() {
//!             return Ok(Vec::new()); // idle: the serving invocation ends
//!         }
//!         // start the new requests, run one step for every active one, `emit` each
//!         // one's chunk, `finish` those done, drop those `gone`.
//!     }
//! }
//! ```
//!
//! A serving function says so once, at its crate root, with
//! [`serving_function!`](crate::serving_function) (a custom section the host reads at
//! load; importing the interface is not enough, since every Python component imports
//! the whole world).
//!
//! Each [`Request`] is its own caller: its chunks go to its own stream, and it is
//! [`Request::gone`] once its caller closes its connection or its time limit passes.
//! [`Request::finish`] answers it; a request dropped unanswered is answered with an
//! error by the host. `docs/generation.md` has the design.

use std::time::Duration;

use crate::bindings::sluice::gpu::requests as wit;
use crate::{Inputs, IoTensor, Result, RunError};

/// Declares the function a serving function: its requests go to its serving
/// invocations (see the module). Use it once, at the crate root.
#[macro_export]
macro_rules! serving_function {
    () => {
        const _: () = {
            #[unsafe(link_section = "sluice:serving")]
            #[used]
            static SERVING: [u8; 1] = [1];
        };
    };
}

/// Whether this invocation is a serving one (its `run` was called to serve the queue).
pub fn serving() -> bool {
    wit::serving()
}

/// Up to `max` waiting requests, waiting up to `wait` for one when none waits. Empty
/// outside a serving invocation and once the host wants this invocation to end (finish
/// what it holds, then return).
pub fn next(max: u32, wait: Duration) -> Vec<Request> {
    let wait_us = u32::try_from(wait.as_micros()).unwrap_or(u32::MAX);
    wit::next(max, wait_us).into_iter().map(Request).collect()
}

/// One request of a serving invocation.
pub struct Request(wit::Request);

impl Request {
    /// Its inputs (the first call takes them; later calls return none).
    pub fn inputs(&self) -> Inputs {
        Inputs::new(self.0.inputs())
    }

    /// Sends `chunk` to this request's caller (dropped for a one-shot caller). Fails with
    /// `cancelled` once its caller has gone.
    pub fn emit(&self, chunk: &[IoTensor]) -> Result<()> {
        self.0.emit(chunk).map_err(Into::into)
    }

    /// Whether its caller has gone or its time limit passed: drop it.
    pub fn gone(&self) -> bool {
        self.0.gone()
    }

    /// Answers it with its outputs or its error (as [`crate::Function::run`]'s result
    /// would be).
    pub fn finish(self, result: Result<Vec<IoTensor>>) {
        let result = result.map_err(RunError::from);
        self.0.finish(result.as_deref());
    }
}
