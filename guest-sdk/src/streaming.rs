//! Streaming output: chunks sent to the caller while the function runs (a generation's
//! tokens, one chunk each), and whether the caller is still there.
//!
//! ```ignore
//! use sluice_guest::{IoTensor, streaming};
//!
//! for piece in pieces {
//!     if streaming::caller_gone() {
//!         break; // nobody reads the rest
//!     }
//!     streaming::emit(&[IoTensor::text("text_output", &[piece])])?;
//! }
//! ```
//!
//! A one-shot caller (`/infer`, `/generate`, `stream: false`) gets no chunks: `emit`
//! succeeds and drops them, so a streaming function returns its whole result from
//! [`crate::Function::run`] as well. A streaming caller reads them as they come; `emit`
//! waits while it has not read earlier ones. Once the caller has gone (closed its
//! connection), `emit` and every host call that can fail return
//! [`ErrorCode::Cancelled`](crate::ErrorCode::Cancelled): return then (`?` does), and the
//! host frees the invocation's device memory.

use crate::bindings::sluice::gpu::streaming as wit;
use crate::{IoTensor, Result};

/// Sends `chunk` (named outputs) to a streaming caller now; a one-shot caller's chunk
/// is dropped. Fails with `cancelled` once the caller has gone.
pub fn emit(chunk: &[IoTensor]) -> Result<()> {
    wit::emit(chunk).map_err(Into::into)
}

/// Whether the caller has gone: stop early (its result would not be read).
pub fn caller_gone() -> bool {
    wit::caller_gone()
}
