//! The caching allocator: device memory for [`CudaBuffer`]s without a `cuMemAlloc` per op.
//!
//! Requests are rounded up to a bucket size ([`bucket_size`]: 512-byte granularity for
//! small requests, 16 buckets per power of two above, so at most 1/16 is wasted). A freed
//! block goes onto the free list of its (stream, bucket) and is handed to the next request
//! of the same bucket on the same stream. That is safe without events because the work
//! of one stream runs in order: any kernel still reading the old buffer was queued before
//! the kernel that will write the new one. When `cuMemAlloc` runs out of memory the cache
//! is released (which synchronizes the device) and the allocation retried once.
//!
//! With an SM partition (see [`crate::partition`]) a buffer may also be read on other
//! lanes' streams. Each buffer keeps a bitmask of the streams that used it; a block that
//! another stream used is parked at drop with an event recorded on each such stream and
//! only returns to its free list once those events completed (`PendingFrees`). The pool
//! also owns the device's streams (`Lanes`), so the green contexts live as long as any
//! buffer does.
//!
//! When the device is lost (a sticky error; [`crate::CudaDevice::recover`]) the pool is
//! marked lost before the context is reset: its blocks, events and streams died with the
//! context, and their handles may be reused by the driver for the new one, so from then
//! on the pool hands nothing back to the driver (no free, no event, no stream destroy).

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, result};

use crate::CudaError;
use crate::fault::Fault;
use crate::lanes::{Event, Lanes};
use crate::staging::Staged;

/// Smallest block and rounding granularity of small requests.
pub const MIN_BLOCK: usize = 512;

/// The size a request of `bytes` is rounded up to (0 stays 0).
pub fn bucket_size(bytes: usize) -> usize {
    if bytes == 0 {
        return 0;
    }
    if bytes <= 16 * MIN_BLOCK {
        return bytes.div_ceil(MIN_BLOCK) * MIN_BLOCK;
    }
    // 16 buckets per octave: round up to a multiple of 2^(floor(log2(bytes)) - 4).
    let step = 1usize << (usize::BITS - 1 - bytes.leading_zeros() - 4);
    bytes.div_ceil(step) * step
}

/// What the allocator holds, in bytes (rounded block sizes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Held by live buffers.
    pub in_use: u64,
    /// Free blocks kept for reuse.
    pub cached: u64,
    /// Freed blocks waiting for work of another lane's stream before they can be reused.
    pub pending: u64,
    /// Largest `in_use` seen.
    pub peak_in_use: u64,
    /// Calls to `cuMemAlloc` so far.
    pub device_allocs: u64,
    /// Requests served from the cache.
    pub cache_hits: u64,
}

/// Which stream slot produced a buffer (and owns its block), and as which unit of work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Producer {
    pub(crate) slot: u8,
    pub(crate) seq: u64,
}

/// A freed block whose uses on other streams may still be running.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parked<E> {
    pub(crate) ptr: CUdeviceptr,
    pub(crate) size: usize,
    /// The stream slot whose free list takes the block back.
    pub(crate) home: u8,
    /// An event recorded at drop time on every other slot that used the block.
    pub(crate) events: Vec<(u8, E)>,
}

/// Blocks parked until events complete (generic over the event type for tests).
#[derive(Debug)]
pub(crate) struct PendingFrees<E> {
    entries: Vec<Parked<E>>,
}

impl<E> Default for PendingFrees<E> {
    fn default() -> Self {
        PendingFrees { entries: Vec::new() }
    }
}

impl<E: Copy> PendingFrees<E> {
    pub(crate) fn park(&mut self, p: Parked<E>) {
        self.entries.push(p);
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes and returns the blocks all of whose events are `done`.
    pub(crate) fn reclaim(&mut self, mut done: impl FnMut(E) -> bool) -> Vec<Parked<E>> {
        let mut ready = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            if self.entries[i].events.iter().all(|&(_, e)| done(e)) {
                ready.push(self.entries.swap_remove(i));
            } else {
                i += 1;
            }
        }
        ready
    }

