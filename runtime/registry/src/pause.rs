//! Pause points in the registry's long loops: reading back every version of a tenant,
//! listing the blob files, a gc pass. The runtime runs tenants' registry work on
//! idle-class threads that give their core away every 250 µs (`background.rs` in the
//! runtime), but this crate knows nothing of threads' classes, so the runtime installs
//! what a pause point does ([`set_pause_point`]) and the loops here call it once per
//! entry. Without a hook a pause point does nothing.

use std::sync::OnceLock;

static HOOK: OnceLock<fn()> = OnceLock::new();

/// Sets what every pause point calls, once per process (later calls change nothing). It
/// must be cheap where it has nothing to do: it runs once per entry of every scan.
pub fn set_pause_point(hook: fn()) {
    let _ = HOOK.set(hook);
}

/// A point in a long loop where the thread may give its core away.
pub(crate) fn point() {
    if let Some(hook) = HOOK.get() {
        hook();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    static CALLS: AtomicUsize = AtomicUsize::new(0);

    #[test]
    fn a_pause_point_calls_the_hook_once_set() {
        set_pause_point(|| {
            CALLS.fetch_add(1, Ordering::Relaxed);
        });
        let before = CALLS.load(Ordering::Relaxed);
        point();
        point();
        assert_eq!(CALLS.load(Ordering::Relaxed) - before, 2);
    }
}
