//! Invocations: admission control ([`super::admission`]), then the version's load if it
//! is not loaded, then one run in a fresh or warm instance, alone or, for a version
//! deployed with batching, in a batch with other requests ([`super::batcher`]); a
//! serving function's requests go to its serving invocation ([`super::serving`]).
//!
//! Admission takes a permit from the tenant's limit and then from the server's without
//! waiting, so a full server answers "retry later" (429) at once rather than building
//! an unbounded queue; it comes before anything is loaded, so a refused request costs
//! no compilation, no instantiation and no weights. The guest runs on a blocking thread (one per
//! in-flight invocation, bounded by the global limit), so a guest that spins until its
//! deadline never stalls the HTTP workers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice_registry::Batching;

use super::admission::admit;
use super::batch_tensors::batch_shape;
use super::batcher::{BatchKey, BatchRunner, Progress, Waiting};
use super::policy::{clamp_class, clamp_weight, scheduling_class};
use super::{LoadedFunction, Platform, PlatformError, Result, TenantRuntime};
use crate::engine::{
    CallerLink, Cancel, CancelOnDrop, ChunkSink, InvocationContext, InvocationOutput, InvokeError, IoTensor,
    ServingLink,
};
use crate::scheduler::{MemoryAccount, SchedulingInfo};

/// The `function` label of an invocation whose name did not resolve to a deployed function.
pub const UNKNOWN_FUNCTION: &str = "(unknown)";

/// A finished invocation.
pub struct Invocation {
    /// The version that ran.
    pub function: Arc<LoadedFunction>,
    /// Its outputs and timings.
    pub output: InvocationOutput,
    /// From admission to the start of instantiation (thread hand-off, waits, and the
    /// wait for a batch to fill).
    pub queue: Duration,
    /// Requests that shared the invocation (1 when it ran alone; see `batcher`); for a
    /// serving function, the most requests its serving invocation held at once while it
    /// held this one (see `serving`).
    pub batch: u32,
}

/// A check of the inputs against the version that will run (the Open Inference
/// Protocol's signature check); its error is the invocation's.
pub type InputCheck<'a> = &'a (dyn Fn(&LoadedFunction, &[IoTensor]) -> Result<()> + Sync);

/// What a caller may ask of one invocation besides its inputs (the Open Inference
/// Protocol's versions and request parameters).
#[derive(Clone, Copy, Default)]
pub struct InvokeOptions<'a> {
    /// The version to run; `None` runs the serving (newest) one.
    pub version: Option<u32>,
    /// A priority class the request asks for; it can lower the class, never raise it
    /// above the function's or the tenant's ceiling.
    pub priority: Option<sluice_registry::PriorityClass>,
    /// Checks the inputs against the version that will run, before any guest code runs.
    pub check: Option<InputCheck<'a>>,
    /// A time limit the request asks for; it can shorten the function's, never extend it.
    pub timeout: Option<Duration>,
    /// Where the function's emitted chunks go (a streaming caller); `None` drops them.
    /// Dropping its receiver cancels the invocation.
    pub stream: Option<&'a ChunkSink>,
}

/// Counts an invocation as in flight while alive.
struct InFlight<'a>(&'a Platform);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Platform {
    /// Runs the serving version of `tenant/name` once on `inputs`.
    pub async fn invoke(self: &Arc<Self>, tenant: &str, name: &str, inputs: Vec<IoTensor>) -> Result<Invocation> {
        self.invoke_with(tenant, name, inputs, InvokeOptions::default()).await
    }

    /// Runs a version of `tenant/name` once on `inputs`, as `options` ask; the class and
    /// weight are what the request asks for clamped to the function's options and the
    /// tenant's policy.
    pub async fn invoke_with(
        self: &Arc<Self>,
        tenant: &str,
        name: &str,
        inputs: Vec<IoTensor>,
        options: InvokeOptions<'_>,
    ) -> Result<Invocation> {
        let admitted = Instant::now();
        let result = self.invoke_inner(tenant, name, inputs, options).await;
        match &result {
            Ok(invocation) => {
                self.count(|c| &c.invocations);
                self.metrics.record_ok(tenant, name, admitted.elapsed(), invocation);
                let chunks = &invocation.output.chunks;
                if let Some(first) = chunks.first {
                    let first = first.saturating_duration_since(admitted);
                    self.metrics.record_chunks(tenant, name, first, chunks.mean_gap());
                }
            }
            Err(e) => {
                match e {
                    PlatformError::Overloaded { .. } => self.count(|c| &c.rejected),
                    _ => self.count(|c| &c.invocation_errors),
                }
                // Only deployed names become label values (a caller picks the name).
                let function = if self.cached(tenant, name).is_some() { name } else { UNKNOWN_FUNCTION };
                self.metrics.record_error(tenant, function, e.code(), admitted.elapsed());
            }
        }
        result
    }

