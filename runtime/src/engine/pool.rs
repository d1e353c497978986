//! The instance pool: wasmtime's pooling allocator sized so that warm instances can
//! never take the slots a fresh instance needs, and its occupancy for the status.
//!
//! Every component is held to per-component limits at deploy (core instances,
//! memories, tables: [`super::footprint`]), so the pool has room for
//! `max_instances` instances of the largest allowed component. The engine keeps at
//! most half of `max_instances` warm (and each tenant at most
//! [`super::EngineConfig::tenant_max_warm_instances`] of them, holding at most
//! [`super::EngineConfig::tenant_max_warm_memory_bytes`]), and the platform admits
//! at most half of them in flight, so a cold instantiation always finds its slots.

use wasmtime::PoolingAllocationConfig;

use super::EngineConfig;

/// How many of each kind of slot the pool has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Capacity {
    pub component_instances: u32,
    pub core_instances: u32,
    pub memories: u32,
    pub tables: u32,
}

impl Capacity {
    /// Room for `max_instances` instances of the largest component the limits allow.
    pub fn of(config: &EngineConfig) -> Capacity {
        let n = config.max_instances;
        Capacity {
            component_instances: n,
            core_instances: n.saturating_mul(config.max_core_instances_per_component),
            memories: n.saturating_mul(config.max_memories_per_component),
            tables: n.saturating_mul(config.max_tables_per_component),
        }
    }

    /// The pooling allocator's configuration.
    pub fn pooling(&self, config: &EngineConfig) -> PoolingAllocationConfig {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(self.component_instances)
            .total_core_instances(self.core_instances)
            .total_memories(self.memories)
            .total_tables(self.tables)
            .total_stacks(self.component_instances)
            .max_memory_size(config.max_memory_bytes)
            // The backstop of the deploy-time check (`footprint`).
            .max_core_instances_per_component(config.max_core_instances_per_component)
            .max_memories_per_component(config.max_memories_per_component)
            .max_tables_per_component(config.max_tables_per_component);
        pool
    }
}

/// The instance pool's slots in use and their capacity, and the warm instances kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStatus {
    /// Component instances alive (in flight and warm) and the pool's capacity.
    pub component_instances: u64,
    pub component_instances_capacity: u32,
    /// Core-module instances alive and capacity.
    pub core_instances: u64,
    pub core_instances_capacity: u32,
    /// Linear memories alive and capacity.
    pub memories: u64,
    pub memories_capacity: u32,
    /// Tables alive and capacity.
    pub tables: u64,
    pub tables_capacity: u32,
    /// Warm instances kept, and most the engine keeps.
    pub warm_instances: usize,
    pub warm_capacity: usize,
    /// Bytes of linear memory the warm instances hold.
    pub warm_memory_bytes: u64,
    /// Most warm instances one tenant keeps, and most bytes of linear memory they hold.
    pub tenant_max_warm_instances: usize,
    pub tenant_max_warm_memory_bytes: u64,
    /// How long a warm instance stays unused before it is released.
    pub warm_idle_timeout_ms: u64,
    /// The per-component limits checked at deploy.
    pub max_core_instances_per_component: u32,
    pub max_memories_per_component: u32,
    pub max_tables_per_component: u32,
}