    /// Removes and returns every block.
    pub(crate) fn drain(&mut self) -> Vec<Parked<E>> {
        std::mem::take(&mut self.entries)
    }
}

/// The slots set in `used` other than `home`.
pub(crate) fn other_slots(used: u8, home: u8) -> impl Iterator<Item = usize> {
    let others = used & !(1u8 << home);
    (0..8usize).filter(move |i| others & (1 << i) != 0)
}

/// Parked blocks beyond which a drop tries to reclaim at once.
const RECLAIM_AT: usize = 256;

#[derive(Default)]
struct PoolState {
    free: HashMap<(u8, usize), Vec<CUdeviceptr>>,
    pending: PendingFrees<Event>,
    stats: MemoryStats,
}

/// The per-device pool, which also owns the device's streams. Buffers keep it (and so
/// the contexts) alive.
pub(crate) struct Pool {
    ctx: Arc<CudaContext>,
    state: Mutex<PoolState>,
    /// Dropped with the pool unless the device was lost (then its handles are dead).
    pub(crate) lanes: ManuallyDrop<Lanes>,
    lost: AtomicBool,
}

impl Pool {
    pub(crate) fn new(ctx: Arc<CudaContext>, lanes: Lanes) -> Arc<Pool> {
        Arc::new(Pool {
            ctx,
            state: Mutex::new(PoolState::default()),
            lanes: ManuallyDrop::new(lanes),
            lost: AtomicBool::new(false),
        })
    }

    /// Marks the device lost: from now on nothing of the pool goes back to the driver.
    pub(crate) fn mark_lost(&self) {
        self.lost.store(true, Ordering::Release);
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.lock().stats
    }

    /// Restarts the peak from what is in use now; returns the stats before.
    pub(crate) fn reset_peak(&self) -> MemoryStats {
        let mut st = self.lock();
        let before = st.stats;
        st.stats.peak_in_use = st.stats.in_use;
        before
    }

    /// A buffer of at least `bytes` bytes for work on `producer.slot`'s stream, contents
    /// undefined, produced by unit `producer.seq` of that stream.
    pub(crate) fn alloc(self: &Arc<Self>, producer: Producer, bytes: usize) -> Result<CudaBuffer, CudaError> {
        if self.is_lost() {
            return Err(CudaError::Lost("allocating on a device that was lost and reset".into()));
        }
        let size = bucket_size(bytes);
        let ptr = if size == 0 { 0 } else { self.block(producer.slot, size)? };
        Ok(CudaBuffer(Arc::new(Inner {
            ptr,
            bytes,
            size,
            producer,
            event: OnceLock::new(),
            used: AtomicU8::new(1 << producer.slot),
            faults: Mutex::default(),
            staged: OnceLock::new(),
            pool: self.clone(),
        })))
    }

    fn take_free(&self, slot: u8, size: usize) -> Option<CUdeviceptr> {
        let mut st = self.lock();
        let ptr = st.free.get_mut(&(slot, size)).and_then(Vec::pop)?;
        st.stats.cached -= size as u64;
        st.stats.cache_hits += 1;
        add_in_use(&mut st.stats, size);
        Some(ptr)
    }

