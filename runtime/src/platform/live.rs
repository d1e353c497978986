//! What the live console shows of one device, as one caller may see it: the kernel
//! records since the caller's last look ([`Platform::live_kernels`]) and a status
//! snapshot ([`Platform::live_status`]): queue depth per class, device time and weight
//! per tenant, preemption latency, the partition, memory against quota per tenant and
//! the latency of each function's recent invocations.
//!
//! The admin sees every tenant. A tenant sees its own records, rows and functions by
//! name and every other tenant's work as `other` (no function, no invocation), so it
//! can see that and how much the device is shared, never by whom; memory and function
//! latencies are its own only.

use serde::Serialize;
use sluice_registry::Principal;

use super::Platform;
use crate::device::{DeviceInfo, PartitionState};
use crate::scheduler::{
    DeviceHealth, DeviceQueue, FEED_BATCH, KernelBatch, KernelRecord, LatencySummary, Policy, PriorityClass,
    TenantStatus,
};

/// What another tenant is called in a tenant's view.
pub const OTHER_TENANT: &str = "other";

/// Kernel records of one device since a watcher's last look.
#[derive(Clone, Debug, Serialize)]
pub struct LiveKernels {
    /// The device's scheduler clock now, in microseconds (the timeline's right edge).
    pub now_us: u64,
    /// Records the watcher missed: they left the device's ring before it read them.
    pub missed: u64,
    pub records: Vec<KernelRecord>,
}

/// A status snapshot of one device for the live console.
#[derive(Clone, Debug, Serialize)]
pub struct LiveStatus {
    pub index: usize,
    pub device: DeviceInfo,
    pub policy: Policy,
    pub partition: PartitionState,
    pub health: DeviceHealth,
    pub now_us: u64,
    pub busy_us: u64,
    pub kernels: u64,
    pub sliced_kernels: u64,
    pub preemptions: u64,
    pub preemption_latency: LatencySummary,
    /// Work items queued per class, every tenant's.
    pub queued: QueueDepth,
    /// One row per tenant and class (others' named `other` in a tenant's view).
    pub tenants: Vec<TenantStatus>,
    /// Device memory against quota, per tenant (a tenant's own only).
    pub memory: Vec<TenantMemory>,
    /// Latency of each function's recent successful invocations (a tenant's own only).
    pub functions: Vec<FunctionLatency>,
}

/// Work items queued per class.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct QueueDepth {
    pub latency: usize,
    pub batch: usize,
}

/// One tenant's device memory.
#[derive(Clone, Debug, Serialize)]
pub struct TenantMemory {
    pub tenant: String,
    pub used_bytes: u64,
    pub quota_bytes: Option<u64>,
}

/// One function's recent latency, admission to result, and for a function that streams
/// its output its recent time to first token (admission to the first chunk) and time per
/// output token (the mean gap between later chunks).
#[derive(Clone, Debug, Serialize)]
pub struct FunctionLatency {
    pub tenant: String,
    pub function: String,
    pub latency: LatencySummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_token: Option<LatencySummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_per_output_token: Option<LatencySummary>,
}

impl Platform {
    /// How many devices the server schedules.
    pub fn devices_count(&self) -> usize {
        self.devices.queues().len()
    }

    /// Device `index`'s scheduler, if there is one.
    pub fn device_queue(&self, index: usize) -> Option<&DeviceQueue> {
        self.devices.queues().get(index)
    }

    /// The records of device `index` from sequence number `since` on, as `viewer`
    /// may see them; `None` for an unknown device.
    pub async fn live_kernels(&self, viewer: &Principal, index: usize, since: u64) -> Option<(LiveKernels, u64)> {
        let queue = self.device_queue(index)?;
        let KernelBatch { mut records, missed, next } = queue.kernels(since, FEED_BATCH).await;
        if let Principal::Tenant(me) = viewer {
            for r in &mut records {
                anonymise(r, me);
            }
        }
        let now_us = queue.config().clock.now().as_micros() as u64;
        Some((LiveKernels { now_us, missed, records }, next))
    }

    /// A status snapshot of device `index` as `viewer` may see it; `None` for an
    /// unknown device.
    pub async fn live_status(&self, viewer: &Principal, index: usize) -> Option<LiveStatus> {
        let queue = self.device_queue(index)?;
        // Shared by every feed and status call: the actor computes it once per interval.
        let d = queue.shared_status().await;
        let own = |tenant: &str| match viewer {
            Principal::Admin => true,
            Principal::Tenant(me) => me == tenant,
        };
        let mut queued = QueueDepth::default();
        for t in &d.tenants {
            match t.class {
                PriorityClass::Latency => queued.latency += t.queued,
                PriorityClass::Batch => queued.batch += t.queued,
            }
        }
        let tenants = d
            .tenants
            .iter()
            .cloned()
            .map(|mut t| {
                if !own(&t.tenant) {
                    t.tenant = OTHER_TENANT.into();
                }
                t
            })
            .collect();
        let memory = self
            .tenant_usage()
            .into_iter()
            .filter(|u| own(&u.tenant))
            .map(|u| TenantMemory {
                tenant: u.tenant,
                used_bytes: u.memory_used_bytes,
                quota_bytes: u.memory_quota_bytes,
            })
            .collect();
        let scope = match viewer {
            Principal::Admin => None,
            Principal::Tenant(me) => Some(me.as_str()),
        };
        let functions = self.metrics.stats.recent_latency(scope);
        Some(LiveStatus {
            index,
            device: d.device.clone(),
            policy: d.policy,
            partition: d.partition.clone(),
            health: d.health.clone(),
            now_us: queue.config().clock.now().as_micros() as u64,
            busy_us: d.busy_us,
            kernels: d.kernels,
            sliced_kernels: d.sliced_kernels,
            preemptions: d.preemptions,
            preemption_latency: d.preemption_latency.clone(),
            queued,
            tenants,
            memory,
            functions,
        })
    }
}

/// Hides whose a record is from tenant `me` unless it is `me`'s (the runtime's own
/// work stays named: it is nobody's).
fn anonymise(record: &mut KernelRecord, me: &str) {
    if &*record.tenant != me && &*record.tenant != crate::scheduler::RUNTIME_TENANT {
        record.tenant = OTHER_TENANT.into();
        record.function = OTHER_TENANT.into();
        record.invocation = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Lane;

    fn record(tenant: &str) -> KernelRecord {
        KernelRecord {
            seq: 1,
            tenant: tenant.into(),
            function: "secret-fn".into(),
            invocation: 9,
            op: "matmul",
            lane: Lane::Whole,
            class: PriorityClass::Batch,
            queued_us: 0,
            start_us: 1,
            end_us: 2,
            sliced: false,
            preempting: false,
        }
    }

    #[test]
    fn others_records_are_anonymised() {
        let mut mine = record("me");
        anonymise(&mut mine, "me");
        assert_eq!(mine, record("me"));
        let mut theirs = record("them");
        anonymise(&mut theirs, "me");
        assert_eq!((&*theirs.tenant, &*theirs.function, theirs.invocation), ("other", "other", 0));
        assert_eq!((theirs.op, theirs.start_us, theirs.end_us), ("matmul", 1, 2), "the timing stays");
        let mut runtime = record(crate::scheduler::RUNTIME_TENANT);
        anonymise(&mut runtime, "me");
        assert_eq!(&*runtime.tenant, crate::scheduler::RUNTIME_TENANT);
    }
}