    async fn invoke_inner(
        self: &Arc<Self>,
        tenant: &str,
        name: &str,
        inputs: Vec<IoTensor>,
        options: InvokeOptions<'_>,
    ) -> Result<Invocation> {
        let received = Instant::now();
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(PlatformError::ShuttingDown);
        }
        let tenant_rt = self.tenant_runtime(tenant)?;
        let _admitted = admit(&tenant_rt.concurrency, &self.global)?;
        self.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(self);
        let cached = match options.version {
            None => self.cached(tenant, name),
            Some(v) => self
                .cached(tenant, name)
                .filter(|f| f.version.version == v)
                .or_else(|| self.functions.get_other(tenant, name, v)),
        };
        let function = match cached {
            Some(f) => f,
            None => {
                let (platform, t, n, v) = (self.clone(), tenant.to_owned(), name.to_owned(), options.version);
                tokio::task::spawn_blocking(move || platform.loaded_version(&t, &n, v))
                    .await
                    .map_err(|e| PlatformError::internal("loading a function", e))??
            }
        };
        if let Some(check) = options.check {
            check(&function, &inputs)?;
        }
        // Only deployed names become label values (a caller picks the name).
        let queued = self.metrics.queued(tenant, name);
        let scheduling = SchedulingInfo {
            tenant: tenant.into(),
            function: name.into(),
            class: scheduling_class(clamp_class(
                tenant_rt.policy.max_priority,
                function.version.options.priority,
                options.priority,
            )),
            weight: clamp_weight(tenant_rt.policy.weight, function.version.options.weight),
        };
        // Dropping this future (its caller went away) stops the invocation.
        let cancel = Cancel::default();
        let _cancel_on_drop = CancelOnDrop(cancel.clone());
        let caller = match options.stream {
            Some(sink) => CallerLink::streaming(sink.clone(), cancel),
            None => CallerLink { sink: None, cancel },
        };
        let batching = function.version.options.batching;
        if function.serves && batching.is_none_or(|b| b.max_batch_size > 1) {
            // Continuous batching: the function's serving invocation takes it from a queue.
            let _running = queued.running();
            let served = self
                .invoke_served(&tenant_rt, &function, scheduling, inputs, caller, options.timeout, received)
                .await?;
            return Ok(Invocation { function, output: served.output, queue: served.queue, batch: served.peers });
        }
        if let Some(policy) = batching.filter(|b| b.max_batch_size > 1)
            && options.stream.is_none()
        {
            return self
                .invoke_batched(&tenant_rt, function, policy, scheduling, inputs, options.timeout, queued, received)
                .await;
        }
        let queued = Some(Box::new(queued) as Box<dyn Progress>);
        let (started, output) =
            self.run_guest(&function, &tenant_rt, scheduling, options.timeout, caller, inputs, queued, None).await?;
        Ok(Invocation { function, output, queue: started - received, batch: 1 })
    }

    /// Runs `function` once in a guest on a host thread of its class's OS priority (see
    /// `guest_threads`), charged to its tenant; returns when the guest started and its
    /// output. With `serving`, it is a serving invocation of that queue (`serving`).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_guest(
        self: &Arc<Self>,
        function: &Arc<LoadedFunction>,
        tenant_rt: &TenantRuntime,
        scheduling: SchedulingInfo,
        timeout: Option<Duration>,
        caller: CallerLink,
        inputs: Vec<IoTensor>,
        queued: Option<Box<dyn Progress>>,
        serving: Option<ServingLink>,
    ) -> Result<(Instant, InvocationOutput)> {
        let ctx = InvocationContext {
            queue: function.placement.queue().clone(),
            account: MemoryAccount::new("invocation", None, Some(tenant_rt.account.clone())),
            scheduling,
            timeout,
            caller,
            serving,
        };
        let class = ctx.scheduling.class;
        let (platform, f, handle) = (self.clone(), function.clone(), tokio::runtime::Handle::current());
        let (started, result) = self
            .guest_threads
            .run(class, move || {
                let _running = queued.map(Progress::started);
                let started = Instant::now();
                (started, handle.block_on(platform.engine.invoke(&f.image, ctx, &inputs)))
            })
            .await
            .map_err(|e| PlatformError::internal("running an invocation", e))?;
        Ok((started, result?))
    }

    /// Joins the request to its batch ([`super::batcher`]) and waits for its rows of the
    /// batch's outputs, for at most the time limit the request asks for. Dropping this
    /// future leaves the batch (before it starts) or drops this request's answer.
    #[allow(clippy::too_many_arguments)]
    async fn invoke_batched(
        self: &Arc<Self>,
        tenant_rt: &Arc<TenantRuntime>,
        function: Arc<LoadedFunction>,
        policy: Batching,
        scheduling: SchedulingInfo,
        inputs: Vec<IoTensor>,
        timeout: Option<Duration>,
        queued: impl Progress + 'static,
        received: Instant,
    ) -> Result<Invocation> {
        let name = &function.version.function;
        let (shape, rows) = batch_shape(&inputs)
            .map_err(|e| InvokeError::InvalidInput { function: name.clone(), message: e.to_string() })?;
        let key = BatchKey { version: Arc::as_ptr(&function) as usize, class: scheduling.class, shape };
        let runner = || -> BatchRunner {
            let (platform, f, tenant_rt) = (self.clone(), function.clone(), tenant_rt.clone());
            Box::new(move |inputs, cancel| {
                Box::pin(async move {
                    // Each request's gauge is its own (the batcher moves it to running).
                    let caller = CallerLink { sink: None, cancel };
                    platform.run_guest(&f, &tenant_rt, scheduling, None, caller, inputs, None, None).await
                })
            })
        };
        let request = Waiting { inputs, rows, gauge: Some(Box::new(queued)) };
        let reply = self.batcher.submit(key, name, policy, request, runner);
        let answer = match timeout {
            None => reply.await,
            Some(limit) => tokio::time::timeout(limit, reply)
                .await
                .map_err(|_| InvokeError::Timeout { function: name.clone(), limit })?,
        };
        let batched =
            answer.map_err(|_| PlatformError::internal("a batched invocation", "its batch ended unanswered"))??;
        let queue = batched.started.saturating_duration_since(received);
        Ok(Invocation { function, output: batched.output, queue, batch: batched.requests })
    }
}
