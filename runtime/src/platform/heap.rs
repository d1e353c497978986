//! Hands the heap memory that bursts of work freed back to the OS once the platform is
//! idle.
//!
//! Tensors on the CPU device and guests' buffers are large allocations; after a burst,
//! the allocator (glibc) keeps much of what was freed, so the resident size stays near the
//! burst's peak although little is live. A watcher thread checks every
//! [`IDLE_CHECK`] whether invocations ran since it last looked and none is in flight now,
//! and then asks the allocator to release its free pages (`malloc_trim`). It costs
//! nothing while work is running and stops with the platform.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Platform;

/// How often the watcher looks for an idle platform.
pub const IDLE_CHECK: Duration = Duration::from_secs(2);

/// Starts the watcher for `platform` (a no-op where the allocator cannot trim).
pub(crate) fn trim_when_idle(platform: &Arc<Platform>) {
    if !can_trim() {
        return;
    }
    let weak: Weak<Platform> = Arc::downgrade(platform);
    let started = std::thread::Builder::new().name("sluice-heap-trim".into()).spawn(move || {
        let mut seen = 0;
        loop {
            std::thread::sleep(IDLE_CHECK);
            let Some(platform) = weak.upgrade() else { return };
            let ran = platform.counters.invocations.load(Ordering::Relaxed)
                + platform.counters.invocation_errors.load(Ordering::Relaxed);
            let idle = platform.counters.in_flight.load(Ordering::Relaxed) == 0;
            drop(platform);
            if idle && ran != seen {
                seen = ran;
                release_free_heap();
            }
        }
    });
    if let Err(e) = started {
        tracing::warn!(error = %e, "could not start the heap trimmer; memory freed after bursts stays resident");
    }
}

fn can_trim() -> bool {
    cfg!(all(target_os = "linux", target_env = "gnu"))
}

/// Returns the allocator's free pages to the OS.
fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}
