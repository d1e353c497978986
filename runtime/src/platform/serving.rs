//! Continuous batching, the platform's half: requests of a serving function (one that
//! declares itself one, `sluice_guest::serving_function!`, and imports
//! `sluice:gpu/requests`) go to a queue per loaded version and priority class,
//! and one serving invocation at a time takes them from it (`engine::ServingQueue`).
//!
//! A request keeps everything an ordinary invocation has: its admission permits (held
//! until it is answered), its time limit (the platform answers 504 at its deadline
//! whatever the guest does; the guest sees it `gone`), its stream and its cancellation
//! (its caller's going makes it `gone` and its `emit` fail). A serving invocation is
//! started when a request finds none running, and again when one ends while requests
//! wait; it takes no new request after half the function's time limit, so none
//! outlives the limit. One that fails, or two in a row that return without taking a
//! request while requests wait, fail the waiting requests rather than being restarted
//! in a loop (one idle return is the normal race of a request arriving as an idle
//! invocation ends).
//!
//! A serving function deployed with `max_batch_size` N holds at most N requests at once
//! (N = 1 turns continuous batching off: each request is then an ordinary invocation,
//! run concurrently with the others as any function's are).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{LoadedFunction, Platform, Result, TenantRuntime};
use crate::engine::{
    CallerLink, InvocationOutput, InvokeError, IoTensor, Pending, RunError, ServedError, ServingLink, ServingQueue,
};
use crate::scheduler::{PriorityClass, SchedulingInfo};

/// A queue's identity: the loaded version (its address, held alive by the entry) and
/// the class.
type QueueKey = (usize, PriorityClass);

/// A queue and the loaded version it serves (held so that its address stays its own).
type QueueEntry = (Arc<LoadedFunction>, Arc<ServingQueue>);

/// The queues of the serving functions with a serving invocation running.
#[derive(Default)]
pub(crate) struct ServingQueues {
    queues: Mutex<HashMap<QueueKey, QueueEntry>>,
    /// Set by [`ServingQueues::close_all`] (under the lock): queues made later are
    /// made closed.
    closed: AtomicBool,
}

impl ServingQueues {
    fn queue(&self, function: &Arc<LoadedFunction>, class: PriorityClass) -> Arc<ServingQueue> {
        let key = (Arc::as_ptr(function) as usize, class);
        let mut queues = self.queues.lock().expect("serving queues lock");
        let closed = self.closed.load(Ordering::Relaxed);
        let queue = queues.entry(key).or_insert_with(|| (function.clone(), Arc::default())).1.clone();
        if closed {
            queue.close();
        }
        queue
    }

    /// Closes every queue for the shutdown ([`ServingQueue::close`]): idle serving
    /// invocations return now instead of at the end of their wait.
    pub(super) fn close_all(&self) {
        let queues = self.queues.lock().expect("serving queues lock");
        self.closed.store(true, Ordering::Relaxed);
        for (_, queue) in queues.values() {
            queue.close();
        }
    }

    /// Queues with a serving invocation running (or starting).
    pub(super) fn running(&self) -> usize {
        self.queues.lock().expect("serving queues lock").values().filter(|(_, q)| q.is_running()).count()
    }

    /// Forgets `queue` once nothing runs for it (and nothing waits).
    fn forget(&self, function: &Arc<LoadedFunction>, class: PriorityClass, queue: &Arc<ServingQueue>) {
        let key = (Arc::as_ptr(function) as usize, class);
        let mut queues = self.queues.lock().expect("serving queues lock");
        if queues.get(&key).is_some_and(|(_, q)| Arc::ptr_eq(q, queue)) && !queue.is_running() {
            queues.remove(&key);
        }
    }
}

/// What a served request returned, as the platform's invocation result.
pub(crate) struct ServedInvocation {
    pub output: InvocationOutput,
    /// From admission to a serving invocation taking it.
    pub queue: Duration,
    /// Most requests its serving invocation held at once while it held this one.
    pub peers: u32,
}