    fn block(&self, slot: u8, size: usize) -> Result<CUdeviceptr, CudaError> {
        if let Some(ptr) = self.take_free(slot, size) {
            return Ok(ptr);
        }
        if self.reclaim() > 0
            && let Some(ptr) = self.take_free(slot, size)
        {
            return Ok(ptr);
        }
        self.ctx.bind_to_thread().map_err(|e| CudaError::driver("binding the context", e))?;
        // SAFETY: a plain allocation in the bound context.
        let ptr = match unsafe { result::malloc_sync(size) } {
            Ok(p) => p,
            Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                let released = self.release_cached()?;
                tracing::debug!(released, size, "cuda allocator: out of memory, cache released");
                self.ctx.bind_to_thread().map_err(|e| CudaError::driver("binding the context", e))?;
                // SAFETY: as above.
                unsafe { result::malloc_sync(size) }.map_err(|e| {
                    let st = self.stats();
                    let what = format!("allocating {size} bytes ({} bytes in use by live tensors)", st.in_use);
                    CudaError::driver(&what, e)
                })?
            }
            Err(e) => return Err(CudaError::driver(&format!("allocating {size} bytes"), e)),
        };
        let mut st = self.lock();
        st.stats.device_allocs += 1;
        add_in_use(&mut st.stats, size);
        Ok(ptr)
    }

    /// Moves parked blocks whose events completed to their free lists; returns how many.
    fn reclaim(&self) -> usize {
        let ready = {
            let mut st = self.lock();
            if st.pending.is_empty() {
                return 0;
            }
            let ready = st.pending.reclaim(Lanes::done);
            for p in &ready {
                st.stats.pending -= p.size as u64;
                st.stats.cached += p.size as u64;
                st.free.entry((p.home, p.size)).or_default().push(p.ptr);
            }
            ready
        };
        for p in &ready {
            for &(slot, e) in &p.events {
                self.lanes.recycle(slot as usize, e);
            }
        }
        ready.len()
    }

    /// Frees every cached block, waiting for parked ones (`cuMemFree` waits for the
    /// device); returns the bytes freed.
    pub(crate) fn release_cached(&self) -> Result<u64, CudaError> {
        if self.is_lost() {
            return Ok(0);
        }
        let (mut blocks, parked): (Vec<(CUdeviceptr, u64)>, Vec<Parked<Event>>) = {
            let mut st = self.lock();
            st.stats.cached = 0;
            st.stats.pending = 0;
            let blocks =
                st.free.drain().flat_map(|((_, size), v)| v.into_iter().map(move |p| (p, size as u64))).collect();
            (blocks, st.pending.drain())
        };
        for p in parked {
            for &(slot, e) in &p.events {
                // SAFETY: a live event recorded on `slot`'s stream.
                if let Err(err) = unsafe { result::event::synchronize(e.0) } {
                    tracing::warn!(error = ?err, "cuda allocator: waiting for a parked block failed");
                }
                self.lanes.recycle(slot as usize, e);
            }
            blocks.push((p.ptr, p.size as u64));
        }
        if blocks.is_empty() {
            return Ok(0);
        }
        self.ctx.bind_to_thread().map_err(|e| CudaError::driver("binding the context", e))?;
        let mut freed = 0u64;
        for (ptr, size) in blocks {
            // SAFETY: cached blocks belong to no buffer; stream order was kept by the
            // caller's work (parked blocks were waited for above) and cuMemFree
            // synchronizes.
            unsafe { result::free_sync(ptr) }.map_err(|e| CudaError::driver("freeing cached memory", e))?;
            freed += size;
        }
        Ok(freed)
    }

    /// Takes back the block of a dropped buffer that only `home`'s stream used.
    fn give_back(&self, home: u8, size: usize, ptr: CUdeviceptr) {
        let mut st = self.lock();
        st.stats.in_use -= size as u64;
        st.stats.cached += size as u64;
        st.free.entry((home, size)).or_default().push(ptr);
    }

    /// Takes back the block of a dropped buffer that other streams used too: records an
    /// event on each of them and parks the block until those complete.
    fn park(&self, home: u8, size: usize, ptr: CUdeviceptr, used: u8) {
        let mut events = Vec::new();
        for s in other_slots(used, home) {
            match self.lanes.record(s) {
                Ok(e) => events.push((s as u8, e)),
                Err(err) => {
                    // Without an event, wait for that stream now; if even that fails the
                    // block may still be in use: leak it rather than hand it out.
                    if let Err(sync) = self.lanes.slot(s).stream.synchronize() {
                        tracing::warn!(record = %err, sync = ?sync, size, "cuda allocator: leaking a block");
                        for (slot, e) in events {
                            self.lanes.recycle(slot as usize, e);
                        }
                        self.lock().stats.in_use -= size as u64;
                        return;
                    }
                }
            }
        }
        let crowded = {
            let mut st = self.lock();
            st.stats.in_use -= size as u64;
            st.stats.pending += size as u64;
            st.pending.park(Parked { ptr, size, home, events });
            st.pending.len() > RECLAIM_AT
        };
        if crowded {
            self.reclaim();
        }
    }
}

