//! The host threads that run guests, by class.
//!
//! A guest computes inside Wasm between its host calls, on the host's cores, where the
//! device scheduler cannot order it. So latency-class invocations run on tokio's blocking
//! pool at the process's own OS priority, and batch-class invocations on threads of their
//! own whose priority is lowered once, when the thread starts (Linux `nice` +10, about a
//! tenth of a normal thread's CPU share when both want a core). A best-effort tenant that
//! burns the cores in guest code then leaves them to latency work; with nothing else
//! runnable it still gets them whole.
//!
//! The background threads are made on demand (one per concurrent batch invocation at most,
//! which admission bounds) and kept for reuse: a thread cannot raise its priority back
//! without privileges, so it never runs latency work.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender, unbounded};

use crate::scheduler::PriorityClass;

/// How much lower than the process a background thread runs (a `nice` increment).
pub const BACKGROUND_NICE: i32 = 10;

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
            lower_this_threads_priority();
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

/// Lowers the calling thread's OS priority by [`BACKGROUND_NICE`] (Linux: `nice` is per
/// thread). Elsewhere, or if refused, the thread keeps the process's priority.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's id; no memory is passed.
        let result = unsafe {
            let tid = libc::gettid() as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, current + BACKGROUND_NICE)
        };
        if result != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "background guest thread keeps its priority");
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn this_threads_nice() -> i32 {
        // SAFETY: a read of the calling thread's priority.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batch_guests_run_below_the_process_priority_and_latency_guests_at_it() {
        let threads = GuestThreads::default();
        let base = threads.run(PriorityClass::Latency, this_threads_nice).await.unwrap();
        let batch = threads.run(PriorityClass::Batch, this_threads_nice).await.unwrap();
        assert_eq!(batch, (base + BACKGROUND_NICE).min(19), "batch guests run niced");
        assert_eq!(threads.run(PriorityClass::Batch, this_threads_nice).await.unwrap(), batch);
        assert_eq!(threads.background_threads(), 1, "one thread served both jobs in turn");
        // A panicking job loses its own result only.
        assert!(threads.run(PriorityClass::Batch, || panic!("a guest thread panics")).await.is_err());
        assert_eq!(threads.run(PriorityClass::Batch, this_threads_nice).await.unwrap(), batch);
    }
}
