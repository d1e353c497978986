//! Dynamic batching: requests of one function version wait, for at most the version's
//! queue delay, to share one invocation.
//!
//! A batch forms per [`BatchKey`]: the loaded version, the priority class and the
//! inputs' [`BatchShape`]. So a latency request never waits behind batch-class work, a
//! batch never mixes tenants (a version belongs to one tenant) and only requests whose
//! inputs can be joined share one. The first request of a key opens a batch and starts
//! its timer; the batch runs when the timer fires (`max_queue_delay_us` after the
//! first request) or at once when the next request would take it past
//! `max_batch_size` rows. No request waits longer than the delay for its batch to start.
//!
//! Every request keeps its own admission permits, time limit and cancellation while it
//! waits: a request whose caller goes away before its batch starts is left out; one that
//! goes while the batch runs only loses its answer, and the batch is stopped only when
//! every one of its callers has gone. Each request gets its own rows of every output
//! ([`super::batch_tensors::split`]), the invocation's timings, and its share of the
//! kernels launched and the guest's CPU time.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_registry::Batching;
use tokio::sync::oneshot;

use super::Result;
use super::batch_tensors::{BatchShape, concat, split};
use crate::engine::{Cancel, InvocationOutput, InvokeError, IoTensor};
use crate::scheduler::PriorityClass;

/// What a batch shares: its version (the loaded version's address, stable while any
/// batch of it forms, since a forming batch's runner holds the version), its class and
/// its inputs' shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BatchKey {
    pub version: usize,
    pub class: PriorityClass,
    pub shape: BatchShape,
}

/// Runs one batched invocation on the joined inputs; raising the [`Cancel`] stops it.
pub(crate) type BatchRunner = Box<dyn FnOnce(Vec<IoTensor>, Cancel) -> RunFuture + Send>;

/// What a [`BatchRunner`] returns: when the invocation started and its outputs.
pub(crate) type RunFuture = Pin<Box<dyn Future<Output = Result<(Instant, InvocationOutput)>> + Send>>;

/// A request's share of a finished batch.
#[derive(Debug)]
pub(crate) struct Batched {
    /// Its rows of the outputs, and the invocation's timings.
    pub output: InvocationOutput,
    /// When the batch's invocation started.
    pub started: Instant,
    /// Requests that shared the invocation.
    pub requests: u32,
}

/// What counts a waiting request (the platform's queued and in-flight gauges): told
/// when its batch starts, dropped with its answer.
pub(crate) trait Progress: Send {
    /// The request's batch has started.
    fn started(self: Box<Self>) -> Box<dyn Progress>;
}

/// A request as it joins a batch.
pub(crate) struct Waiting {
    pub inputs: Vec<IoTensor>,
    /// Its first dimension (every input's).
    pub rows: u64,
    /// Counts the request as queued, then as running once its batch starts.
    pub gauge: Option<Box<dyn Progress>>,
}

/// One request waiting in a batch.
struct Member {
    inputs: Vec<IoTensor>,
    rows: u64,
    reply: oneshot::Sender<Result<Batched>>,
    gauge: Option<Box<dyn Progress>>,
}

/// A batch that is still taking requests.
struct Forming {
    id: u64,
    /// The function's name, for errors.
    function: String,
    rows: u64,
    members: Vec<Member>,
    run: BatchRunner,
}

/// The batches forming now, across every batched function of the server.
#[derive(Default)]
pub(crate) struct Batcher {
    forming: Mutex<HashMap<BatchKey, Forming>>,
    next_id: AtomicU64,
}