fn add_in_use(stats: &mut MemoryStats, size: usize) {
    stats.in_use += size as u64;
    stats.peak_in_use = stats.peak_in_use.max(stats.in_use);
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.is_lost() {
            // The streams, events and green contexts died with the context: leak the
            // handles rather than destroy whatever the driver gave their values to since.
            return;
        }
        if let Err(e) = self.release_cached() {
            tracing::warn!(error = %e, "cuda allocator: freeing the cache failed");
        }
        // SAFETY: dropped once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.lanes) };
    }
}

struct Inner {
    ptr: CUdeviceptr,
    /// Requested size.
    bytes: usize,
    /// Block (bucket) size.
    size: usize,
    /// The stream slot that produced the contents and owns the block.
    producer: Producer,
    /// For uploads on a partitioned device: an event recorded right after the copy.
    event: OnceLock<Event>,
    /// Bitmask of the stream slots that used the buffer.
    used: AtomicU8,
    /// The fault records of the launches this buffer was computed from (`crate::fault`),
    /// read when it is downloaded.
    faults: Mutex<Vec<Fault>>,
    /// For an upload made by the stager (`crate::staging`): its copy.
    staged: OnceLock<Arc<Staged>>,
    pool: Arc<Pool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let home = self.producer.slot;
        if let Some(&e) = self.event.get() {
            self.pool.lanes.recycle(home as usize, e);
        }
        if self.size == 0 || self.pool.is_lost() {
            return;
        }
        if let Some(staged) = self.staged.get() {
            crate::staging::release(&self.pool.lanes, staged);
        }
        let used = *self.used.get_mut();
        if used & !(1u8 << home) == 0 {
            self.pool.give_back(home, self.size, self.ptr);
        } else {
            self.pool.park(home, self.size, self.ptr, used);
        }
    }
}

/// Device memory holding one tensor's elements. Cloning shares it; the block goes back to
/// the device's pool when the last clone is dropped. Buffers are never written after the
/// op that produced them, so sharing is safe, except by `write-rows` into a KV cache the
/// host made for one invocation (`CudaDevice::copy_into`), which its clones then show.
#[derive(Clone)]
pub struct CudaBuffer(Arc<Inner>);

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBuffer")
            .field("ptr", &format_args!("{:#x}", self.0.ptr))
            .field("bytes", &self.0.bytes)
            .finish()
    }
}

impl CudaBuffer {
    /// Size in bytes as requested (the block may be larger).
    pub fn byte_len(&self) -> usize {
        self.0.bytes
    }

