//! [`CudaDevice`]: the CUDA contexts, streams, cuBLAS handles, caching allocator and
//! lazily compiled kernel modules of one GPU.
//!
//! Every op is queued on the stream of the device's current [`Lane`] and returns at once;
//! `download` and `synchronize` wait. Without an SM partition every lane is the one
//! primary stream; with one (see [`crate::partition`]) each lane has its own stream,
//! module cache and cuBLAS handle, and work reading buffers of another lane is ordered
//! after their production with stream-side event waits. The lane is device-wide state
//! meant to be set by the one thread that drives the device (the scheduler): work from
//! several threads interleaves on a stream in the order the calls reach it, and callers
//! that need an order impose it.

use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaStream, result};
use sluice_host_api::{MatmulArgs, Op, TensorMeta};

use crate::alloc::{MemoryStats, Pool, Producer};
use crate::module_cache::ModuleCache;
use crate::partition::{Lane, PartitionState, slot_of};
use crate::{CudaBuffer, CudaError, CudaOptions};

mod open;

/// What the device reports about itself, read once at `open`.
#[derive(Clone, Debug)]
struct Info {
    name: String,
    total_memory: u64,
    sm_count: u32,
    cc: (u32, u32),
    driver_version: i32,
}

/// What launches on one stream slot need besides the stream: the modules loaded in its
/// context and a cuBLAS handle bound to its stream.
pub(crate) struct Kit {
    pub(crate) kernels: ModuleCache,
    pub(crate) blas: Mutex<CudaBlas>,
}

/// The resources of the current lane, for one op.
pub(crate) struct Active<'a> {
    pub(crate) ctx: &'a Arc<CudaContext>,
    pub(crate) stream: &'a Arc<CudaStream>,
    pub(crate) kernels: &'a ModuleCache,
    pub(crate) blas: &'a Mutex<CudaBlas>,
    /// SMs the lane's kernels run on.
    pub(crate) sms: u32,
}

impl Active<'_> {
    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread().map_err(|e| CudaError::driver("binding the context", e))
    }
}

/// An open GPU. `Send + Sync`; clone-free (wrap it in an `Arc` to share).
pub struct CudaDevice {
    /// One per stream slot. Declared before `pool`: modules and cuBLAS handles of a green
    /// context are dropped before the pool (which owns the green contexts) can go.
    kits: Vec<Kit>,
    lane: AtomicU8,
    partition: PartitionState,
    pub(crate) allow_tf32: bool,
    /// What the device was opened with (to open it again after a loss).
    pub(crate) opts: CudaOptions,
    /// Copies large uploads through pinned memory (`crate::staging`); started on first use.
    pub(crate) stager: std::sync::OnceLock<crate::staging::Stager>,
    info: Info,
    /// Owns the contexts' streams (and green contexts); buffers keep it alive.
    pub(crate) pool: Arc<Pool>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.pool.lanes.slot(0).ctx.ordinal())
            .field("name", &self.info.name)
            .field("arch", &self.kits[0].kernels.target().arch)
            .field("partition", &self.partition.to_string())
            .field("lane", &self.lane())
            .finish()
    }
}

impl CudaDevice {
    /// The device's name, e.g. "NVIDIA H200".
    pub fn name(&self) -> String {
        self.info.name.clone()
    }

    /// Device memory in bytes.
    pub fn total_memory(&self) -> u64 {
        self.info.total_memory
    }

    /// Streaming multiprocessors of the whole device.
    pub fn sm_count(&self) -> u32 {
        self.info.sm_count
    }

    /// (major, minor) compute capability, e.g. (9, 0).
    pub fn compute_capability(&self) -> (u32, u32) {
        self.info.cc
    }

    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub fn driver_version(&self) -> i32 {
        self.info.driver_version
    }

    /// Whether the SMs are partitioned, and how (or why not).
    pub fn partition(&self) -> &PartitionState {
        &self.partition
    }