impl Batcher {
    /// Adds a request to its key's batch (opening one, with `runner` and a timer, when
    /// none is forming) and returns where its share will come.
    pub(crate) fn submit(
        self: &Arc<Self>,
        key: BatchKey,
        function: &str,
        policy: Batching,
        request: Waiting,
        runner: impl FnOnce() -> BatchRunner,
    ) -> oneshot::Receiver<Result<Batched>> {
        let (reply, receiver) = oneshot::channel();
        let Waiting { inputs, rows, gauge } = request;
        let member = Member { inputs, rows, reply, gauge };
        let max = u64::from(policy.max_batch_size);
        let mut forming = self.forming.lock().expect("batcher lock");
        // A request that would take the forming batch past its size sends it on its way.
        if let Some(f) = forming.get(&key)
            && f.rows + rows > max
        {
            let full = forming.remove(&key).expect("present");
            tokio::spawn(run_batch(full));
        }
        match forming.entry(key) {
            Entry::Occupied(mut e) => {
                let f = e.get_mut();
                f.rows += rows;
                f.members.push(member);
                if f.rows >= max {
                    tokio::spawn(run_batch(e.remove()));
                }
            }
            Entry::Vacant(e) => {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let f = Forming { id, function: function.to_owned(), rows, members: vec![member], run: runner() };
                if rows >= max {
                    tokio::spawn(run_batch(f));
                } else {
                    let key = e.key().clone();
                    e.insert(f);
                    let delay = Duration::from_micros(policy.max_queue_delay_us);
                    // The timer finds the batch by key and id: one that filled up and
                    // left early is not there any more.
                    tokio::spawn(self.clone().timer(key, id, delay));
                }
            }
        }
        receiver
    }

    async fn timer(self: Arc<Self>, key: BatchKey, id: u64, delay: Duration) {
        tokio::time::sleep(delay).await;
        let due = {
            let mut forming = self.forming.lock().expect("batcher lock");
            match forming.get(&key) {
                Some(f) if f.id == id => forming.remove(&key),
                _ => None,
            }
        };
        if let Some(f) = due {
            run_batch(f).await;
        }
    }

    /// Requests waiting in forming batches now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.forming.lock().expect("batcher lock").values().map(|f| f.members.len()).sum()
    }
}

