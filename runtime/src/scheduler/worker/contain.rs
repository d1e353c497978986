//! The panic boundary around the backend: every call into the device that runs a
//! command (upload, launch, download) goes through [`contain`], so a backend that
//! panics fails that command, and with it the invocation that queued it, while the
//! device actor keeps serving everyone else.

use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::device::DeviceError;

/// Runs the backend call `call` (named `what` in the error), turning a panic into a
/// [`DeviceError::Failure`] of that call, counted in `faults`.
///
/// Unwind safety: a backend call only reads its input buffers (immutable, shared) and
/// builds a new one; the actor's own state is not touched inside the boundary.
pub(super) fn contain<T>(
    faults: &Cell<u64>,
    what: &str,
    call: impl FnOnce() -> Result<T, DeviceError>,
) -> Result<T, DeviceError> {
    catch_unwind(AssertUnwindSafe(call)).unwrap_or_else(|payload| {
        faults.set(faults.get() + 1);
        let why = panic_message(payload.as_ref());
        tracing::error!(what, why, "the device backend panicked; the command fails, the device keeps serving");
        Err(DeviceError::Failure(format!("the device backend panicked in {what}: {why}")))
    })
}

/// The message of a panic payload (a `&str` or a `String`, as `panic!` makes).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_calls_error() {
        let faults = Cell::new(0);
        let e = contain::<()>(&faults, "a launch", || panic!("index out of bounds")).unwrap_err();
        assert_eq!(e, DeviceError::Failure("the device backend panicked in a launch: index out of bounds".into()));
        assert_eq!(contain(&faults, "an upload", || Ok(3)), Ok(3));
        let why = format!("{} of {}", 1, 2);
        assert!(contain::<()>(&faults, "x", move || panic!("{why}")).unwrap_err().to_string().contains("1 of 2"));
        assert_eq!(faults.get(), 2, "panics are counted, errors and successes are not");
    }
}
