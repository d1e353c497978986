//! The host threads that run guests, by class.
//!
//! A guest computes inside Wasm between its host calls, on the host's cores, where the
//! device scheduler cannot order it. So latency-class invocations run on tokio's blocking
//! pool at the process's own OS priority, and batch-class invocations on threads of their
//! own that the OS runs only when nothing else wants the core: Linux's `SCHED_IDLE`,
//! set once when the thread starts. A best-effort tenant that burns the cores in guest
//! code then leaves them to latency work (a waking thread of normal priority preempts an
//! idle-class one, though not always at once: see below); with nothing else runnable it
//! still gets them whole.
//!
//! Measured on two cores (`cargo xtask soak -- --tenants looper`): eight batch guests in
//! endless loops beside a latency tenant's echo. With the batch threads at `nice` +10,
//! the victim's p99 went from 0.23 ms alone to 14 ms (a niced thread that holds a core
//! keeps it for its time slice, and the victim's request crosses several threads that
//! each wait for one); in the idle class, to 4 ms.
//!
//! Those 4 ms were the kernel's, not the platform's: on that machine (a
//! sandbox VM's own Linux 6.18 build, `HZ=250`, booted with a non-upstream
//! `sched_vcpu_pack` parameter) a normal thread woken from another core onto a core that an
//! idle-class thread holds sometimes waits for the next scheduler tick (4 ms) instead of
//! taking the core at once (`perf sched timehist`: the woken HTTP worker or device thread
//! waits 2–4 ms while the idle-class guest keeps running). Two threads handing a token
//! back and forth, no sluice code, show it too: p99.9 86 µs alone, 3.8 ms beside one
//! busy idle-class thread per core (`sluice_tests::wakeup`, printed by `cargo xtask
//! soak`). Tried with the looping tenant, none better than the idle class's 3.6–4 ms:
//! `nice` +19 or `SCHED_BATCH` instead (p99 12–20 ms: a niced thread keeps its slice),
//! pinning each guest thread to one core (5–8 ms), at most one batch guest running at a
//! time (3.6 ms), yielding after each hand-off to a normal thread (3.7 ms), 100 µs time
//! slices (`sched_setattr`) for the platform's own threads (16–20 ms) or for guest threads
//! at `nice` +10 or +19 (16–19 ms).
//!
//! So batch guests now also give way themselves: at every epoch tick, every 250 µs while
//! one runs, a batch guest computing in Wasm yields its core (`engine/epoch.rs`), which
//! bounds a woken server thread's wait by the tick instead of the kernel's 4 ms: the same
//! looping tenant then left the victim's p99 at 0.4–0.7 ms.
//!
//! The background threads are made on demand (one per concurrent batch invocation at most,
//! which admission bounds) and kept for reuse: a thread cannot raise its priority back
//! without privileges, so it never runs latency work.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender, unbounded};

use crate::scheduler::PriorityClass;

/// A guest's work; what it returns hands the result to the caller.
type Job = Box<dyn FnOnce() -> Deliver + Send>;
type Deliver = Box<dyn FnOnce() + Send>;

/// Runs guests on threads whose OS priority follows the invocation's class.
#[derive(Debug)]
pub struct GuestThreads {
    background: Background,
}

#[derive(Debug)]
struct Background {
    jobs: Sender<Job>,
    queue: Receiver<Job>,
    /// Threads waiting for a job.
    idle: Arc<AtomicUsize>,
    spawned: AtomicUsize,
}

/// A guest thread ended without a result (the job panicked).
#[derive(Debug, thiserror::Error)]
#[error("the guest thread ended without a result: {0}")]
pub struct GuestThreadLost(String);

impl Default for GuestThreads {
    fn default() -> Self {
        let (jobs, queue) = unbounded();
        GuestThreads {
            background: Background { jobs, queue, idle: Arc::new(AtomicUsize::new(0)), spawned: AtomicUsize::new(0) },
        }
    }
}

impl GuestThreads {
    /// Runs `f` on a thread for `class` and returns its result.
    pub async fn run<T: Send + 'static>(
        &self,
        class: PriorityClass,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, GuestThreadLost> {
        match class {
            PriorityClass::Latency => tokio::task::spawn_blocking(f).await.map_err(|e| GuestThreadLost(e.to_string())),
            PriorityClass::Batch => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.background.submit(Box::new(move || {
                    let result = f();
                    Box::new(move || {
                        let _ = tx.send(result);
                    })
                }));
                rx.await.map_err(|_| GuestThreadLost("it panicked".into()))
            }
        }
    }

    /// Background threads made so far.
    #[cfg(test)]
    fn background_threads(&self) -> usize {
        self.background.spawned.load(Ordering::Relaxed)
    }
}

impl Background {
    fn submit(&self, job: Job) {
        // A thread is made when none is idle; a job that races another for the last idle
        // thread waits for the next one to finish, which bounds the threads by the peak.
        if self.idle.load(Ordering::Acquire) == 0 {
            self.spawn();
        }
        // The receiver lives in `self`, so the channel is open.
        let _ = self.jobs.send(job);
    }

    fn spawn(&self) {
        let n = self.spawned.fetch_add(1, Ordering::Relaxed);
        let (queue, idle) = (self.queue.clone(), self.idle.clone());
        let spawned = std::thread::Builder::new().name(format!("sluice-guest-bg-{n}")).spawn(move || {
            crate::background::lower_this_threads_priority();
            idle.fetch_add(1, Ordering::Release);
            while let Ok(job) = queue.recv() {
                idle.fetch_sub(1, Ordering::Release);
                // A panic ends this job alone (its caller sees the lost result).
                let deliver = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                // Idle again before the caller sees the result, so that its next job
                // finds this thread instead of making another.
                idle.fetch_add(1, Ordering::Release);
                if let Ok(deliver) = deliver {
                    deliver();
                }
            }
        });
        if let Err(e) = spawned {
            self.spawned.fetch_sub(1, Ordering::Relaxed);
            tracing::error!(error = %e, "could not start a background guest thread");
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn this_threads_policy() -> i32 {
        // SAFETY: a read of the calling thread's scheduling policy.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batch_guests_run_in_the_idle_class_and_latency_guests_at_the_process_priority() {
        let threads = GuestThreads::default();
        let base = threads.run(PriorityClass::Latency, this_threads_policy).await.unwrap();
        assert_eq!(base, libc::SCHED_OTHER, "latency guests keep the process's policy");
        let batch = threads.run(PriorityClass::Batch, this_threads_policy).await.unwrap();
        assert_eq!(batch, libc::SCHED_IDLE, "batch guests run in the idle class");
        assert_eq!(threads.run(PriorityClass::Batch, this_threads_policy).await.unwrap(), batch);
        assert_eq!(threads.background_threads(), 1, "one thread served both jobs in turn");
        // A panicking job loses its own result only.
        assert!(threads.run(PriorityClass::Batch, || panic!("a guest thread panics")).await.is_err());
        assert_eq!(threads.run(PriorityClass::Batch, this_threads_policy).await.unwrap(), batch);
        assert_eq!(threads.run(PriorityClass::Latency, this_threads_policy).await.unwrap(), base);
    }
}