/// Runs a closed batch: drops requests whose callers have gone, joins the rest, runs
/// the invocation (stopping it if every caller goes) and sends each request its rows.
async fn run_batch(batch: Forming) {
    let Forming { members, run, function, .. } = batch;
    let mut members: Vec<Member> = members.into_iter().filter(|m| !m.reply.is_closed()).collect();
    if members.is_empty() {
        return;
    }
    let rows: Vec<u64> = members.iter().map(|m| m.rows).collect();
    let inputs = concat(members.iter_mut().map(|m| std::mem::take(&mut m.inputs)).collect());
    for m in &mut members {
        m.gauge = m.gauge.take().map(Progress::started);
    }
    let cancel = Cancel::default();
    let invocation = run(inputs, cancel.clone());
    tokio::pin!(invocation);
    let result = {
        let all_gone = async {
            for m in members.iter_mut() {
                m.reply.closed().await;
            }
        };
        tokio::select! {
            result = &mut invocation => result,
            () = all_gone => {
                cancel.raise();
                invocation.await
            }
        }
    };
    let requests = members.len() as u32;
    match result {
        Ok((started, mut output)) => match split(std::mem::take(&mut output.outputs), &rows) {
            Ok(shares) => {
                let n = u64::from(requests);
                for (i, (m, outputs)) in (0u64..).zip(members.into_iter().zip(shares)) {
                    // Counts of work are shared out (they add up to the batch's); times
                    // are each request's own wait.
                    let launches = output.launches / n + u64::from(i < output.launches % n);
                    let guest_cpu = output.guest_cpu / requests;
                    let output = InvocationOutput { outputs, launches, guest_cpu, ..output.clone() };
                    let _ = m.reply.send(Ok(Batched { output, started, requests }));
                }
            }
            Err(message) => {
                for m in members {
                    let broken = InvokeError::Failed { function: function.clone(), message: message.clone() };
                    let _ = m.reply.send(Err(broken.into()));
                }
            }
        },
        Err(e) => {
            for m in members {
                let _ = m.reply.send(Err(e.for_batch_member()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::IoData;
    use crate::platform::PlatformError;
    use crate::platform::batch_tensors::batch_shape;
    use std::sync::Mutex as StdMutex;
    use std::sync::atomic::AtomicUsize;
    use tokio::time::Instant as TokioInstant;

    fn row(v: f32) -> Vec<IoTensor> {
        vec![IoTensor { name: "x".into(), shape: vec![1, 2], data: IoData::F32(vec![v, -v]) }]
    }

    fn key(class: PriorityClass, version: usize) -> BatchKey {
        BatchKey { version, class, shape: batch_shape(&row(0.0)).unwrap().0 }
    }

    /// What the fake function saw: when each batch ran (in the paused clock) and its rows.
    type Log = Arc<StdMutex<Vec<(Duration, u64)>>>;

    /// Runs of the fake that saw their cancel raised.
    static CANCELLED: AtomicUsize = AtomicUsize::new(0);

    /// An echo that logs when it ran and how many rows it had, and takes `work` (of the
    /// paused clock) to run.
    fn echo(log: &Log, origin: TokioInstant, work: Duration) -> impl FnOnce() -> BatchRunner {
        let log = log.clone();
        move || {
            Box::new(move |inputs: Vec<IoTensor>, cancel: Cancel| {
                Box::pin(async move {
                    log.lock().unwrap().push((origin.elapsed(), inputs[0].shape[0]));
                    let started = Instant::now();
                    tokio::time::sleep(work).await;
                    if cancel.is_raised() {
                        CANCELLED.fetch_add(1, Ordering::Relaxed);
                        return Err(PlatformError::InvalidRequest("cancelled".into()));
                    }
                    let output = InvocationOutput {
                        outputs: inputs,
                        instantiate: Duration::ZERO,
                        warm: true,
                        execute: work,
                        launches: 0,
                        peak_device_bytes: 0,
                        guest_cpu: Duration::ZERO,
                        chunks: Default::default(),
                    };
                    Ok((started, output))
                }) as RunFuture
            })
        }
    }

    fn waiting(inputs: Vec<IoTensor>, rows: u64) -> Waiting {
        Waiting { inputs, rows, gauge: None }
    }

    fn batcher() -> Arc<Batcher> {
        Arc::default()
    }

    const POLICY: Batching = Batching { max_batch_size: 4, max_queue_delay_us: 5_000 };

    fn values(b: &Batched) -> Vec<f32> {
        match &b.output.outputs[0].data {
            IoData::F32(v) => v.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_request_runs_after_exactly_the_delay_and_gets_its_rows() {
        let (b, log, origin) = (batcher(), Log::default(), TokioInstant::now());
        let rx = b.submit(
            key(PriorityClass::Latency, 1),
            "f",
            POLICY,
            waiting(row(3.0), 1),
            echo(&log, origin, Duration::ZERO),
        );
        let got = rx.await.unwrap().unwrap();
        assert_eq!(values(&got), [3.0, -3.0]);
        assert_eq!(got.requests, 1);
        assert_eq!(*log.lock().unwrap(), [(Duration::from_micros(5_000), 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_within_the_delay_share_one_run_and_each_gets_its_own_rows() {
        let (b, log, origin) = (batcher(), Log::default(), TokioInstant::now());
        let k = key(PriorityClass::Latency, 1);
        let mut receivers = Vec::new();
        for i in 0..3 {
            receivers.push(b.submit(
                k.clone(),
                "f",
                POLICY,
                waiting(row(i as f32), 1),
                echo(&log, origin, Duration::ZERO),
            ));
            tokio::time::sleep(Duration::from_micros(1_000)).await;
        }
        for (i, rx) in receivers.into_iter().enumerate() {
            let got = rx.await.unwrap().unwrap();
            assert_eq!(values(&got), [i as f32, -(i as f32)], "request {i} got its own row");
            assert_eq!(got.requests, 3);
        }
        // One run, when the first request's delay ended: no request waited longer.
        assert_eq!(*log.lock().unwrap(), [(Duration::from_micros(5_000), 3)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_runs_at_once_and_an_overflowing_request_starts_the_next() {
        let (b, log, origin) = (batcher(), Log::default(), TokioInstant::now());
        let k = key(PriorityClass::Latency, 1);
        let run = || echo(&log, origin, Duration::ZERO);
        let first = b.submit(k.clone(), "f", POLICY, waiting(row(1.0), 1), run());
        let _three = b.submit(k.clone(), "f", POLICY, waiting([row(2.0), row(3.0), row(4.0)].concat_rows(), 3), run());
        // Four rows: full, it runs now (no delay).
        first.await.unwrap().unwrap();
        assert_eq!(log.lock().unwrap()[0], (Duration::ZERO, 4));
        // Three rows then two: the second would overflow, so the first leaves alone.
        let a = b.submit(k.clone(), "f", POLICY, waiting([row(5.0), row(6.0), row(7.0)].concat_rows(), 3), run());
        let c = b.submit(k.clone(), "f", POLICY, waiting([row(8.0), row(9.0)].concat_rows(), 2), run());
        assert_eq!(values(&a.await.unwrap().unwrap()), [5.0, -5.0, 6.0, -6.0, 7.0, -7.0]);
        assert_eq!(values(&c.await.unwrap().unwrap()), [8.0, -8.0, 9.0, -9.0]);
        assert_eq!(log.lock().unwrap()[1..], [(Duration::ZERO, 3), (Duration::from_micros(5_000), 2)]);
    }

    #[tokio::test(start_paused = true)]
    async fn classes_and_versions_never_share_a_batch() {
        let (b, log, origin) = (batcher(), Log::default(), TokioInstant::now());
        let run = || echo(&log, origin, Duration::ZERO);
        let latency = b.submit(key(PriorityClass::Latency, 1), "f", POLICY, waiting(row(1.0), 1), run());
        let batch = b.submit(key(PriorityClass::Batch, 1), "f", POLICY, waiting(row(2.0), 1), run());
        let other = b.submit(key(PriorityClass::Latency, 2), "f", POLICY, waiting(row(3.0), 1), run());
        for rx in [latency, batch, other] {
            assert_eq!(rx.await.unwrap().unwrap().requests, 1);
        }
        assert_eq!(log.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_request_is_left_out_and_the_rest_of_its_batch_runs() {
        let (b, log, origin) = (batcher(), Log::default(), TokioInstant::now());
        let k = key(PriorityClass::Latency, 1);
        let run = || echo(&log, origin, Duration::from_millis(10));
        let stays = b.submit(k.clone(), "f", POLICY, waiting(row(1.0), 1), run());
        let leaves = b.submit(k.clone(), "f", POLICY, waiting(row(2.0), 1), run());
        let stays_too = b.submit(k.clone(), "f", POLICY, waiting(row(3.0), 1), run());
        drop(leaves);
        assert_eq!(values(&stays.await.unwrap().unwrap()), [1.0, -1.0]);
        let last = stays_too.await.unwrap().unwrap();
        assert_eq!(values(&last), [3.0, -3.0]);
        assert_eq!(last.requests, 2, "the cancelled request was left out");
        assert_eq!(*log.lock().unwrap(), [(Duration::from_micros(5_000), 2)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_leaving_a_running_batch_does_not_stop_it_but_the_last_one_does() {
        let (b, log, origin) = (batcher(), Log::default(), TokioInstant::now());
        let k = key(PriorityClass::Latency, 1);
        let run = || echo(&log, origin, Duration::from_millis(10));
        let stays = b.submit(k.clone(), "f", POLICY, waiting(row(1.0), 1), run());
        let leaves = b.submit(k.clone(), "f", POLICY, waiting(row(2.0), 1), run());
        // The batch starts at 5 ms and runs for 10: leave in the middle.
        tokio::time::sleep(Duration::from_millis(8)).await;
        drop(leaves);
        assert_eq!(values(&stays.await.unwrap().unwrap()), [1.0, -1.0], "not stopped");
        let before = CANCELLED.load(Ordering::Relaxed);
        // Everyone leaves: the fake sees its cancel raised (and answers no one).
        let alone = b.submit(k.clone(), "f", POLICY, waiting(row(4.0), 1), run());
        tokio::time::sleep(Duration::from_millis(8)).await;
        drop(alone);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(b.waiting(), 0);
        assert_eq!(CANCELLED.load(Ordering::Relaxed), before + 1, "the last caller's leaving stopped the run");
    }

    trait ConcatRows {
        fn concat_rows(self) -> Vec<IoTensor>;
    }

    impl<const N: usize> ConcatRows for [Vec<IoTensor>; N] {
        fn concat_rows(self) -> Vec<IoTensor> {
            concat(self.into_iter().collect())
        }
    }
}
