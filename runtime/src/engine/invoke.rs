//! One invocation: a store and instance (fresh, or warm from an earlier invocation
//! of the same function version), the call, and what can go wrong.
//!
//! The epoch clock stops it: at every tick its callback checks the time limit and
//! whether the caller has gone ([`super::caller`]), so a guest that computes without
//! calling the host is stopped within a tick of either.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_host_api::Code;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use super::Engine;
use super::bindings::{IoData, IoTensor, RunError};
use super::caller::{CallerLink, CallerState, ChunkTimes};
use super::component::{FunctionImage, FunctionLimits};
use super::serving::ServingLink;
use super::state::{InvocationState, Limiter};
use super::warm::WarmInstance;
use crate::scheduler::{DeviceQueue, InvocationGuard, MemoryAccount, PriorityClass, SchedulingInfo};

/// Where an invocation runs and whom it is charged to.
#[derive(Clone)]
pub struct InvocationContext {
    /// The device's scheduler.
    pub queue: DeviceQueue,
    /// The account the invocation's tensors are charged to (its parent is the tenant's).
    pub account: Arc<MemoryAccount>,
    /// Tenant, priority class and weight, for the scheduler.
    pub scheduling: SchedulingInfo,
    /// A shorter time limit the caller asks for; the function's own limit applies when
    /// this is `None` or longer.
    pub timeout: Option<Duration>,
    /// Where emitted chunks go and whether the caller has gone (default: a one-shot
    /// caller that stays).
    pub caller: CallerLink,
    /// For a serving invocation, its queue (see `serving`); `None` for an ordinary one.
    pub serving: Option<ServingLink>,
}

/// The outputs of a successful invocation and what it cost.
#[derive(Clone, Debug)]
pub struct InvocationOutput {
    pub outputs: Vec<IoTensor>,
    /// Time to create the store and instance (near zero for a warm one).
    pub instantiate: Duration,
    /// Whether a warm instance ran it.
    pub warm: bool,
    /// Time in the guest's `run`, including waits for the device.
    pub execute: Duration,
    /// Ops the guest launched.
    pub launches: u64,
    /// Most device memory its tensors held at once.
    pub peak_device_bytes: u64,
    /// Time the guest computed in Wasm between host calls (charged to its tenant's
    /// fair share on the device).
    pub guest_cpu: Duration,
    /// When it emitted chunks (none for a one-shot function).
    pub chunks: ChunkTimes,
}

/// Why an invocation failed. Each variant names the function and the limit.
#[derive(Clone, Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("invalid input for function {function:?}: {message}")]
    InvalidInput { function: String, message: String },
    #[error("function {function:?} failed: {message}")]
    Failed { function: String, message: String },
    #[error("function {function:?} trapped: {message}{}", stderr_suffix(stderr))]
    Trapped { function: String, message: String, stderr: String },
    #[error("function {function:?} exceeded its time limit of {} ms", limit.as_millis())]
    Timeout { function: String, limit: Duration },
    #[error("function {function:?} exceeded its memory limit of {limit} bytes (it asked for {requested})")]
    MemoryLimit { function: String, limit: usize, requested: usize },
    #[error("function {function:?} returned {bytes} bytes of outputs, more than the limit of {limit}")]
    OutputTooLarge { function: String, bytes: usize, limit: usize },
    #[error("function {function:?} passed more than {limit} bytes to the host in one call (its outputs or one upload)")]
    TransferTooLarge { function: String, limit: usize },
    #[error("function {function:?} failed after the host refused it memory: {message}")]
    QuotaExceeded { function: String, message: String },
    #[error("function {function:?} was stopped: its caller has gone")]
    Cancelled { function: String },
    #[error("function {function:?} could not be instantiated: {message}; retry later")]
    NoInstanceSlot { function: String, message: String },
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() { String::new() } else { format!("; guest stderr: {}", stderr.trim_end()) }
}

impl InvokeError {
    /// Stable machine-readable code.
    pub fn code(&self) -> Code {
        match self {
            InvokeError::InvalidInput { .. } => Code::InvalidInput,
            InvokeError::Failed { .. } => Code::FunctionFailed,
            InvokeError::Trapped { .. } => Code::FunctionTrapped,
            InvokeError::Timeout { .. } => Code::Timeout,
            InvokeError::MemoryLimit { .. } => Code::MemoryLimitExceeded,
            InvokeError::OutputTooLarge { .. } => Code::OutputTooLarge,
            InvokeError::TransferTooLarge { .. } => Code::TransferTooLarge,
            InvokeError::QuotaExceeded { .. } => Code::QuotaExceeded,
            InvokeError::Cancelled { .. } => Code::Cancelled,
            InvokeError::NoInstanceSlot { .. } => Code::InstancePoolExhausted,
        }
    }
}

