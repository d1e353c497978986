//! Background threads: work the host does for a tenant that must never take a core from
//! latency work (batch-class guests, compiling components), run in Linux's idle
//! scheduling class (`SCHED_IDLE`), and the pool that compiles components on such threads.

use std::sync::OnceLock;

/// How much lower than the process a background thread runs where `SCHED_IDLE` is
/// refused (a `nice` increment).
pub const BACKGROUND_NICE: i32 = 10;

/// Puts the calling thread in Linux's idle scheduling class (`SCHED_IDLE`: it runs when
/// no normal thread wants the core; the policy is per thread), or where that is refused
/// lowers its priority by [`BACKGROUND_NICE`]. Elsewhere the thread keeps the process's
/// priority.
pub(crate) fn lower_this_threads_priority() {
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
}