    /// Sends every later upload, launch, matmul, memset and download to `lane`'s stream
    /// (the same stream for every lane when there is no partition). Meant to be called by
    /// the thread that drives the device.
    pub fn set_lane(&self, lane: Lane) {
        self.lane.store(lane.index(), Ordering::Relaxed);
    }

    /// The lane set by [`CudaDevice::set_lane`] ([`Lane::Whole`] at first).
    pub fn lane(&self) -> Lane {
        Lane::from_index(self.lane.load(Ordering::Relaxed))
    }

    /// SMs the kernels of `lane` run on (the whole device without a partition).
    pub fn lane_sm_count(&self, lane: Lane) -> u32 {
        self.pool.lanes.slot(self.slot_for(lane)).sms
    }

    /// What the caching allocator holds.
    pub fn memory_stats(&self) -> MemoryStats {
        self.pool.stats()
    }

    /// Returns cached (free) device memory to the driver; waits for the device.
    pub fn release_cached_memory(&self) -> Result<u64, CudaError> {
        self.pool.release_cached()
    }

    /// Compiles (or loads from the disk cache) every kernel module now, instead of on
    /// first use, in every lane's context; returns how many modules each lane has loaded.
    pub fn warm_up(&self) -> Result<usize, CudaError> {
        for kit in &self.kits {
            for m in crate::kernels::Module::ALL {
                kit.kernels.module(m)?;
            }
        }
        Ok(crate::kernels::Module::ALL.len())
    }

    /// Copies little-endian element bytes to a new device buffer (queued on the current
    /// lane's stream; `bytes` may be dropped as soon as this returns).
    pub fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<CudaBuffer, CudaError> {
        if bytes.len() != meta.byte_len() {
            return Err(CudaError::failure(format!(
                "upload of {:?} {} needs {} bytes, got {}",
                meta.shape,
                meta.dtype,
                meta.byte_len(),
                bytes.len()
            )));
        }
        let slot = self.slot();
        self.pool.lanes.begin(slot);
        let buf = self.alloc(bytes.len())?;
        if !bytes.is_empty() {
            let lane = self.active_slot(slot);
            lane.bind()?;
            // SAFETY: `buf` holds at least `bytes.len()` bytes; pageable source memory is
            // staged by the driver before this returns.
            unsafe { result::memcpy_htod_async(buf.device_ptr(), bytes, lane.stream.cu_stream()) }
                .map_err(|e| CudaError::driver("copying to the device", e))?;
            if self.pool.lanes.partitioned_now() {
                // Other lanes wait on exactly this copy, never on later work of this lane.
                buf.set_upload_event(self.pool.lanes.record(slot)?);
            }
        }
        Ok(buf)
    }

    /// Queues `op` on the current lane's stream and returns its output buffer at once.
    /// The launch must have passed [`sluice_host_api::infer`] with these inputs, giving
    /// `out`.
    pub fn launch(
        &self,
        op: &Op,
        inputs: &[(&CudaBuffer, &TensorMeta)],
        out: &TensorMeta,
    ) -> Result<CudaBuffer, CudaError> {
        self.check_inputs(op.name(), inputs)?;
        debug_assert_eq!(
            sluice_host_api::infer(op, &inputs.iter().map(|(_, m)| *m).collect::<Vec<_>>()).as_ref(),
            Ok(out),
            "launch of {op:?} did not pass infer"
        );
        self.prepare(inputs)?;
        let y = crate::ops::launch(self, op, inputs, out)?;
        crate::fault::inherit(&y, inputs);
        Ok(y)
    }

