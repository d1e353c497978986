//! Background threads: work the host does for a tenant that must never take a core from
//! latency work (batch-class guests, compiling components, the control plane's work for
//! a tenant, the whole of a batch tenant's requests), run in Linux's idle scheduling
//! class (`SCHED_IDLE`): the pool that compiles components on such threads, and the
//! background runtime, whose workers serve batch tenants' requests ([`run`]) and whose
//! blocking pool runs the control plane's blocking work ([`spawn_blocking`]).
//!
//! A woken normal thread does not always take its core from an idle-class one at once:
//! on the two-core VM this was measured on, it sometimes waits for the next scheduler
//! tick (4 ms; `platform/guest_threads.rs`). So long host-side work on a background
//! thread (hashing and writing an upload, rendering GGUF metadata for a batch guest)
//! gives its core away between pieces ([`give_way_if_due`]), as batch guests do in Wasm
//! at every epoch tick, which bounds that wait by [`GIVE_WAY_EVERY`]. While latency work
//! claims every core, it stops there instead ([`pause_while`]): yielding alone still
//! left the victim of the hostile soak at 3–5× its solo p99 beside the disk filler,
//! whose requests kept both cores' idle class busy (1.5× with the pause).

use std::cell::Cell;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, RwLock};
use std::task::{Context, Poll};
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
    // The registry's long loops (a tenant's registry work runs on these threads) give
    // way as this thread's own work does.
    sluice_registry::set_pause_point(give_way_if_due);
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

/// What says that latency work claims every core now ([`pause_while`]).
type Claimed = Arc<dyn Fn() -> bool + Send + Sync>;

static PAUSE: RwLock<Option<Claimed>> = RwLock::new(None);

/// Longest one pause of a background thread: what a lock it holds can keep another
/// thread waiting, at worst, before it takes one more piece of work.
pub const MAX_PAUSE: Duration = Duration::from_millis(20);

/// Makes background threads, at their next chance to give way ([`give_way_if_due`]),
/// stop while `claimed` says latency work claims every core: a woken latency thread
/// then finds its core free instead of waiting for the OS to preempt an idle-class
/// thread (`engine/give_way.rs` pauses batch guests the same way). Each pause lasts at
/// most [`MAX_PAUSE`], so work holding a lock never keeps it for long. The engine
/// installs it; the last installed counts (a server has one engine).
pub(crate) fn pause_while(claimed: impl Fn() -> bool + Send + Sync + 'static) {
    *PAUSE.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(claimed));
}

/// Sleeps in steps of [`GIVE_WAY_EVERY`] while `claimed` says so, for at most `max`.
fn pause(claimed: &dyn Fn() -> bool, max: Duration) {
    let start = Instant::now();
    while claimed() && start.elapsed() < max {
        std::thread::sleep(GIVE_WAY_EVERY);
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

/// Called between the pieces of long host-side work: on a background thread, when
/// [`GIVE_WAY_EVERY`] has passed since it last did, pauses while latency work claims
/// every core ([`pause_while`]) and then yields the core (`sched_yield`), so a woken
/// latency thread takes it; elsewhere does nothing.
pub(crate) fn give_way_if_due() {
    let Some(last) = LAST_GAVE_WAY.get() else { return };
    if last.elapsed() >= GIVE_WAY_EVERY {
        let claimed = PAUSE.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(claimed) = claimed {
            pause(&*claimed, MAX_PAUSE);
        }
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

/// The background runtime: a tokio runtime whose threads, its workers and its blocking
/// pool alike, are made in the idle class ([`lower_this_threads_priority`] as each
/// starts), as many workers as the host has cores. A thread cannot raise its priority
/// back, so none of them ever runs latency work. `None` where it cannot be built; the
/// callers then run their work at normal priority.
fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(cores)
                .thread_name("sluice-background")
                .on_thread_start(lower_this_threads_priority)
                .enable_all()
                .build()
                .inspect_err(
                    |e| tracing::warn!(error = %e, "no background runtime; tenants' work runs at normal priority"),
                )
                .ok()
        })
        .as_ref()
}

/// A handle to the background runtime, to run a future on its idle-class workers
/// (`server/connections.rs` moves a batch tenant's connection there); `None` where it
/// cannot be built.
pub(crate) fn handle() -> Option<tokio::runtime::Handle> {
    runtime().map(|r| r.handle().clone())
}

/// Runs blocking `work` on a background thread and returns its handle: the control
/// plane's work for a tenant (deploys, artifact uploads with their hashing, writing and
/// registry commits, listings) that must never take a core from an invocation. The
/// threads are the background runtime's blocking pool, made on demand and kept a while.
/// Where that runtime cannot be built, `work` runs on tokio's own blocking pool.
pub(crate) fn spawn_blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    match runtime() {
        Some(runtime) => runtime.spawn_blocking(work),
        None => tokio::task::spawn_blocking(work),
    }
}

