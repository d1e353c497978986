//! Several devices on one machine: each has its own scheduler, and a function
//! version is placed on the least-loaded device that can hold its weights.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use super::DeviceQueue;

/// Why a function could not be placed.
#[derive(Debug, thiserror::Error)]
#[error("no device can hold {needed} bytes of weights (largest free: {largest_free} bytes)")]
pub struct PlacementError {
    pub needed: u64,
    pub largest_free: u64,
}

/// The devices of this process.
pub struct DevicePool {
    queues: Vec<DeviceQueue>,
    /// Weight bytes of the function versions placed on each device.
    placed: Mutex<Vec<u64>>,
}

/// A placement: the device, and the bytes reserved on it until dropped.
pub struct Placement {
    pool: Arc<DevicePool>,
    index: usize,
    bytes: u64,
}

impl Placement {
    /// The chosen device.
    pub fn queue(&self) -> &DeviceQueue {
        &self.pool.queues[self.index]
    }

    /// Its position in the pool.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        self.pool.placed.lock()[self.index] -= self.bytes;
    }
}

impl DevicePool {
    /// A pool of started device queues (at least one).
    pub fn new(queues: Vec<DeviceQueue>) -> Arc<Self> {
        assert!(!queues.is_empty(), "a device pool needs a device");
        let placed = Mutex::new(vec![0; queues.len()]);
        Arc::new(DevicePool { queues, placed })
    }

    /// The devices, in order.
    pub fn queues(&self) -> &[DeviceQueue] {
        &self.queues
    }

    /// Places `weight_bytes` of weights on the least-loaded device with room for
    /// them: the fewest queued kernels and open invocations, then the fewest placed
    /// bytes. A device that does not serve (lost for good, or stopped) is passed over
    /// while another one serves.
    pub fn place(self: &Arc<Self>, weight_bytes: u64) -> Result<Placement, PlacementError> {
        let mut placed = self.placed.lock();
        let mut best: Option<((u64, u64), usize)> = None;
        let mut largest_free = 0;
        let any_serves = self.queues.iter().any(DeviceQueue::serves);
        for (i, q) in self.queues.iter().enumerate() {
            if any_serves && !q.serves() {
                continue;
            }
            let used = placed[i].max(q.resident_bytes());
            let free = q.info().memory_bytes.saturating_sub(used);
            largest_free = largest_free.max(free);
            if free < weight_bytes {
                continue;
            }
            let load = q.shared.published.load.load(Ordering::Relaxed);
            let key = (load, placed[i]);
            if best.is_none_or(|(b, _)| key < b) {
                best = Some((key, i));
            }
        }
        let (_, index) = best.ok_or(PlacementError { needed: weight_bytes, largest_free })?;
        placed[index] += weight_bytes;
        Ok(Placement { pool: self.clone(), index, bytes: weight_bytes })
    }
}
