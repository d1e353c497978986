//! The sandbox: wasmtime configured for many short, isolated invocations.
//!
//! One [`Engine`] per process: the component model with async support, the pooling
//! allocator (so a fresh instance per invocation costs microseconds), epoch
//! interruption for wall-clock deadlines and a per-instance memory limiter. A
//! component is checked against the `inference` world once ([`Engine::prepare`])
//! and pre-instantiated; [`Engine::invoke`] then runs it in a fresh store, or in a
//! warm instance an earlier invocation of the same version left clean (`warm`).
//!
//! The pool's slots are shared by every tenant: each component is held to
//! per-component limits at deploy (`footprint`), the pool is sized for the largest
//! allowed component (`pool`), and warm instances are capped per tenant and released
//! when idle (`warm`), so a fresh instance of an admitted invocation finds its slots.

mod artifacts;
mod bindings;
mod caller;
mod component;
mod component_error;
mod convert;
mod epoch;
mod footprint;
mod give_way;
mod guest_cpu;
mod handle;
mod host;
mod host_api;
mod host_error;
mod invoke;
mod pool;
mod request_handle;
mod serving;
mod serving_host;
mod signature;
mod state;
mod stream_room;
mod warm;

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, InstanceAllocationStrategy};

pub use artifacts::{ArtifactSet, ArtifactStats, DEFAULT_MAX_METADATA_JSON_BYTES, gguf, parsed_metadata_bytes};
pub use bindings::{IoData, IoTensor, RunError, element_count};
pub use caller::{
    CallerLink, Cancel, CancelOnDrop, Chunk, ChunkSink, ChunkTimes, QueuedChunk, chunk_channel, default_room,
};
pub use component::{FunctionImage, FunctionLimits, Precompiled};
pub use component_error::ComponentError;
pub use invoke::{InvocationContext, InvocationOutput, InvokeError};
pub use pool::PoolStatus;
pub use serving::{Pending, SERVING_SECTION, ServedError, ServingLink, ServingQueue, declares_serving};
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
    /// Most core-module instances one component may create (a deploy over it is refused).
    pub max_core_instances_per_component: u32,
    /// Most linear memories one component may define.
    pub max_memories_per_component: u32,
    /// Most tables one component may define.
    pub max_tables_per_component: u32,
    /// Warm instances one tenant may keep, over all its functions.
    pub tenant_max_warm_instances: usize,
    /// Bytes of linear memory one tenant's warm instances may hold together (an
    /// instance that would take it past this is dropped when its invocation ends).
    pub tenant_max_warm_memory_bytes: usize,
    /// A warm instance unused for this long is released with its slots.
    pub warm_idle_timeout: Duration,
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

/// Default of [`EngineConfig::max_core_instances_per_component`]: a Rust function has
/// 3, a Python one (componentize-py) 14.
pub const DEFAULT_MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 32;
/// Default of [`EngineConfig::max_memories_per_component`]: Rust and Python functions
/// have one; two leaves room for a composition of two.
pub const DEFAULT_MAX_MEMORIES_PER_COMPONENT: u32 = 2;
/// Default of [`EngineConfig::max_tables_per_component`]: Rust and Python functions have 2.
pub const DEFAULT_MAX_TABLES_PER_COMPONENT: u32 = 8;
/// Default of [`EngineConfig::tenant_max_warm_instances`]: a quarter of the warm
/// instances the default engine keeps (64).
pub const DEFAULT_TENANT_MAX_WARM_INSTANCES: usize = 16;
/// Default of [`EngineConfig::tenant_max_warm_memory_bytes`]: 64 MiB.
pub const DEFAULT_TENANT_MAX_WARM_MEMORY_BYTES: usize = 64 << 20;
/// Default of [`EngineConfig::warm_idle_timeout`].
pub const DEFAULT_WARM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

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
            max_core_instances_per_component: DEFAULT_MAX_CORE_INSTANCES_PER_COMPONENT,
            max_memories_per_component: DEFAULT_MAX_MEMORIES_PER_COMPONENT,
            max_tables_per_component: DEFAULT_MAX_TABLES_PER_COMPONENT,
            tenant_max_warm_instances: DEFAULT_TENANT_MAX_WARM_INSTANCES,
            tenant_max_warm_memory_bytes: DEFAULT_TENANT_MAX_WARM_MEMORY_BYTES,
            warm_idle_timeout: DEFAULT_WARM_IDLE_TIMEOUT,
        }
    }
}

