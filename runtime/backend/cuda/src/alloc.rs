//! The caching allocator: device memory for [`CudaBuffer`]s without a `cuMemAlloc` per op.
//!
//! Requests are rounded up to a bucket size ([`bucket_size`]: 512-byte granularity for
//! small requests, 16 buckets per power of two above, so at most 1/16 is wasted). A freed
//! block goes onto the free list of its (stream, bucket) and is handed to the next request
//! of the same bucket on the same stream. That is safe without events because the work
//! of one stream runs in order: any kernel still reading the old buffer was queued before
//! the kernel that will write the new one. When `cuMemAlloc` runs out of memory the cache
//! is released (which synchronizes the device) and the allocation retried once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, result};

use crate::CudaError;

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
    /// Largest `in_use` seen.
    pub peak_in_use: u64,
    /// Calls to `cuMemAlloc` so far.
    pub device_allocs: u64,
    /// Requests served from the cache.
    pub cache_hits: u64,
}

#[derive(Default)]
struct PoolState {
    free: HashMap<(usize, usize), Vec<CUdeviceptr>>,
    stats: MemoryStats,
}

/// The per-device pool. Buffers keep it (and so the context) alive.
pub(crate) struct Pool {
    ctx: Arc<CudaContext>,
    state: Mutex<PoolState>,
}

impl Pool {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Arc<Pool> {
        Arc::new(Pool { ctx, state: Mutex::new(PoolState::default()) })
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.lock().stats
    }

    /// A buffer of at least `bytes` bytes for work on `stream`, contents undefined.
    pub(crate) fn alloc(self: &Arc<Self>, stream: usize, bytes: usize) -> Result<CudaBuffer, CudaError> {
        let size = bucket_size(bytes);
        let ptr = if size == 0 { 0 } else { self.block(stream, size)? };
        Ok(CudaBuffer(Arc::new(Inner { ptr, bytes, size, stream, pool: self.clone() })))
    }

    fn block(&self, stream: usize, size: usize) -> Result<CUdeviceptr, CudaError> {
        {
            let mut st = self.lock();
            if let Some(ptr) = st.free.get_mut(&(stream, size)).and_then(Vec::pop) {
                st.stats.cached -= size as u64;
                st.stats.cache_hits += 1;
                add_in_use(&mut st.stats, size);
                return Ok(ptr);
            }
        }
        self.ctx.bind_to_thread().map_err(|e| CudaError::driver("binding the context", e))?;
        // SAFETY: a plain allocation in the bound context.
        let ptr = match unsafe { result::malloc_sync(size) } {
            Ok(p) => p,
            Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                let released = self.release_cached()?;
                tracing::debug!(released, size, "cuda allocator: out of memory, cache released");
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

    /// Frees every cached block (`cuMemFree` waits for the device); returns the bytes freed.
    pub(crate) fn release_cached(&self) -> Result<u64, CudaError> {
        let blocks: Vec<(CUdeviceptr, u64)> = {
            let mut st = self.lock();
            st.stats.cached = 0;
            st.free.drain().flat_map(|((_, size), v)| v.into_iter().map(move |p| (p, size as u64))).collect()
        };
        if blocks.is_empty() {
            return Ok(0);
        }
        self.ctx.bind_to_thread().map_err(|e| CudaError::driver("binding the context", e))?;
        let mut freed = 0u64;
        for (ptr, size) in blocks {
            // SAFETY: cached blocks belong to no buffer; stream order was kept by the
            // caller's work and cuMemFree synchronizes.
            unsafe { result::free_sync(ptr) }.map_err(|e| CudaError::driver("freeing cached memory", e))?;
            freed += size;
        }
        Ok(freed)
    }

    fn give_back(&self, stream: usize, size: usize, ptr: CUdeviceptr) {
        let mut st = self.lock();
        st.stats.in_use -= size as u64;
        st.stats.cached += size as u64;
        st.free.entry((stream, size)).or_default().push(ptr);
    }
}

fn add_in_use(stats: &mut MemoryStats, size: usize) {
    stats.in_use += size as u64;
    stats.peak_in_use = stats.peak_in_use.max(stats.in_use);
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Err(e) = self.release_cached() {
            tracing::warn!(error = %e, "cuda allocator: freeing the cache failed");
        }
    }
}

struct Inner {
    ptr: CUdeviceptr,
    /// Requested size.
    bytes: usize,
    /// Block (bucket) size.
    size: usize,
    stream: usize,
    pool: Arc<Pool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.size != 0 {
            self.pool.give_back(self.stream, self.size, self.ptr);
        }
    }
}

/// Device memory holding one tensor's elements. Cloning shares it; the block goes back to
/// the device's pool when the last clone is dropped. Buffers are never written after the
/// op that produced them, so sharing is safe.
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

    pub(crate) fn belongs_to(&self, pool: &Arc<Pool>) -> bool {
        Arc::ptr_eq(&self.0.pool, pool)
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
}