impl Platform {
    /// Queues a request of serving `function` and waits for its answer (see the module).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn invoke_served(
        self: &Arc<Self>,
        tenant_rt: &Arc<TenantRuntime>,
        function: &Arc<LoadedFunction>,
        scheduling: SchedulingInfo,
        inputs: Vec<IoTensor>,
        link: CallerLink,
        timeout: Option<Duration>,
        received: Instant,
    ) -> Result<ServedInvocation> {
        let name = function.version.function.clone();
        let limit = timeout.map_or(function.image.timeout(), |t| t.min(function.image.timeout()));
        let (reply, answer) = oneshot::channel();
        let gone = link.clone();
        let queue = self.serving.queue(function, scheduling.class);
        let pending = Pending { inputs, link, deadline: received + limit, reply };
        if queue.push(pending) {
            self.start_serving(function.clone(), tenant_rt.clone(), scheduling, queue);
        }
        let answer = tokio::time::timeout(limit.saturating_sub(received.elapsed()), answer)
            .await
            .map_err(|_| InvokeError::Timeout { function: name.clone(), limit })?;
        let served = match answer {
            Ok(Ok(served)) => served,
            _ if gone.gone() => return Err(InvokeError::Cancelled { function: name }.into()),
            Ok(Err(ServedError::Run(RunError::InvalidInput(message)))) => {
                return Err(InvokeError::InvalidInput { function: name, message }.into());
            }
            Ok(Err(ServedError::Run(RunError::Failed(message)))) => {
                return Err(InvokeError::Failed { function: name, message }.into());
            }
            Ok(Err(ServedError::Dropped)) | Err(_) => {
                let message = "its serving invocation ended without answering this request \
                               (it returned early, failed or trapped; the server log says which)";
                return Err(InvokeError::Failed { function: name, message: message.into() }.into());
            }
        };
        let peers = served.peers;
        let output = InvocationOutput {
            outputs: served.outputs,
            instantiate: Duration::ZERO,
            warm: true,
            execute: served.taken.elapsed(),
            launches: 0,
            peak_device_bytes: 0,
            guest_cpu: Duration::ZERO,
            chunks: served.chunks,
        };
        let queue = served.taken.saturating_duration_since(received);
        Ok(ServedInvocation { output, queue, peers })
    }

    /// Runs serving invocations of `function` for `queue` while requests wait.
    fn start_serving(
        self: &Arc<Self>,
        function: Arc<LoadedFunction>,
        tenant_rt: Arc<TenantRuntime>,
        scheduling: SchedulingInfo,
        queue: Arc<ServingQueue>,
    ) {
        let platform = self.clone();
        tokio::spawn(async move {
            let class = scheduling.class;
            let mut idle_runs = 0;
            loop {
                let taken_before = queue.taken();
                let accept_until = Instant::now() + function.image.timeout() / 2;
                let max_open = function.version.options.batching.map_or(usize::MAX, |b| b.max_batch_size as usize);
                let link = ServingLink { queue: queue.clone(), accept_until, max_open };
                let caller = CallerLink::default();
                let result = platform
                    .run_guest(&function, &tenant_rt, scheduling.clone(), None, caller, Vec::new(), None, Some(link))
                    .await;
                idle_runs = if queue.taken() == taken_before { idle_runs + 1 } else { 0 };
                if let Err(e) = &result {
                    tracing::warn!(function = %function.version.function, error = %e, "a serving invocation failed");
                }
                if result.is_err() || idle_runs >= 2 {
                    // Restarting would fail (or idle) again: the waiting requests fail now.
                    for pending in queue.take_all() {
                        let _ = pending.reply.send(Err(ServedError::Dropped));
                    }
                }
                if !queue.ended() {
                    platform.serving.forget(&function, class, &queue);
                    return;
                }
            }
        });
    }
}