/// Size of an output's elements in bytes.
fn io_bytes(t: &IoTensor) -> usize {
    match &t.data {
        IoData::F32(v) => v.len() * 4,
        IoData::F16(v) | IoData::Bf16(v) => v.len() * 2,
        IoData::I32(v) => v.len() * 4,
        IoData::I64(v) => v.len() * 8,
        IoData::U8(v) => v.len(),
        IoData::Bytes(v) => v.iter().map(Vec::len).sum(),
    }
}

const STDERR_CAPTURE_BYTES: usize = 8 << 10;

/// A warm instance is only kept while its stderr pipe has at least this much room
/// left for the next invocation.
const STDERR_ROOM_TO_KEEP: usize = STDERR_CAPTURE_BYTES / 2;

/// How often a batch guest paused for latency work looks whether its caller has gone
/// (its deadline ends a pause on time): rarely, since dozens may be paused at once.
const PAUSED_RECHECK: Duration = Duration::from_millis(50);

/// Room above the output limit for names and shapes in one guest→host transfer.
const TRANSFER_SLACK_BYTES: usize = 1 << 20;

impl Engine {
    /// Runs `image` once on `inputs`, in a warm instance if one is kept, else in a
    /// fresh one.
    pub async fn invoke(
        &self,
        image: &FunctionImage,
        ctx: InvocationContext,
        inputs: &[IoTensor],
    ) -> Result<InvocationOutput, InvokeError> {
        let started = Instant::now();
        let function = image.name.clone();
        let limits = &image.limits;
        let timeout = ctx.timeout.map_or(limits.timeout, |t| t.min(limits.timeout));
        let deadline = Instant::now() + timeout + self.config().epoch_tick;
        // Latency work counts itself in flight; a batch guest gives way to it at every
        // tick (and the clock ticks faster while one runs).
        let give_way = self.clock.give_way().clone();
        let batch = ctx.scheduling.class == PriorityClass::Batch;
        let _batch_guest = batch.then(|| give_way.batch_guest());
        let _latency_guest = (!batch).then(|| give_way.latency_guest());
        // A batch invocation starts only when latency work leaves it a core: before it
        // takes an instance or opens a stream on the device.
        if batch && !give_way.before_start(deadline, PAUSED_RECHECK, || ctx.caller.gone()) {
            if ctx.caller.gone() {
                return Err(InvokeError::Cancelled { function });
            }
            return Err(InvokeError::Timeout { function, limit: timeout });
        }
        // Declared before the store, so dropped after it: the invocation's handles
        // are freed first, then its stream ends and cancels whatever is still queued.
        let stream = ctx.queue.begin(ctx.scheduling.clone());
        let account = ctx.account.clone();
        let (mut store, warm) = match image.warm.take() {
            Some(WarmInstance { mut store, instance }) => {
                let state = store.data_mut();
                state.queue = ctx.queue;
                state.invocation = stream.id();
                state.room = stream.room().clone();
                state.account = ctx.account.clone();
                state.stderr_from = state.stderr.contents().len();
                state.launches = 0;
                state.quota_refusal = None;
                state.caller = CallerState::new(ctx.caller);
                state.serving = ctx.serving;
                (store, Some(instance))
            }
            None => (self.new_store(image, ctx, &stream), None),
        };
        store.data_mut().deadline = deadline;
        store.set_epoch_deadline(1);
        let ticking = batch.then(|| give_way.clone());
        store.epoch_deadline_callback(move |store| {
            let state = store.data();
            if state.caller.link.gone() || Instant::now() >= state.deadline {
                return Ok(UpdateDeadline::Interrupt);
            }
            if let Some(give_way) = &ticking
                && !give_way.at_tick(state.deadline, PAUSED_RECHECK, || state.caller.link.gone())
            {
                return Ok(UpdateDeadline::Interrupt);
            }
            Ok(UpdateDeadline::Continue(1))
        });
        store.set_hostcall_fuel(limits.max_output_bytes + TRANSFER_SLACK_BYTES);

        let was_warm = warm.is_some();
        let call = async {
            let instance = match warm {
                Some(instance) => instance,
                None => image.pre.instantiate_async(&mut store).await?,
            };
            let instantiated = Instant::now();
            store.data_mut().guest_cpu.start();
            let result = instance.call_run(&mut store, inputs).await;
            Ok::<_, wasmtime::Error>((instance, instantiated, result))
        };
        let outcome = tokio::time::timeout(timeout, call).await;
        let state = store.data_mut();
        let guest_cpu = state.guest_cpu.finish(&state.queue, state.invocation);
        let gone = state.caller.link.gone();
        let (instance, instantiated, returned) = match outcome {
            Err(_) | Ok(Err(_)) | Ok(Ok((_, _, Err(_)))) if gone => return Err(InvokeError::Cancelled { function }),
            Err(_elapsed) => return Err(InvokeError::Timeout { function, limit: timeout }),
            Ok(Err(e)) | Ok(Ok((_, _, Err(e)))) => {
                if let Some(message) = store.data().quota_refusal.clone() {
                    return Err(InvokeError::QuotaExceeded { function, message });
                }
                return Err(classify_trap(&store, function, e, limits, timeout));
            }
            Ok(Ok((instance, t, Ok(returned)))) => (instance, t, returned),
        };
        let finished = Instant::now();
        let launches = store.data().launches;
        let chunks = store.data().caller.chunks;
        // A kept instance must not hold its caller's channel open.
        store.data_mut().caller = CallerState::default();
        let state = store.data();
        let store_quota_refusal = state.quota_refusal.clone();
        let clean = state.live_tensors == 0 && state.served.is_empty();
        if clean && state.stderr.contents().len() + STDERR_ROOM_TO_KEEP <= STDERR_CAPTURE_BYTES {
            let memory = state.limiter.used();
            image.warm.give_back(WarmInstance { store, instance }, memory, finished);
        }
        // A guest that fails after a quota refusal failed because of it: the quota's
        // own code, not `function_failed`. (One that coped with it succeeded.)
        if returned.is_err()
            && let Some(message) = store_quota_refusal
        {
            return Err(InvokeError::QuotaExceeded { function, message });
        }
        let outputs = match returned {
            Ok(outputs) => outputs,
            Err(_) if gone => return Err(InvokeError::Cancelled { function }),
            Err(RunError::InvalidInput(message)) => return Err(InvokeError::InvalidInput { function, message }),
            Err(RunError::Failed(message)) => return Err(InvokeError::Failed { function, message }),
        };
        let bytes: usize = outputs.iter().map(io_bytes).sum();
        if bytes > limits.max_output_bytes {
            return Err(InvokeError::OutputTooLarge { function, bytes, limit: limits.max_output_bytes });
        }
        Ok(InvocationOutput {
            outputs,
            instantiate: instantiated - started,
            warm: was_warm,
            execute: finished - instantiated,
            launches,
            peak_device_bytes: account.peak(),
            guest_cpu,
            chunks,
        })
    }