    /// The raw device pointer (0 for an empty buffer).
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.0.ptr
    }

    /// Adds fault records to the buffer's lineage (once each).
    pub(crate) fn add_faults<'a>(&self, faults: impl IntoIterator<Item = &'a Fault>) {
        let mut mine = self.0.faults.lock().unwrap_or_else(|p| p.into_inner());
        for f in faults {
            if !mine.iter().any(|m| m.record.device_ptr() == f.record.device_ptr()) {
                mine.push(f.clone());
            }
        }
    }

    /// The fault records of the buffer's lineage.
    pub(crate) fn faults(&self) -> Vec<Fault> {
        self.0.faults.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn belongs_to(&self, pool: &Arc<Pool>) -> bool {
        Arc::ptr_eq(&self.0.pool, pool)
    }

    pub(crate) fn producer(&self) -> Producer {
        self.0.producer
    }

    /// The event recorded after the upload that produced this buffer, if any.
    pub(crate) fn upload_event(&self) -> Option<Event> {
        self.0.event.get().copied()
    }

    /// Attaches the event recorded right after this buffer's upload.
    pub(crate) fn set_upload_event(&self, e: Event) {
        if let Err(e) = self.0.event.set(e) {
            // Never happens (set once, right after the upload); do not leak the event.
            self.0.pool.lanes.recycle(self.0.producer.slot as usize, e);
        }
    }

    /// Marks the buffer as filled by the stager's copy `staged`.
    pub(crate) fn set_staged(&self, staged: Arc<Staged>) {
        let _ = self.0.staged.set(staged);
    }

    /// The stager's copy that fills this buffer, if any.
    pub(crate) fn staged(&self) -> Option<&Arc<Staged>> {
        self.0.staged.get()
    }

    /// Whether this buffer is a large upload whose copy the stager has not queued yet:
    /// work reading it would wait on the launching thread until it has (see
    /// [`crate::staging`]). Asks without waiting.
    pub fn staging_pending(&self) -> bool {
        self.0.staged.get().is_some_and(|s| !s.is_queued())
    }

    /// Notes that work on stream slot `slot` reads this buffer.
    pub(crate) fn note_use(&self, slot: usize) {
        let bit = 1u8 << slot;
        if self.0.used.load(Ordering::Relaxed) & bit == 0 {
            self.0.used.fetch_or(bit, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_up_with_bounded_waste() {
        assert_eq!(bucket_size(0), 0);
        assert_eq!(bucket_size(1), 512);
        assert_eq!(bucket_size(512), 512);
        assert_eq!(bucket_size(513), 1024);
        assert_eq!(bucket_size(8192), 8192);
        assert_eq!(bucket_size(8193), 8704);
        assert_eq!(bucket_size(1 << 20), 1 << 20);
        assert_eq!(bucket_size((1 << 20) + 1), (1 << 20) + (1 << 16));
        let mut prev = 0;
        for n in (1..5_000_000usize).step_by(997) {
            let b = bucket_size(n);
            assert!(b >= n && b.is_multiple_of(MIN_BLOCK), "{n} -> {b}");
            assert!((b - n) as f64 <= (n as f64 / 16.0).max(MIN_BLOCK as f64), "{n} -> {b}");
            assert!(b >= prev, "buckets are monotonic");
            prev = b;
        }
    }

    #[test]
    fn few_distinct_buckets() {
        // A workload with many sizes maps onto few free lists.
        let mut set = std::collections::BTreeSet::new();
        for n in (1..(1usize << 24)).step_by(4099) {
            set.insert(bucket_size(n));
        }
        assert!(set.len() < 16 * 24 + 16, "{} buckets", set.len());
    }

    #[test]
    fn other_slots_of_a_use_mask() {
        assert_eq!(other_slots(0b001, 0).count(), 0);
        assert_eq!(other_slots(0b101, 0).collect::<Vec<_>>(), vec![2]);
        assert_eq!(other_slots(0b111, 1).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(other_slots(0b010, 0).collect::<Vec<_>>(), vec![1], "home need not be set");
    }

    #[test]
    fn parked_blocks_return_only_when_every_event_completed() {
        let mut p = PendingFrees::<u32>::default();
        assert!(p.is_empty());
        p.park(Parked { ptr: 0x1000, size: 512, home: 0, events: vec![(1, 10), (2, 20)] });
        p.park(Parked { ptr: 0x2000, size: 1024, home: 1, events: vec![(0, 30)] });
        p.park(Parked { ptr: 0x3000, size: 512, home: 2, events: vec![(1, 11)] });
        assert_eq!(p.len(), 3);
        // Nothing done yet.
        assert!(p.reclaim(|_| false).is_empty());
        // Event 10 done but 20 not: block 0x1000 stays; 0x3000 waits on 11.
        let done = [10u32, 30];
        let ready = p.reclaim(|e| done.contains(&e));
        assert_eq!(ready.len(), 1);
        assert_eq!((ready[0].ptr, ready[0].home, ready[0].size), (0x2000, 1, 1024));
        assert_eq!(p.len(), 2);
        let ready = p.reclaim(|e| e != 11);
        assert_eq!(ready.iter().map(|b| b.ptr).collect::<Vec<_>>(), vec![0x1000]);
        assert_eq!(ready[0].events, vec![(1, 10), (2, 20)], "the events come back for recycling");
        let rest = p.drain();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].ptr, 0x3000);
        assert!(p.is_empty());
    }
}
