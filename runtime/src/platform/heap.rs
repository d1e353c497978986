//! Hands the heap memory that bursts of work freed back to the OS once the platform is
//! idle.
//!
//! Tensors on the CPU device and guests' buffers are large allocations; after a burst,
//! the allocator (glibc) keeps much of what was freed, so the resident size stays near the
//! burst's peak although little is live. A watcher thread checks every
//! [`IDLE_CHECK`] whether invocations ran since it last looked and none is in flight now,
//! and then asks the allocator to release its free pages (`malloc_trim`). It costs
//! nothing while work is running and stops with the platform.
//!
//! Trimming returns only whole free pages, so how the free memory is spread matters too:
//! glibc gives each thread that allocates under contention an arena of its own, up to
//! eight per core, and a burst that runs on many threads (guests, HTTP workers, the
//! device's pool) leaves each arena fragmented by the few allocations still live in it.
//! [`bound_arenas`] caps them at two per core. Measured with the hostile-load suite
//! (`cargo xtask soak`, two cores, `bench/RESULTS.md`): the server's resident size
//! settled at 1.27–1.58× its size at the start of the load with glibc's default, at
//! 1.08–1.34× (within 1.2× in seven runs of twelve) with four arenas.

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

/// Arenas per core that [`bound_arenas`] allows.
pub const ARENAS_PER_CORE: usize = 2;

/// The arenas [`bound_arenas`] allows: [`ARENAS_PER_CORE`] per core.
fn arena_bound() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_mul(ARENAS_PER_CORE)
}

/// Caps the allocator's arenas at [`ARENAS_PER_CORE`] per core, unless the operator set
/// `MALLOC_ARENA_MAX`. Call it before the process starts its threads: arenas made before
/// it stay.
pub(crate) fn bound_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        let arenas = i32::try_from(arena_bound()).unwrap_or(i32::MAX);
        // SAFETY: mallopt sets one of the allocator's parameters; it takes no pointers.
        if unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) } == 0 {
            tracing::debug!(arenas, "the allocator refused an arena limit");
        }
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

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    /// Set in the child process [`arenas_stay_within_the_bound`] runs itself in.
    const CHILD: &str = "SLUICE_TEST_ARENA_CHILD";

    /// The allocator's arenas now: glibc's `malloc_info` lists one `<heap nr=…>` each.
    fn arenas() -> usize {
        let mut buf: *mut libc::c_char = std::ptr::null_mut();
        let mut len: libc::size_t = 0;
        // SAFETY: the stream writes into a buffer it allocates and `fclose` finalizes;
        // `buf` and `len` are read only after that, and the buffer is freed once.
        unsafe {
            let stream = libc::open_memstream(&mut buf, &mut len);
            assert!(!stream.is_null(), "open_memstream failed");
            libc::malloc_info(0, stream);
            libc::fclose(stream);
            let text = String::from_utf8_lossy(std::slice::from_raw_parts(buf.cast::<u8>(), len)).into_owned();
            libc::free(buf.cast());
            text.matches("<heap nr=").count()
        }
    }

    /// `n` threads alive at once that each allocate: glibc gives every new thread an
    /// arena of its own until it reaches its limit.
    fn allocate_on_threads_at_once(n: usize) {
        let all_allocated = Arc::new(Barrier::new(n));
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let all_allocated = all_allocated.clone();
                std::thread::spawn(move || {
                    let kept = std::hint::black_box(vec![1u8; 4096]);
                    all_allocated.wait();
                    kept.len()
                })
            })
            .collect();
        for t in threads {
            t.join().expect("an allocating thread");
        }
    }

    #[test]
    fn arenas_stay_within_the_bound() {
        let bound = arena_bound();
        if std::env::var_os(CHILD).is_some() {
            bound_arenas();
            allocate_on_threads_at_once(4 * bound + 8);
            let made = arenas();
            assert!(made <= bound, "{made} arenas; the bound is {bound} ({ARENAS_PER_CORE} per core)");
            return;
        }
        // Arenas are per process and other tests make them: run alone in a child.
        let output = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", "platform::heap::tests::arenas_stay_within_the_bound", "--test-threads", "1"])
            .env(CHILD, "1")
            .env_remove("MALLOC_ARENA_MAX")
            .output()
            .expect("running the test binary");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
        assert!(stdout.contains("1 passed"), "the child ran the test: {stdout}");
    }
}