    /// A fresh store for one invocation of `image` on `ctx`'s device.
    fn new_store(
        &self,
        image: &FunctionImage,
        ctx: InvocationContext,
        stream: &InvocationGuard,
    ) -> Store<InvocationState> {
        let limits = &image.limits;
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE_BYTES);
        let wasi = WasiCtx::builder().stdout(stderr.clone()).stderr(stderr.clone()).build();
        let state = InvocationState {
            table: ResourceTable::new(),
            wasi,
            limiter: Limiter::new(limits.sandbox.memory_bytes),
            queue: ctx.queue,
            invocation: stream.id(),
            room: stream.room().clone(),
            account: ctx.account,
            artifacts: image.artifacts.clone(),
            limits: limits.sandbox.clone(),
            stderr,
            stderr_from: 0,
            launches: 0,
            live_tensors: 0,
            max_live_tensors: self.config().max_live_tensors,
            quota_refusal: None,
            guest_cpu: Default::default(),
            caller: CallerState::new(ctx.caller),
            deadline: Instant::now(),
            serving: ctx.serving,
            served: Default::default(),
            next_served: 0,
        };
        let mut store = Store::new(self.wasmtime(), state);
        store.limiter(|s| &mut s.limiter);
        store
    }
}

fn classify_trap(
    store: &Store<InvocationState>,
    function: String,
    e: wasmtime::Error,
    limits: &FunctionLimits,
    timeout: Duration,
) -> InvokeError {
    let state = store.data();
    if let Some(requested) = state.limiter.denied {
        return InvokeError::MemoryLimit { function, limit: state.limiter.memory_bytes, requested };
    }
    if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
        return InvokeError::Timeout { function, limit: timeout };
    }
    // A fresh instance that found no free slot of the pool: capacity, not a trap.
    if let Some(full) = e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
        return InvokeError::NoInstanceSlot { function, message: full.to_string() };
    }
    // wasmtime reports exhausted hostcall fuel as a plain error; its text is the
    // only signal it gives.
    if format!("{e:#}").contains("fuel allocated for hostcalls") {
        return InvokeError::TransferTooLarge { function, limit: limits.max_output_bytes + TRANSFER_SLACK_BYTES };
    }
    let stderr = state.stderr.contents();
    let stderr = String::from_utf8_lossy(stderr.get(state.stderr_from..).unwrap_or_default()).into_owned();
    let message = match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => format!("{trap}"),
        None => format!("{e:#}"),
    };
    InvokeError::Trapped { function, message, stderr }
}
