//! A team of kernel threads that stay awake between kernels.
//!
//! A decode step of a small LLM is hundreds of short kernels, most of them a quantized
//! linear split over the cores. On rayon, an idle worker sleeps after a few dozen yields;
//! waking it costs the launching thread a futex call and the kernel tens of
//! microseconds, so for a kernel of ~30 µs the woken worker arrives late and takes little
//! of the work (SmolLM2 decode on 2 threads: the second thread did 29 % of the dot
//! products, and waking it took 5 % of the launching thread's time). A [`Team`]'s helpers
//! instead spin for [`SPIN`] after their last task before they sleep, and every thread,
//! the caller included, takes the next task from one shared counter, so a job that
//! follows within that window starts on every thread at once, as ggml's thread pool does.
//!
//! A kernel reaches its team through [`Team::enter`] (a thread-local, as rayon's
//! `install`) and [`for_each_task`]; without one it runs on rayon as before.
//!
//! The protocol: one atomic ticket holds the current job's task count and the next
//! unclaimed task. A thread claims a task by a compare-and-swap on the whole ticket, and
//! only a thread holding a claimed task reads the job's closure; the caller publishes the
//! closure before the ticket (release) and returns only once every task has finished,
//! so the closure, borrowed from the caller's stack, outlives every use of it.

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a helper spins after its last task before it sleeps: longer than the gaps
/// between a decode step's kernels (the small kernels run on the caller alone), short
/// enough that an idle device costs no core.
pub const SPIN: Duration = Duration::from_micros(500);

/// Spin iterations between two looks at the clock.
const SPINS_PER_CHECK: u32 = 64;

