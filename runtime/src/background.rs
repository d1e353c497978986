//! Background threads: work the host does for a tenant that must never take a core from
//! latency work (batch-class guests, compiling components, the control plane's work for
//! a tenant), run in Linux's idle scheduling class (`SCHED_IDLE`), the pool that
//! compiles components on such threads, and the pool that runs the control plane's
//! blocking work on them.
//!
//! A woken normal thread does not always take its core from an idle-class one at once:
//! on the two-core VM this was measured on, it sometimes waits for the next scheduler
//! tick (4 ms; `platform/guest_threads.rs`). So long host-side work on a background
//! thread (hashing and writing an upload, rendering GGUF metadata for a batch guest)
//! gives its core away between pieces ([`give_way_if_due`]), as batch guests do in Wasm
//! at every epoch tick, which bounds that wait by [`GIVE_WAY_EVERY`].

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How much lower than the process a background thread runs where `SCHED_IDLE` is
/// refused (a `nice` increment).
pub const BACKGROUND_NICE: i32 = 10;

/// Puts the calling thread in Linux's idle scheduling class (`SCHED_IDLE`: it runs when
/// no normal thread wants the core; the policy is per thread), or where that is refused
/// lowers its priority by [`BACKGROUND_NICE`]. Elsewhere the thread keeps the process's
/// priority.
pub(crate) fn lower_this_threads_priority() {
    LAST_GAVE_WAY.set(Some(Instant::now()));
    #[cfg(target_os = "linux")]
    {
        let idle = libc::sched_param { sched_priority: 0 };
        // SAFETY: a system call on the calling thread (pid 0) with a valid parameter.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) } == 0 {
            return;
        }
        tracing::debug!(error = %std::io::Error::last_os_error(), "SCHED_IDLE refused; the background thread is niced");
        // SAFETY: plain system calls on the calling thread's id; no memory is passed.
        let result = unsafe {
            let tid = libc::gettid() as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, current + BACKGROUND_NICE)
        };
        if result != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "background thread keeps its priority");
        }
    }
}

/// How often long work on a background thread gives its core away: the epoch tick at
/// which batch guests do in Wasm.
pub const GIVE_WAY_EVERY: Duration = Duration::from_micros(250);

thread_local! {
    /// When this background thread last gave its core away (`None` on other threads).
    static LAST_GAVE_WAY: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Times this thread gave its core away, for the tests.
    static GAVE_WAY: Cell<u64> = const { Cell::new(0) };
}

/// Called between the pieces of long host-side work: on a background thread, yields the
/// core (`sched_yield`) when [`GIVE_WAY_EVERY`] has passed since it last did, so a woken
/// latency thread takes it; elsewhere does nothing.
pub(crate) fn give_way_if_due() {
    let Some(last) = LAST_GAVE_WAY.get() else { return };
    if last.elapsed() >= GIVE_WAY_EVERY {
        std::thread::yield_now();
        LAST_GAVE_WAY.set(Some(Instant::now()));
        GAVE_WAY.set(GAVE_WAY.get() + 1);
    }
}

/// Runs `compile` on the compile pool: as many background threads as the host has cores,
/// so a deploy's compilation (cranelift compiles a component's functions in parallel,
/// on the pool it is called from) uses idle cores only and never delays an invocation.
/// Where the pool cannot be built, `compile` runs on the calling thread.
pub(crate) fn compile_in_background<T: Send>(compile: impl FnOnce() -> T + Send) -> T {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads(cores)
            .thread_name(|i| format!("sluice-compile-{i}"))
            .start_handler(|_| lower_this_threads_priority())
            .build()
            .inspect_err(|e| tracing::warn!(error = %e, "no background compile pool; compiling at normal priority"))
            .ok()
    });
    match pool {
        Some(pool) => pool.install(compile),
        None => compile(),
    }
}

/// Runs blocking `work` on a background thread and returns its handle: the control
/// plane's work for a tenant (deploys, artifact uploads with their hashing, writing and
/// registry commits, listings) that must never take a core from an invocation. The
/// threads are a tokio blocking pool of their own, made on demand and kept a while,
/// each lowered to the idle class as it starts ([`lower_this_threads_priority`]); a
/// thread cannot raise its priority back, so none of them ever runs latency work.
/// Where that pool cannot be built, `work` runs on tokio's own blocking pool.
pub(crate) fn spawn_blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    static POOL: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        // Only its blocking pool is used: nothing is spawned on, or drives, the runtime.
        tokio::runtime::Builder::new_current_thread()
            .thread_name("sluice-background")
            .on_thread_start(lower_this_threads_priority)
            .build()
            .inspect_err(
                |e| tracing::warn!(error = %e, "no background pool; control-plane work runs at normal priority"),
            )
            .ok()
    });
    match pool {
        Some(pool) => pool.spawn_blocking(work),
        None => tokio::task::spawn_blocking(work),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn compilation_runs_in_the_idle_class() {
        // SAFETY: a read of the calling thread's scheduling policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        assert_eq!(compile_in_background(policy), libc::SCHED_IDLE);
        assert_eq!(policy(), libc::SCHED_OTHER, "the caller keeps its own policy");
    }

    #[tokio::test]
    async fn control_plane_work_runs_in_the_idle_class() {
        // SAFETY: a read of the calling thread's scheduling policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        assert_eq!(spawn_blocking(policy).await.unwrap(), libc::SCHED_IDLE);
        assert_eq!(tokio::task::spawn_blocking(policy).await.unwrap(), libc::SCHED_OTHER, "tokio's own pool keeps it");
    }

    /// Calls [`give_way_if_due`] until four of its periods have passed; how often it gave way.
    fn long_work() -> u64 {
        let (start, before) = (Instant::now(), GAVE_WAY.get());
        while start.elapsed() < 4 * GIVE_WAY_EVERY {
            give_way_if_due();
        }
        GAVE_WAY.get() - before
    }

    #[tokio::test]
    async fn long_work_gives_way_on_background_threads_only() {
        let background = spawn_blocking(long_work).await.unwrap();
        assert!((1..=4).contains(&background), "a background thread gave way {background} times in 4 periods");
        assert_eq!(tokio::task::spawn_blocking(long_work).await.unwrap(), 0, "a normal thread never does");
    }
}