/// Runs `work` to completion on the background runtime's idle-class workers and returns
/// its output: the whole of a batch tenant's request (`server/classes.rs`). What `work`
/// spawns (`tokio::spawn`, `spawn_blocking`) runs there too. Dropping the returned
/// future (its caller went away) aborts `work`, as dropping `work` itself would; a panic
/// in it comes back as the `Err`. Where the runtime cannot be built, `work` runs here.
pub(crate) async fn run<F>(work: F) -> Result<F::Output, tokio::task::JoinError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let Some(runtime) = runtime() else { return Ok(work.await) };
    let mut task = AbortOnDrop(runtime.spawn(GivingWay(Box::pin(work))));
    (&mut task.0).await
}

/// A future on the background runtime that gives its core away, when due, before each
/// of its polls ([`give_way_if_due`]): a worker runs task after task without returning
/// to the kernel, so this is where it can.
struct GivingWay<F>(Pin<Box<F>>);

impl<F: Future> Future for GivingWay<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        give_way_if_due();
        self.0.as_mut().poll(cx)
    }
}

/// Aborts its task when dropped (a no-op once the task has finished).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
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

    #[tokio::test]
    async fn run_works_in_the_idle_class_and_what_it_spawns_too() {
        // SAFETY: a read of the calling thread's scheduling policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let (own, spawned) = run(async move {
            let spawned = tokio::task::spawn_blocking(policy).await.unwrap();
            (policy(), spawned)
        })
        .await
        .unwrap();
        assert_eq!((own, spawned), (libc::SCHED_IDLE, libc::SCHED_IDLE));
        assert_eq!(policy(), libc::SCHED_OTHER, "the caller keeps its own policy");
        assert!(run(async { panic!("a handler panics") }).await.unwrap_err().is_panic());
    }

    #[tokio::test]
    async fn dropping_runs_future_stops_its_work() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

        /// Set when dropped: the work was stopped (or finished).
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
            }
        }
        let stopped = Arc::new(AtomicBool::new(false));
        let flag = Flag(stopped.clone());
        let (started, told) = tokio::sync::oneshot::channel::<()>();
        let waiting = tokio::spawn(run(async move {
            let _flag = flag;
            let _ = started.send(());
            std::future::pending::<()>().await
        }));
        told.await.unwrap();
        assert!(!stopped.load(SeqCst));
        waiting.abort();
        let _ = waiting.await;
        // The abort reaches the background runtime's worker a moment later.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stopped.load(SeqCst) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(stopped.load(SeqCst), "the background work outlived its caller");
    }

    #[test]
    fn a_pause_lasts_while_latency_claims_every_core_and_no_longer_than_its_bound() {
        use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
        let asked = AtomicU32::new(0);
        let claimed_thrice = || asked.fetch_add(1, SeqCst) < 3;
        pause(&claimed_thrice, Duration::from_secs(600));
        assert_eq!(asked.load(SeqCst), 4, "it slept while claimed, then asked once more and went on");
        let asked = AtomicU32::new(0);
        pause(&|| asked.fetch_add(1, SeqCst) < u32::MAX, Duration::from_millis(2));
        assert!(asked.load(SeqCst) >= 1, "claimed for good: it ends at its bound");
    }
}