/// The wasmtime engine, the linker with the host API, and the epoch clock.
pub struct Engine {
    wasmtime: wasmtime::Engine,
    linker: Linker<InvocationState>,
    config: EngineConfig,
    clock: Arc<epoch::EpochClock>,
    /// Warm instances kept by all function images, engine-wide and per tenant.
    warm: Arc<warm::WarmLedger>,
    /// Dropped with the engine, which stops the sweeper of idle warm instances.
    _stop_sweeper: std::sync::mpsc::Sender<()>,
    /// The instance pool's slots.
    capacity: pool::Capacity,
}

impl Engine {
    /// Configures wasmtime and starts the epoch clock.
    pub fn new(config: EngineConfig) -> anyhow::Result<Engine> {
        let capacity = pool::Capacity::of(&config);
        let pool = capacity.pooling(&config);
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
        // Background threads (a batch tenant's requests, the control plane) stop while
        // this engine's latency work claims every core, as its batch guests do.
        let way = Arc::downgrade(clock.give_way());
        crate::background::pause_while(move || way.upgrade().is_some_and(|way| way.claims_every_core()));
        // Half the pool may be warm; the other half is for invocations in flight.
        let warm = warm::WarmLedger::new(
            config.max_instances as usize / 2,
            config.tenant_max_warm_instances,
            config.tenant_max_warm_memory_bytes,
            config.warm_idle_timeout,
        );
        let (stop_sweeper, stop) = std::sync::mpsc::channel();
        warm.sweep(stop)?;
        Ok(Engine { wasmtime, linker, config, clock, warm, _stop_sweeper: stop_sweeper, capacity })
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
        // The host API version too: a component compiled by a host that did not yet
        // rename its retired imports is compiled again from its binary.
        format!("wasmtime-{}-api{}-{:016x}", env!("CARGO_PKG_VERSION"), sluice_host_api::version::CURRENT, h.finish())
    }

    /// Times batch-class guests gave their core way at an epoch tick, since start.
    pub fn batch_guest_yields(&self) -> u64 {
        self.clock.give_way().yields()
    }

    /// Times batch-class guests paused while latency work needed their core, since start.
    pub fn batch_guest_pauses(&self) -> u64 {
        self.clock.give_way().pauses()
    }

    /// The instance pool's slots in use and the warm instances kept.
    pub fn pool_status(&self) -> PoolStatus {
        let used = self.wasmtime.pooling_allocator_metrics();
        let c = &self.config;
        PoolStatus {
            component_instances: used.as_ref().map_or(0, |m| m.component_instances()),
            component_instances_capacity: self.capacity.component_instances,
            core_instances: used.as_ref().map_or(0, |m| m.core_instances()),
            core_instances_capacity: self.capacity.core_instances,
            memories: used.as_ref().map_or(0, |m| m.memories() as u64),
            memories_capacity: self.capacity.memories,
            tables: used.as_ref().map_or(0, |m| m.tables() as u64),
            tables_capacity: self.capacity.tables,
            warm_instances: self.warm.total(),
            warm_capacity: c.max_instances as usize / 2,
            warm_memory_bytes: self.warm.total_bytes() as u64,
            tenant_max_warm_instances: c.tenant_max_warm_instances,
            tenant_max_warm_memory_bytes: c.tenant_max_warm_memory_bytes as u64,
            warm_idle_timeout_ms: c.warm_idle_timeout.as_millis() as u64,
            max_core_instances_per_component: c.max_core_instances_per_component,
            max_memories_per_component: c.max_memories_per_component,
            max_tables_per_component: c.max_tables_per_component,
        }
    }

    /// Warm instances `tenant` keeps now, and the bytes of linear memory they hold.
    pub fn warm_instances_of(&self, tenant: &str) -> (usize, usize) {
        self.warm.of_tenant(tenant)
    }

    /// Releases the warm instances unused for the idle time at `now`; how many. (A
    /// sweeper thread does this on its own; tests call it with their own clock.)
    pub fn expire_idle_warm(&self, now: std::time::Instant) -> usize {
        self.warm.expire_idle(now)
    }

    pub(crate) fn wasmtime(&self) -> &wasmtime::Engine {
        &self.wasmtime
    }

    pub(crate) fn linker(&self) -> &Linker<InvocationState> {
        &self.linker
    }

    /// Compiles a component from its binary, checking that it is one.
    pub fn compile(&self, wasm: &[u8]) -> Result<Component, ComponentError> {
        Ok(component::compile(self, wasm)?.0)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.clock.stop();
    }
}
