//! A tensor's hold on device memory: the engine holds a [`TensorLease`] per tensor a
//! guest (or an artifact set) owns; creating it reserves the tensor's bytes in a
//! [`MemoryAccount`] and names the tensor, dropping it frees the tensor on the device
//! and returns the reservation.
//!
//! A [`FreeBatch`] gathers the frees of the leases dropped on its thread while it lives
//! into one message per device: an invocation that ends holding thousands of tensors
//! then costs the device's intake one command instead of thousands (each a fraction of
//! a microsecond that every command behind it waits for).

use std::cell::RefCell;
use std::sync::Arc;

use sluice_host_api::{ApiError, TensorMeta};

use super::{DeviceQueue, MemoryAccount, TensorId};

/// Device memory reserved against an account for one tensor; dropping it frees the
/// tensor (once no queued kernel reads it) and returns the reservation.
pub struct TensorLease {
    id: TensorId,
    bytes: u64,
    account: Arc<MemoryAccount>,
    queue: DeviceQueue,
}

impl TensorLease {
    /// Reserves `meta`'s bytes in `account` and in the device's account for a new
    /// tensor on `queue`, or changes nothing and returns the quota error of the
    /// account that is full.
    pub fn reserve(queue: &DeviceQueue, account: &Arc<MemoryAccount>, meta: &TensorMeta) -> Result<Self, ApiError> {
        let bytes = meta.byte_len() as u64;
        account.reserve(bytes)?;
        if let Err(e) = queue.memory().reserve(bytes) {
            account.release(bytes);
            return Err(e);
        }
        Ok(TensorLease { id: queue.new_tensor_id(), bytes, account: account.clone(), queue: queue.clone() })
    }

    /// The tensor this lease holds.
    pub fn id(&self) -> TensorId {
        self.id
    }
}

impl Drop for TensorLease {
    fn drop(&mut self) {
        if !FreeBatch::gather(&self.queue, self.id) {
            self.queue.free(self.id);
        }
        self.account.release(self.bytes);
        self.queue.memory().release(self.bytes);
    }
}

/// Frees gathered for each device.
type Gathered = Vec<(DeviceQueue, Vec<TensorId>)>;

thread_local! {
    /// The frees gathered by this thread's [`FreeBatch`]; `None` when no batch is open.
    static GATHERED: RefCell<Option<Gathered>> = const { RefCell::new(None) };
}

/// While it lives, the leases dropped on this thread send their frees together, in one
/// message per device, when it drops; their accounts are credited at once as always.
/// Open it around dropping many leases at once, never across an `await` or for long:
/// the tensors stay on the device until it drops. A batch opened inside another adds to
/// the outer one.
#[must_use = "the frees are gathered while the batch lives"]
pub struct FreeBatch {
    /// Whether this batch opened the thread's gathering (an inner one did not).
    outermost: bool,
    /// Tied to its thread.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl FreeBatch {
    /// Starts gathering this thread's frees.
    pub fn open() -> FreeBatch {
        let outermost = GATHERED.with_borrow_mut(|g| {
            let outermost = g.is_none();
            g.get_or_insert_with(Vec::new);
            outermost
        });
        FreeBatch { outermost, _not_send: std::marker::PhantomData }
    }

    /// Adds the free of `id` on `queue` to this thread's open batch; false if none is open.
    fn gather(queue: &DeviceQueue, id: TensorId) -> bool {
        GATHERED.with_borrow_mut(|g| {
            let Some(devices) = g else { return false };
            match devices.iter_mut().find(|(q, _)| q.same_queue(queue)) {
                Some((_, ids)) => ids.push(id),
                None => devices.push((queue.clone(), vec![id])),
            }
            true
        })
    }
}

impl Drop for FreeBatch {
    fn drop(&mut self) {
        if !self.outermost {
            return;
        }
        let gathered = GATHERED.with_borrow_mut(Option::take).unwrap_or_default();
        for (queue, ids) in gathered {
            queue.free_many(ids);
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_host_api::DType;

    use super::*;
    use crate::device::CpuDevice;
    use crate::scheduler::{InvocationGuard, PriorityClass, SchedulingInfo};

    fn lease(queue: &DeviceQueue, inv: &InvocationGuard, account: &Arc<MemoryAccount>) -> TensorLease {
        let meta = TensorMeta::new(DType::F32, vec![4]).unwrap();
        let lease = TensorLease::reserve(queue, account, &meta).expect("room");
        queue.upload(inv.id(), lease.id(), meta.clone(), vec![0; 16]);
        // Uploaded before it may be dropped (a tensor freed while still queued stays
        // until its upload ran).
        queue.read_blocking(lease.id(), meta).expect("uploaded");
        lease
    }

    #[test]
    fn a_batch_sends_its_frees_when_it_ends_and_credits_the_accounts_at_once() {
        let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(1)));
        let info = SchedulingInfo { tenant: "t".into(), function: "f".into(), class: PriorityClass::Batch, weight: 1 };
        let inv = queue.begin(info);
        let account = MemoryAccount::new("test", None, None);
        let leases: Vec<_> = (0..100).map(|_| lease(&queue, &inv, &account)).collect();
        assert_eq!(queue.status_blocking().resident_tensors, 100);
        let outer = FreeBatch::open();
        let inner = FreeBatch::open();
        drop(leases);
        drop(inner);
        assert_eq!(account.used(), 0, "credited when the leases dropped");
        assert_eq!(queue.status_blocking().resident_tensors, 100, "no free sent while the batch is open");
        drop(outer);
        assert_eq!(queue.status_blocking().resident_tensors, 0, "all sent when it ends");
        // Without a batch, each lease frees its tensor as it drops.
        drop(lease(&queue, &inv, &account));
        assert_eq!(queue.status_blocking().resident_tensors, 0);
    }
}