/// A job's closure, its lifetime erased (see the module header for why it is sound).
type Job = *const (dyn Fn(usize) + Sync + 'static);

/// The job before the first one.
const NO_JOB: &(dyn Fn(usize) + Sync) = &|_| {};

/// The ticket: the job's task count in the high half, its next unclaimed task in the low.
fn ticket(tasks: usize, next: usize) -> u64 {
    ((tasks as u64) << 32) | next as u64
}

struct Shared {
    ticket: AtomicU64,
    /// Written by the caller while no task is claimable; read by a thread holding a
    /// claimed task.
    job: UnsafeCell<Job>,
    finished: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// One job at a time; a second caller runs its tasks itself.
    caller: Mutex<()>,
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
}

// SAFETY: `job` is the only field without its own synchronisation; it is written by the
// caller holding `caller` while no task can be claimed, and read only after a claim,
// which acquires the ticket the caller released after writing it.
unsafe impl Sync for Shared {}
// SAFETY: as above; the pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

impl Shared {
    /// Whether a task can be claimed now.
    fn claimable(&self, order: Ordering) -> bool {
        let t = self.ticket.load(order);
        (t & 0xffff_ffff) < t >> 32
    }

    /// Claims the next task of the current job, if any is left.
    fn claim(&self) -> Option<usize> {
        let mut t = self.ticket.load(Ordering::Acquire);
        loop {
            let (tasks, next) = ((t >> 32) as usize, (t & 0xffff_ffff) as usize);
            if next >= tasks {
                return None;
            }
            match self.ticket.compare_exchange_weak(t, t + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(next),
                Err(now) => t = now,
            }
        }
    }

    /// Runs claimed task `i`; a panic is kept for the caller.
    fn run(&self, i: usize) {
        // SAFETY: a claimed task's job is the one published before the ticket it was
        // claimed from, and its caller waits for this task before returning.
        let job = unsafe { &**self.job.get() };
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| job(i))) {
            self.panic.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(payload);
        }
        self.finished.fetch_add(1, Ordering::Release);
    }

    fn helper(&self) {
        loop {
            while let Some(i) = self.claim() {
                self.run(i);
            }
            if !self.spin() {
                self.park();
            }
            if self.stop.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// Spins until a task is claimable (true) or [`SPIN`] has passed (false).
    fn spin(&self) -> bool {
        let until = Instant::now() + SPIN;
        loop {
            for _ in 0..SPINS_PER_CHECK {
                if self.claimable(Ordering::Relaxed) || self.stop.load(Ordering::Relaxed) {
                    return true;
                }
                std::hint::spin_loop();
            }
            if Instant::now() >= until {
                return false;
            }
        }
    }

    fn park(&self) {
        let mut guard = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // SeqCst on both sides: either this sees the caller's ticket, or the caller sees
        // this sleeper and notifies (after `wait` released the lock).
        while !self.claimable(Ordering::SeqCst) && !self.stop.load(Ordering::SeqCst) {
            guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    fn wake_sleepers(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
    }
}

/// Kernel threads for one device: the calling thread and `threads - 1` helpers.
pub struct Team {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
}

impl Team {
    /// A team of `threads` (at least one: the caller), its helpers named `{name}-{i}`.
    pub fn new(threads: usize, name: &str) -> std::io::Result<Team> {
        let shared = Arc::new(Shared {
            ticket: AtomicU64::new(0),
            job: UnsafeCell::new(NO_JOB as Job),
            finished: AtomicUsize::new(0),
            panic: Mutex::new(None),
            caller: Mutex::new(()),
            sleepers: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let helpers = (1..threads.max(1))
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new().name(format!("{name}-{i}")).spawn(move || shared.helper())
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Team { shared, helpers })
    }

    /// Threads that run a job's tasks (the caller and the helpers).
    pub fn threads(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Runs `f` with this team as the current thread's (the team kernels of `f` run on it).
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<*const Team>);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.replace(Some(self as *const Team))));
        f()
    }

    /// Runs `f(0)` … `f(tasks - 1)` on the team's threads and returns when all have
    /// finished; a panic in a task is resumed here once every task has finished.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        assert!(tasks < 1 << 32, "a team job has fewer than 2^32 tasks");
        if tasks <= 1 || self.helpers.is_empty() {
            (0..tasks).for_each(f);
            return;
        }
        let caller = match self.shared.caller.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                (0..tasks).for_each(f);
                return;
            }
        };
        let shared = &*self.shared;
        // SAFETY: only the lifetime is erased. No task is claimable (the last job's were
        // all claimed and have finished), so no thread reads `job` now; after this call
        // returns none reads it until the next job replaces it.
        unsafe { *shared.job.get() = std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(f) };
        shared.finished.store(0, Ordering::Relaxed);
        shared.ticket.store(ticket(tasks, 0), Ordering::SeqCst);
        shared.wake_sleepers();
        while let Some(i) = shared.claim() {
            shared.run(i);
        }
        let mut spins = 0u32;
        while shared.finished.load(Ordering::Acquire) < tasks {
            spins += 1;
            if spins.is_multiple_of(1024) {
                // A helper was descheduled mid-task: let it run.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let payload = shared.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(caller);
        if let Some(payload) = payload {
            panic::resume_unwind(payload);
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for helper in self.helpers.drain(..) {
            let _ = helper.join();
        }
    }
}

thread_local! {
    static CURRENT: Cell<Option<*const Team>> = const { Cell::new(None) };
}

/// `f` of the current thread's team ([`Team::enter`]), if it has one.
fn with_current<R>(f: impl FnOnce(Option<&Team>) -> R) -> R {
    // SAFETY: a current team outlives its `enter` call, which set it and which is still
    // running on this thread.
    f(CURRENT.with(|c| c.get()).map(|team| unsafe { &*team }))
}

/// Threads a job of the current thread would run on: its team's, else rayon's.
pub(crate) fn threads() -> usize {
    with_current(|team| team.map_or_else(rayon::current_num_threads, Team::threads))
}

/// Runs `f(0)` … `f(tasks - 1)` in parallel: on the current thread's team if it has one
/// ([`Team::enter`]), else on rayon.
pub(crate) fn for_each_task(tasks: usize, f: impl Fn(usize) + Sync) {
    with_current(|team| match team {
        Some(team) => team.run(tasks, &f),
        None => {
            use rayon::prelude::*;
            (0..tasks).into_par_iter().for_each(&f);
        }
    })
}

/// Runs `f(i, chunk)` for every `chunk`-element chunk of `data` (the last may be
/// shorter) in parallel, as [`for_each_task`].
pub(crate) fn for_each_chunk_mut<T: Send>(data: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    /// The slice's start, shared by the tasks (each makes its own disjoint chunk).
    struct Start<T>(*mut T);
    // SAFETY: the tasks make disjoint chunks from it, and `T: Send`.
    unsafe impl<T: Send> Sync for Start<T> {}
    let (len, chunk) = (data.len(), chunk.max(1));
    let start = &Start(data.as_mut_ptr());
    for_each_task(len.div_ceil(chunk), |i| {
        let at = i * chunk;
        let Start(base) = start;
        // SAFETY: task `i` runs once and makes chunk `i` alone, inside `data`, which is
        // borrowed mutably until every task has finished.
        let part = unsafe { std::slice::from_raw_parts_mut(base.add(at), chunk.min(len - at)) };
        f(i, part)
    });
}

/// `f(0)` … `f(tasks - 1)` computed in parallel, as [`for_each_task`], in order.
pub(crate) fn map_tasks<T: Send + Sync>(tasks: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let slots: Vec<std::sync::OnceLock<T>> = (0..tasks).map(|_| std::sync::OnceLock::new()).collect();
    for_each_task(tasks, |i| {
        let _ = slots[i].set(f(i));
    });
    slots.into_iter().map(|slot| slot.into_inner().expect("every task ran")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_exactly_once_across_many_jobs() {
        let team = Team::new(3, "test-team").unwrap();
        for tasks in [0usize, 1, 2, 7, 64, 1000] {
            for _ in 0..50 {
                let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                team.run(tasks, &|i| {
                    counts[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1), "{tasks} tasks");
            }
        }
    }

    #[test]
    fn helpers_take_tasks_and_a_sleeping_team_wakes_for_the_next_job() {
        let team = Team::new(2, "test-team").unwrap();
        let caller = std::thread::current().id();
        for round in 0..3 {
            if round > 0 {
                // Past the spin window: the helper is asleep and must be woken.
                std::thread::sleep(SPIN * 4);
            }
            let others = AtomicUsize::new(0);
            // Each task waits (bounded) until some task ran on another thread, so the
            // job finishes with the helper's help or after the bound.
            let deadline = Instant::now() + Duration::from_secs(30);
            team.run(2, &|_| {
                if std::thread::current().id() != caller {
                    others.fetch_add(1, Ordering::SeqCst);
                }
                while others.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
                    std::hint::spin_loop();
                }
            });
            assert!(others.load(Ordering::SeqCst) >= 1, "round {round}: the helper ran a task");
        }
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_after_the_rest_finished_and_the_team_goes_on() {
        let team = Team::new(2, "test-team").unwrap();
        let done = AtomicUsize::new(0);
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            team.run(16, &|i| {
                if i == 3 {
                    panic!("task 3 failed");
                }
                done.fetch_add(1, Ordering::SeqCst);
            })
        }));
        let message = result.unwrap_err().downcast::<&str>().map(|m| *m).unwrap_or_default();
        assert_eq!((message, done.load(Ordering::SeqCst)), ("task 3 failed", 15));
        let after = AtomicUsize::new(0);
        team.run(8, &|_| {
            after.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(after.load(Ordering::SeqCst), 8);
    }

    #[test]
    fn chunks_and_maps_cover_every_element_once_in_order() {
        let team = Team::new(3, "test-team").unwrap();
        let mut data = vec![0usize; 1003];
        team.enter(|| for_each_chunk_mut(&mut data, 10, |i, part| part.iter_mut().for_each(|v| *v += i + 1)));
        assert!(data.iter().enumerate().all(|(at, &v)| v == at / 10 + 1));
        assert_eq!(team.enter(|| map_tasks(100, |i| i * i)), (0..100).map(|i| i * i).collect::<Vec<_>>());
    }

    #[test]
    fn for_each_task_uses_the_entered_team_and_rayon_otherwise() {
        let team = Team::new(2, "test-team").unwrap();
        assert_eq!(team.enter(threads), 2);
        let caller = std::thread::current().id();
        // Each task waits (bounded) until a task ran on another thread; returns the
        // names of the other threads that ran one.
        let run = || {
            let names = Mutex::new(Vec::new());
            let deadline = Instant::now() + Duration::from_secs(30);
            for_each_task(2, |_| {
                let me = std::thread::current();
                if me.id() != caller {
                    names.lock().unwrap().push(me.name().unwrap_or_default().to_owned());
                }
                while names.lock().unwrap().is_empty() && Instant::now() < deadline {
                    std::hint::spin_loop();
                }
            });
            names.into_inner().unwrap()
        };
        let helped = team.enter(run);
        assert!(!helped.is_empty() && helped.iter().all(|n| n == "test-team-1"), "{helped:?}");
        assert!(!run().contains(&"test-team-1".to_owned()), "outside `enter` the tasks ran on rayon");
    }
}
