//! Continuous batching, the engine's half: the queue a serving invocation takes
//! requests from (the WIT `requests` interface) and the `request` resources it answers.
//!
//! The platform pushes each request of a serving function into its [`ServingQueue`]
//! (one per version and priority class) and starts a serving invocation when none is
//! running ([`ServingQueue::push`] says when). The guest's `next` takes waiting requests
//! ([`ServingQueue::take`]); each becomes a [`ServedRequest`] in the invocation's
//! resource table, with its own caller link (its chunks go to its own stream, its
//! caller's going is its own) and its own deadline. `finish` answers it through a
//! oneshot channel; a request the guest drops unanswered (or that is in the table
//! when a trapped invocation's store is dropped) is answered with
//! [`ServedError::Dropped`], so no caller waits for an answer that cannot come.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot};

use super::bindings::{IoTensor, RunError};
use super::caller::{CallerLink, CallerState, ChunkTimes};

/// A request waiting for a serving invocation.
pub struct Pending {
    pub inputs: Vec<IoTensor>,
    /// Its caller: where its chunks go and whether it has gone.
    pub link: CallerLink,
    /// Past this it is `gone` to the guest (the platform answers 504 itself).
    pub deadline: Instant,
    pub reply: oneshot::Sender<Served>,
}

/// A served request's answer.
pub type Served = Result<ServedOutput, ServedError>;

/// What a served request returned.
#[derive(Debug)]
pub struct ServedOutput {
    pub outputs: Vec<IoTensor>,
    /// When its chunks were emitted.
    pub chunks: ChunkTimes,
    /// When a serving invocation took it.
    pub taken: Instant,
    /// Most requests its serving invocation held at once while it held this one (as
    /// seen when it was taken and when it was answered): the requests it shared steps with.
    pub peers: u32,
}

/// Why a served request has no outputs.
#[derive(Debug)]
pub enum ServedError {
    /// The function answered with an error.
    Run(RunError),
    /// The serving invocation dropped it unanswered (it returned, failed or trapped).
    Dropped,
}

#[derive(Default)]
struct QueueState {
    waiting: VecDeque<Pending>,
    /// Whether a serving invocation runs (or is starting) for this queue.
    running: bool,
    /// The platform is shutting down: [`ServingQueue::take`] hands out what waits but
    /// no longer waits for more, so an idle serving invocation returns at once.
    closed: bool,
}

/// The requests of one serving function version and class, waiting for its serving
/// invocation.
#[derive(Default)]
pub struct ServingQueue {
    state: Mutex<QueueState>,
    arrived: Notify,
    /// Requests taken by serving invocations so far.
    taken: AtomicU64,
}

impl ServingQueue {
    /// Queues `pending`; true when no serving invocation runs, so the caller must start
    /// one (it is then counted as running).
    pub fn push(&self, pending: Pending) -> bool {
        let start = {
            let mut s = self.state.lock().expect("serving queue lock");
            s.waiting.push_back(pending);
            !std::mem::replace(&mut s.running, true)
        };
        self.arrived.notify_one();
        start
    }

    /// A serving invocation ended: true when requests still wait, so the caller must
    /// start another (it stays counted as running); else none runs now.
    pub fn ended(&self) -> bool {
        let mut s = self.state.lock().expect("serving queue lock");
        s.waiting.retain(|p| !p.reply.is_closed());
        s.running = !s.waiting.is_empty();
        s.running
    }

    /// Whether a serving invocation runs (or is starting) for it.
    pub fn is_running(&self) -> bool {
        self.state.lock().expect("serving queue lock").running
    }

    /// Requests taken by serving invocations so far.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// Closes the queue for the shutdown: waiting requests are still handed out, but
    /// `take` no longer waits, and a waiting one returns now.
    pub fn close(&self) {
        self.state.lock().expect("serving queue lock").closed = true;
        self.arrived.notify_waiters();
    }

    /// Every waiting request, taken (to fail them when no invocation can start).
    pub fn take_all(&self) -> Vec<Pending> {
        self.state.lock().expect("serving queue lock").waiting.drain(..).collect()
    }

    /// Up to `max` waiting requests whose callers are still there, waiting up to `wait`
    /// for one when none waits.
    pub(super) async fn take(&self, max: usize, wait: Duration) -> Vec<Pending> {
        let end = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the queue is looked at, so a push in between wakes it.
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (taken, closed) = {
                let mut s = self.state.lock().expect("serving queue lock");
                let now = Instant::now();
                s.waiting.retain(|p| !p.reply.is_closed() && !p.link.gone() && p.deadline > now);
                let n = max.min(s.waiting.len());
                (s.waiting.drain(..n).collect::<Vec<_>>(), s.closed)
            };
            self.taken.fetch_add(taken.len() as u64, Ordering::Relaxed);
            if !taken.is_empty() || max == 0 || wait.is_zero() || closed {
                return taken;
            }
            if tokio::time::timeout_at(end, notified).await.is_err() {
                return Vec::new();
            }
        }
    }
}

/// The custom section by which a component declares itself a serving function
/// (`sluice_guest::serving_function!`).
pub const SERVING_SECTION: &str = "sluice:serving";

/// Whether `wasm` declares itself a serving function (a [`SERVING_SECTION`] in it or in
/// one of its modules).
pub fn declares_serving(wasm: &[u8]) -> bool {
    wasmparser::Parser::new(0)
        .parse_all(wasm)
        .any(|payload| matches!(payload, Ok(wasmparser::Payload::CustomSection(s)) if s.name() == SERVING_SECTION))
}

