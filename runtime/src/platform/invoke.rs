//! Invocations: admission control ([`super::admission`]), then the version's load if it
//! is not loaded, then one run in a fresh or warm instance.
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

use super::admission::admit;
use super::policy::{clamp_class, clamp_weight, scheduling_class};
use super::{LoadedFunction, Platform, PlatformError, Result};
use crate::engine::{CallerLink, Cancel, CancelOnDrop, ChunkSink, InvocationContext, InvocationOutput, IoTensor};
use crate::scheduler::{MemoryAccount, SchedulingInfo};

/// The `function` label of an invocation whose name did not resolve to a deployed function.
pub const UNKNOWN_FUNCTION: &str = "(unknown)";

/// A finished invocation.
pub struct Invocation {
    /// The version that ran.
    pub function: Arc<LoadedFunction>,
    /// Its outputs and timings.
    pub output: InvocationOutput,
    /// From admission to the start of instantiation (thread hand-off, waits).
    pub queue: Duration,
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
        // Dropping this future (its caller went away) stops the invocation.
        let cancel = Cancel::default();
        let _cancel_on_drop = CancelOnDrop(cancel.clone());
        let caller = match options.stream {
            Some(sink) => CallerLink::streaming(sink.clone(), cancel),
            None => CallerLink { sink: None, cancel },
        };

        let ctx = InvocationContext {
            queue: function.placement.queue().clone(),
            account: MemoryAccount::new("invocation", None, Some(tenant_rt.account.clone())),
            scheduling: SchedulingInfo {
                tenant: tenant.into(),
                function: name.into(),
                class: scheduling_class(clamp_class(
                    tenant_rt.policy.max_priority,
                    function.version.options.priority,
                    options.priority,
                )),
                weight: clamp_weight(tenant_rt.policy.weight, function.version.options.weight),
            },
            timeout: options.timeout,
            caller,
        };
        // The guest runs on a host thread of its class's OS priority (see `guest_threads`).
        let class = ctx.scheduling.class;
        let (platform, f, handle) = (self.clone(), function.clone(), tokio::runtime::Handle::current());
        let (started, result) = self
            .guest_threads
            .run(class, move || {
                let _running = queued.running();
                let started = Instant::now();
                (started, handle.block_on(platform.engine.invoke(&f.image, ctx, &inputs)))
            })
            .await
            .map_err(|e| PlatformError::internal("running an invocation", e))?;
        let output = result?;
        Ok(Invocation { function, output, queue: started - received })
    }
}