    /// Output rows `rows` of the M axis of `matmul(a, b)` (as `Op::Matmul(*args)` with
    /// output `out`), for every batch: a buffer of shape `[..batch, rows.len(), N]`, `out`'s
    /// shape with M replaced by `rows.len()`. Concatenating the blocks of a partition of
    /// `0..M` along that axis gives the whole product, so the scheduler can slice a big
    /// GEMM into short kernels. Queued on the current lane's stream, like `launch`.
    pub fn matmul_rows(
        &self,
        args: &MatmulArgs,
        a: (&CudaBuffer, &TensorMeta),
        b: (&CudaBuffer, &TensorMeta),
        out: &TensorMeta,
        rows: Range<usize>,
    ) -> Result<CudaBuffer, CudaError> {
        let m = out.shape.get(out.rank().wrapping_sub(2)).copied().unwrap_or(0) as usize;
        if out.rank() < 2 || rows.start > rows.end || rows.end > m {
            return Err(CudaError::failure(format!(
                "rows {rows:?} are out of range for a matmul output {:?}",
                out.shape
            )));
        }
        let inputs = [a, b];
        self.check_inputs("matmul", &inputs)?;
        debug_assert_eq!(
            sluice_host_api::infer(&Op::Matmul(*args), &[a.1, b.1]).as_ref(),
            Ok(out),
            "matmul_rows did not pass infer"
        );
        self.prepare(&inputs)?;
        let y = crate::gemm::matmul_rows(self, args, a, b, out, rows)?;
        crate::fault::inherit(&y, &inputs);
        Ok(y)
    }

    /// Output rows `rows` of `op` as [`sluice_host_api::RowSplit`] defines them: a matmul
    /// goes to [`CudaDevice::matmul_rows`]; a linear computes rows of `x` flattened to
    /// `[M, K]` (a GEMM on an offset into `x`, then the bias/activation kernel) into a
    /// `[rows.len(), N]` buffer. Other ops cannot be computed in rows. Queued on the
    /// current lane's stream, like `launch`.
    pub fn launch_rows(
        &self,
        op: &Op,
        inputs: &[(&CudaBuffer, &TensorMeta)],
        out: &TensorMeta,
        rows: Range<usize>,
    ) -> Result<CudaBuffer, CudaError> {
        let Some(split) = sluice_host_api::RowSplit::of(op, out) else {
            return Err(CudaError::failure(format!("{} cannot be computed in row blocks", op.name())));
        };
        if rows.start > rows.end || rows.end > split.rows {
            return Err(CudaError::failure(format!("rows {rows:?} are out of range for {} rows", split.rows)));
        }
        match (op, inputs) {
            (Op::Matmul(args), &[a, b]) => self.matmul_rows(args, a, b, out, rows),
            (Op::Linear { transpose_w, activation }, &[x, w, ref bias @ ..]) => {
                self.check_inputs(op.name(), inputs)?;
                self.prepare(inputs)?;
                let bias = bias.first().map(|(b, _)| *b);
                let y = crate::ops::fused::linear_rows(self, *transpose_w, *activation, x, w, bias, out, rows)?;
                crate::fault::inherit(&y, inputs);
                Ok(y)
            }
            _ => Err(CudaError::failure(format!("{} got {} input(s)", op.name(), inputs.len()))),
        }
    }

    /// Waits for the work queued so far on the current lane (including the producers of
    /// `buf` on other lanes) and returns the buffer's bytes (`meta.byte_len()`).
    pub fn download(&self, buf: &CudaBuffer, meta: &TensorMeta) -> Result<Vec<u8>, CudaError> {
        let n = meta.byte_len();
        if buf.byte_len() < n {
            return Err(CudaError::failure(format!("download of {n} bytes from a {}-byte buffer", buf.byte_len())));
        }
        if !buf.belongs_to(&self.pool) {
            return Err(CudaError::failure("download of a buffer of another device"));
        }
        let slot = self.slot();
        // The copy finishes before this returns, so the buffer's use mask stays as is.
        let p = buf.producer();
        self.pool.lanes.order_after(slot, p.slot as usize, p.seq, buf.upload_event())?;
        self.after_staged([buf], slot)?;
        let mut out = vec![0u8; n];
        if n > 0 {
            let lane = self.active_slot(slot);
            lane.bind()?;
            // SAFETY: `out` has `n` bytes and stays alive until the synchronize below.
            unsafe { result::memcpy_dtoh_async(&mut out, buf.device_ptr(), lane.stream.cu_stream()) }
                .map_err(|e| CudaError::driver("copying from the device", e))?;
        }
        self.pool.lanes.synchronize(slot)?;
        self.check_faults(buf, slot)?;
        Ok(out)
    }