/// A serving invocation's link to its queue.
#[derive(Clone)]
pub struct ServingLink {
    pub queue: Arc<ServingQueue>,
    /// After this, `next` hands out nothing more: the invocation finishes what it holds
    /// and returns, and the platform starts a fresh one for what waits (so one
    /// invocation never outlives its time limit).
    pub accept_until: Instant,
    /// The most requests it may hold at once (the function's `max_batch_size`).
    pub max_open: usize,
}

/// A request a serving invocation holds (behind a WIT `request`, see `serving_host`).
pub struct ServedRequest {
    pub(super) inputs: Vec<IoTensor>,
    pub(super) caller: CallerState,
    pub(super) deadline: Instant,
    pub(super) taken: Instant,
    /// Most requests open in its invocation at once, so far.
    pub(super) peers: usize,
    pub(super) reply: Option<oneshot::Sender<Served>>,
}

impl ServedRequest {
    pub(super) fn new(p: Pending) -> Self {
        ServedRequest {
            inputs: p.inputs,
            caller: CallerState::new(p.link),
            deadline: p.deadline,
            taken: Instant::now(),
            peers: 1,
            reply: Some(p.reply),
        }
    }

    /// Whether its caller has gone or its deadline passed.
    pub(super) fn gone(&self) -> bool {
        self.caller.link.gone() || Instant::now() >= self.deadline
    }

    /// Answers it (once); `open` requests are open in its invocation now.
    pub(super) fn finish(&mut self, outputs: Result<Vec<IoTensor>, RunError>, open: usize) {
        if let Some(reply) = self.reply.take() {
            let peers = u32::try_from(self.peers.max(open)).unwrap_or(u32::MAX);
            let answer = outputs
                .map(|outputs| ServedOutput { outputs, chunks: self.caller.chunks, taken: self.taken, peers })
                .map_err(ServedError::Run);
            let _ = reply.send(answer);
        }
    }
}

impl Drop for ServedRequest {
    fn drop(&mut self) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Err(ServedError::Dropped));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(deadline: Duration) -> (Pending, oneshot::Receiver<Served>) {
        let (reply, rx) = oneshot::channel();
        (Pending { inputs: vec![], link: CallerLink::default(), deadline: Instant::now() + deadline, reply }, rx)
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_push_starts_an_invocation_and_an_end_with_work_waiting_starts_another() {
        let q = ServingQueue::default();
        let (a, _ra) = pending(Duration::from_secs(60));
        let (b, _rb) = pending(Duration::from_secs(60));
        assert!(q.push(a), "nothing runs: start one");
        assert!(!q.push(b), "one runs already");
        assert_eq!(q.take(1, Duration::ZERO).await.len(), 1);
        assert!(q.ended(), "b still waits: start another");
        assert_eq!(q.take(8, Duration::ZERO).await.len(), 1);
        assert!(!q.ended(), "nothing waits");
        let (c, _rc) = pending(Duration::from_secs(60));
        assert!(q.push(c), "nothing runs again");
    }

    #[tokio::test(start_paused = true)]
    async fn take_waits_for_an_arrival_or_its_time_and_skips_the_gone() {
        let q = Arc::new(ServingQueue::default());
        let started = tokio::time::Instant::now();
        assert!(q.take(4, Duration::from_millis(50)).await.is_empty());
        assert_eq!(started.elapsed(), Duration::from_millis(50), "waited its time");

        let (left, rx) = pending(Duration::from_secs(60));
        q.push(left);
        drop(rx);
        let (late, _r) = pending(Duration::ZERO);
        q.push(late);
        let (ok, _r2) = pending(Duration::from_secs(60));
        let pusher = {
            let q = q.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                q.push(ok);
            })
        };
        let started = tokio::time::Instant::now();
        let got = q.take(4, Duration::from_secs(1)).await;
        assert_eq!(got.len(), 1, "the gone and the late were skipped");
        assert_eq!(started.elapsed(), Duration::from_millis(10), "woken by the arrival");
        pusher.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_closed_queue_hands_out_what_waits_and_wakes_an_idle_take_at_once() {
        let q = Arc::new(ServingQueue::default());
        let idle = {
            let q = q.clone();
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                (q.take(4, Duration::from_secs(3600)).await.len(), started.elapsed())
            })
        };
        tokio::task::yield_now().await;
        q.close();
        // Simulated time: had the close not woken it, the idle take would have waited
        // out its hour (the paused clock jumps there when nothing else can run).
        assert_eq!(idle.await.unwrap(), (0, Duration::ZERO), "woken by the close, not by its time");

        let (waiting, _r) = pending(Duration::from_secs(60));
        q.push(waiting);
        let started = tokio::time::Instant::now();
        assert_eq!(q.take(4, Duration::from_secs(3600)).await.len(), 1, "what waits is still served");
        assert!(q.take(4, Duration::from_secs(3600)).await.is_empty());
        assert_eq!(started.elapsed(), Duration::ZERO, "and nothing waits for more");
    }

    #[test]
    fn a_request_dropped_unanswered_is_answered_dropped() {
        let (p, mut rx) = pending(Duration::from_secs(60));
        drop(ServedRequest::new(p));
        assert!(matches!(rx.try_recv(), Ok(Err(ServedError::Dropped))));
        let (p, mut rx) = pending(Duration::from_secs(60));
        let mut r = ServedRequest::new(p);
        r.finish(Ok(vec![]), 1);
        r.finish(Err(RunError::Failed("late".into())), 1);
        drop(r);
        assert!(matches!(rx.try_recv(), Ok(Ok(_))), "the first answer stands");
    }
}
