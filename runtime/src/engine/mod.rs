//! The sandbox: wasmtime configured for many short, isolated invocations.
//!
//! One [`Engine`] per process: the component model with async support, the pooling
//! allocator (so a fresh instance per invocation costs microseconds), epoch
//! interruption for wall-clock deadlines and a per-instance memory limiter. A
//! component is checked against the `inference` world once ([`Engine::prepare`])
//! and pre-instantiated; [`Engine::invoke`] then runs it in a fresh store, or in a
//! warm instance an earlier invocation of the same version left clean (`warm`).

mod artifacts;
mod bindings;
mod caller;
mod component;
mod convert;
mod epoch;
mod give_way;
mod guest_cpu;
mod handle;
mod host;
mod host_error;
mod invoke;
mod signature;
mod state;
mod stream_room;
mod warm;

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig};

pub use artifacts::{ArtifactSet, ArtifactStats, gguf};
pub use bindings::{IoData, IoTensor, RunError};
pub use caller::{
    CallerLink, Cancel, CancelOnDrop, Chunk, ChunkSink, ChunkTimes, QueuedChunk, chunk_channel, default_room,
};
pub use component::{ComponentError, FunctionImage, FunctionLimits};
pub use invoke::{InvocationContext, InvocationOutput, InvokeError};
pub use signature::{DATATYPES, SIGNATURE_SECTION, Signature, TensorSpec, read_signature};
pub use state::SandboxLimits;
pub use stream_room::{Held, ITEM_OVERHEAD, Stalled, StreamCounters, StreamRoom, tensors_bytes};

use state::InvocationState;

/// Process-wide sandbox settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Instances that may exist at once (sizes the pooling allocator).
    pub max_instances: u32,
    /// Ceiling for any function's linear memory; each function may set a lower one.
    pub max_memory_bytes: usize,
    /// Granularity of wall-clock deadlines and cancellation while no batch-class guest
    /// runs.
    pub epoch_tick: Duration,
    /// The epoch's tick while a batch-class guest runs: at each, such a guest yields its
    /// core to any thread waiting for it (`engine/epoch.rs`).
    pub give_way_tick: Duration,
    /// How long batch-class guests stay paused after the last latency-class invocation
    /// ends, for the next request of the same client (`engine/give_way.rs`; zero: they
    /// go on at once).
    pub latency_linger: Duration,
    /// Instances of one function version kept warm between invocations (0: a fresh
    /// instance every time). Engine-wide, at most half of `max_instances` are kept.
    pub warm_instances_per_function: usize,
    /// Tensor handles one invocation may hold at once. Every tensor costs a handle,
    /// even one of zero bytes, which costs no memory quota.
    pub max_live_tensors: usize,
}

/// Default of [`EngineConfig::give_way_tick`]: measured on two cores beside eight
/// spinning batch guests, a latency tenant's p99 was 0.4–0.5 ms with 100–250 µs, 0.7 ms
/// with 500 µs and 1.2 ms with 1 ms (3.6–4.1 ms without giving way).
pub const DEFAULT_GIVE_WAY_TICK: Duration = Duration::from_micros(250);

/// Default of [`EngineConfig::latency_linger`]: measured on two cores beside the
/// hostile-load mix (`cargo xtask soak`), a latency tenant's p99 was 2.07–2.16 ms with
/// none and 0.50–0.52 ms with 1 ms, 0.34–0.39 ms alone (a closed-loop client's next
/// request comes within a few hundred µs: between two of them the batch guests would
/// take the cores, and the server threads that read the next request wait for them).
pub const DEFAULT_LATENCY_LINGER: Duration = Duration::from_millis(1);

/// Default of [`EngineConfig::max_live_tensors`]: far above what a model holds (MiniLM
/// holds a few hundred), far below what would cost the host real memory.
pub const DEFAULT_MAX_LIVE_TENSORS: usize = 16_384;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_instances: 128,
            max_memory_bytes: 1 << 30,
            epoch_tick: Duration::from_millis(5),
            give_way_tick: DEFAULT_GIVE_WAY_TICK,
            latency_linger: DEFAULT_LATENCY_LINGER,
            warm_instances_per_function: 4,
            max_live_tensors: DEFAULT_MAX_LIVE_TENSORS,
        }
    }
}

/// The wasmtime engine, the linker with the host API, and the epoch clock.
pub struct Engine {
    wasmtime: wasmtime::Engine,
    linker: Linker<InvocationState>,
    config: EngineConfig,
    clock: Arc<epoch::EpochClock>,
    /// Warm instances kept by all function images.
    warm_total: Arc<std::sync::atomic::AtomicUsize>,
}

impl Engine {
    /// Configures wasmtime and starts the epoch clock.
    pub fn new(config: EngineConfig) -> anyhow::Result<Engine> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(config.max_instances)
            .total_core_instances(config.max_instances * 8)
            .total_memories(config.max_instances * 2)
            .total_tables(config.max_instances * 4)
            .total_stacks(config.max_instances)
            .max_memory_size(config.max_memory_bytes);
        let mut wt = Config::new();
        wt.wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let wasmtime = wasmtime::Engine::new(&wt)?;
        let mut linker = Linker::new(&wasmtime);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        bindings::Inference::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s)?;

        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let give_way = give_way::GiveWay::new(wasmtime.clone(), cores, config.latency_linger);
        let clock = epoch::EpochClock::start(wasmtime.clone(), give_way, config.epoch_tick, config.give_way_tick)?;
        Ok(Engine { wasmtime, linker, config, clock, warm_total: Default::default() })
    }

    /// The settings this engine runs with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Identifies the compiled-code format: precompiled components are only
    /// reusable by an engine with the same fingerprint.
    pub fn fingerprint(&self) -> String {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut h = DefaultHasher::new();
        self.wasmtime.precompile_compatibility_hash().hash(&mut h);
        format!("wasmtime-{}-{:016x}", env!("CARGO_PKG_VERSION"), h.finish())
    }

    /// Times batch-class guests gave their core way at an epoch tick, since start.
    pub fn batch_guest_yields(&self) -> u64 {
        self.clock.give_way().yields()
    }

    /// Times batch-class guests paused while latency work needed their core, since start.
    pub fn batch_guest_pauses(&self) -> u64 {
        self.clock.give_way().pauses()
    }

    pub(crate) fn wasmtime(&self) -> &wasmtime::Engine {
        &self.wasmtime
    }

    pub(crate) fn linker(&self) -> &Linker<InvocationState> {
        &self.linker
    }

    /// Compiles a component from its binary, checking that it is one.
    pub fn compile(&self, wasm: &[u8]) -> Result<Component, ComponentError> {
        component::compile(self, wasm)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.clock.stop();
    }
}