    /// Reads the fault records of `buf`'s lineage (after the synchronize of a download,
    /// so their kernels ran) and turns a set one into the CPU backend's error.
    fn check_faults(&self, buf: &CudaBuffer, slot: usize) -> Result<(), CudaError> {
        for fault in buf.faults() {
            let lane = self.active_slot(slot);
            lane.bind()?;
            let mut bytes = [0u8; 16];
            // SAFETY: `bytes` has the record's 16 bytes and lives until the synchronize.
            unsafe { result::memcpy_dtoh_async(&mut bytes, fault.record.device_ptr(), lane.stream.cu_stream()) }
                .map_err(|e| CudaError::driver("reading a fault record", e))?;
            self.pool.lanes.synchronize(slot)?;
            if let Some(e) = fault.error(crate::fault::words(&bytes)) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Waits until everything queued on every lane has run; reports a kernel fault of
    /// any earlier op.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        let mut first = Ok(());
        for i in 0..self.pool.lanes.slots().len() {
            if let Err(e) = self.pool.lanes.synchronize(i)
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// Waits until everything queued on `lane`'s stream has run (all of the device
    /// without a partition).
    pub fn synchronize_lane(&self, lane: Lane) -> Result<(), CudaError> {
        self.pool.lanes.synchronize(self.slot_for(lane))
    }

    /// Whether everything queued on `lane`'s stream has run, without waiting.
    pub fn lane_idle(&self, lane: Lane) -> Result<bool, CudaError> {
        self.pool.lanes.is_idle(self.slot_for(lane))
    }

    /// The stream slot of `lane`.
    fn slot_for(&self, lane: Lane) -> usize {
        slot_of(lane, self.pool.lanes.partitioned_now())
    }

    /// The stream slot of the current lane.
    pub(crate) fn slot(&self) -> usize {
        self.slot_for(self.lane())
    }

    fn active_slot(&self, slot: usize) -> Active<'_> {
        let s = self.pool.lanes.slot(slot);
        let kit = &self.kits[slot];
        Active { ctx: &s.ctx, stream: &s.stream, kernels: &kit.kernels, blas: &kit.blas, sms: s.sms }
    }

    /// The current lane's stream, context, modules and cuBLAS handle.
    pub(crate) fn active(&self) -> Active<'_> {
        self.active_slot(self.slot())
    }

    /// Checks that every input lives on this device and is large enough for its meta.
    fn check_inputs(&self, what: &str, inputs: &[(&CudaBuffer, &TensorMeta)]) -> Result<(), CudaError> {
        for (i, (buf, meta)) in inputs.iter().enumerate() {
            if !buf.belongs_to(&self.pool) {
                return Err(CudaError::failure(format!("{what} input {i} lives on another device")));
            }
            if buf.byte_len() < meta.byte_len() {
                return Err(CudaError::failure(format!(
                    "{what} input {i}: buffer of {} bytes is too small for {:?} {}",
                    buf.byte_len(),
                    meta.shape,
                    meta.dtype
                )));
            }
        }
        Ok(())
    }

    /// Orders the current lane after the producers of `inputs` (a no-op when they were
    /// made on this lane), notes the use for the allocator, and starts a unit of work.
    fn prepare(&self, inputs: &[(&CudaBuffer, &TensorMeta)]) -> Result<(), CudaError> {
        let slot = self.slot();
        if self.pool.lanes.partitioned_now() {
            for (buf, _) in inputs {
                let p = buf.producer();
                if p.slot as usize != slot {
                    self.pool.lanes.order_after(slot, p.slot as usize, p.seq, buf.upload_event())?;
                    #[cfg(test)]
                    if crate::mutants::planted(crate::mutants::Mutant::NoCrossLaneUseNote) {
                        continue;
                    }
                    buf.note_use(slot);
                }
            }
        }
        self.after_staged(inputs.iter().map(|(b, _)| *b), slot)?;
        self.pool.lanes.begin(slot);
        Ok(())
    }

    /// A buffer of `bytes` bytes from the pool, for work on the current lane's stream
    /// (produced by the unit of work in progress there).
    pub(crate) fn alloc(&self, bytes: usize) -> Result<CudaBuffer, CudaError> {
        let slot = self.slot();
        let producer = Producer { slot: slot as u8, seq: self.pool.lanes.slot(slot).seq() };
        self.pool.alloc(producer, bytes)
    }

    /// SMs of the current lane, for sizing grids.
    pub(crate) fn launch_sms(&self) -> u32 {
        self.active().sms
    }

    /// Queues a zero fill of the whole buffer on the current lane's stream.
    pub(crate) fn memset_zero(&self, buf: &CudaBuffer) -> Result<(), CudaError> {
        if buf.byte_len() == 0 {
            return Ok(());
        }
        let lane = self.active();
        lane.bind()?;
        // SAFETY: the buffer holds `byte_len` bytes.
        unsafe { result::memset_d8_async(buf.device_ptr(), 0, buf.byte_len(), lane.stream.cu_stream()) }
            .map_err(|e| CudaError::driver("zero fill", e))
    }

    /// Queues the copy of all of `src` into `dst` from byte `at` on, in place, on the
    /// current lane's stream. Readers on other lanes order themselves after a buffer's
    /// producer, not after its writers, so on a partitioned device the lane's stream is
    /// waited for before this returns.
    pub(crate) fn copy_into(&self, dst: &CudaBuffer, at: usize, src: &CudaBuffer) -> Result<(), CudaError> {
        let n = src.byte_len();
        if n == 0 {
            return Ok(());
        }
        if at.checked_add(n).is_none_or(|end| end > dst.byte_len()) {
            return Err(CudaError::failure(format!(
                "a write of {n} bytes at byte {at} ends past a buffer of {} bytes",
                dst.byte_len()
            )));
        }
        let slot = self.slot();
        let lane = self.active_slot(slot);
        lane.bind()?;
        // SAFETY: both ranges lie inside their live buffers (checked above; `src` whole),
        // and buffers are distinct allocations, so they do not overlap.
        unsafe {
            result::memcpy_dtod_async(dst.device_ptr() + at as u64, src.device_ptr(), n, lane.stream.cu_stream())
        }
        .map_err(|e| CudaError::driver("writing rows in place", e))?;
        self.wrote_in_place([(dst, src)])
    }

    /// Ends in-place writes just queued on the current lane (`write-rows`' copy,
    /// `kv-attention`'s cache writes), each `(dst, src)` a buffer written and the buffer
    /// its new elements came from: `dst`'s lineage takes `src`'s fault records, and on a
    /// partitioned device the lane's stream is waited for, since readers on other lanes
    /// order themselves after a buffer's producer, not after its writers.
    pub(crate) fn wrote_in_place<'a>(
        &self,
        writes: impl IntoIterator<Item = (&'a CudaBuffer, &'a CudaBuffer)>,
    ) -> Result<(), CudaError> {
        for (dst, src) in writes {
            dst.add_faults(&src.faults());
        }
        if self.pool.lanes.partitioned_now() {
            self.pool.lanes.synchronize(self.slot())?;
        }
        Ok(())
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if self.pool.is_lost() {
            // Modules and cuBLAS handles died with the context (see `crate::recovery`).
            std::mem::forget(std::mem::take(&mut self.kits));
            return;
        }
        // Nothing may run while the modules and cuBLAS handles go.
        if let Err(e) = self.synchronize() {
            tracing::warn!(error = %e, "cuda device: synchronize before closing failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_and_buffers_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<CudaDevice>();
        check::<CudaBuffer>();
    }
}
