//! SM partitions ("lanes") through CUDA green contexts.
//!
//! # Lanes
//!
//! A device opened with [`crate::CudaOptions::reserved_sms`] > 0 splits its SMs in two
//! with green contexts and offers three [`Lane`]s, each a stream work can be queued on:
//!
//! - [`Lane::Reserved`]: a green context holding `reserved_sms` SMs (rounded up to the
//!   hardware granularity), with the highest stream priority, for latency-class work.
//!   Its SMs never run anything else, so a latency kernel starts on idle SMs however
//!   much best-effort work is queued.
//! - [`Lane::Remainder`]: a green context holding every other SM, for best-effort work
//!   while latency work is active.
//! - [`Lane::Whole`]: the primary context's stream, all SMs, for best-effort work while
//!   no latency work is active (the "tidal" half of the design: best-effort takes the
//!   whole GPU back when the latency tenants are idle).
//!
//! The scheduler picks the lane with [`crate::CudaDevice::set_lane`]; every later upload,
//! launch, matmul and download goes to that lane's stream, loads kernels through that
//! lane's module cache (a module must be loaded in a green context's own `CUcontext`),
//! uses that lane's cuBLAS handle and allocates from the pool's free lists of that
//! stream. Without a partition every lane is the one primary stream, exactly the
//! single-stream behaviour of a device opened with `reserved_sms = 0`.
//!
//! Green contexts share the primary context's memory (they retain it), so a buffer
//! allocated by the pool (always in the primary context) is valid on every lane. If any
//! step of building the partition fails (an old driver, a missing symbol, a device the
//! driver cannot split) the device opens without one and [`PartitionState::Unavailable`]
//! says why: priorities and preemption still work, only spatial isolation is missing.
//!
//! # Sizes
//!
//! `cuDevSmResourceSplitByCount` only makes groups whose size is a multiple of the SM
//! co-scheduling alignment the device reports (`smCoscheduledAlignment`; the CUDA docs
//! give 8 for compute capability 9.0+ and 2 for 7.x/8.x and Tegra, which
//! [`sm_granularity`] uses when a driver reports 0). [`reserved_size`] rounds the
//! request up to that granularity and caps it so the remainder keeps at least one
//! granule; the driver's answer (the SM counts of the groups it made) is what
//! [`PartitionState::Active`] reports.
//!
//! # Cross-lane correctness
//!
//! Streams run independently, so two hazards appear once work is spread over lanes.
//!
//! **Data dependencies.** A kernel on lane C that reads a buffer produced on lane P must
//! not start before the producer finished. Every buffer records its producer stream and
//! a per-stream sequence number (each upload, launch or matmul on a stream takes the
//! next number). Before work on C reads it (`lanes::Lanes::order_after`):
//!
//! - P == C: nothing (stream order). This is the common case and costs one comparison.
//! - C already waited on P up to a number ≥ the buffer's (`waited[C][P]`), or P is known
//!   to have completed that far (`completed[P]`, updated by synchronizes and by polling
//!   events): nothing.
//! - An upload carries its own event, recorded right after the copy: C waits on that
//!   event (or nothing if the event already completed). A latency request reading
//!   weights uploaded long ago therefore never queues behind best-effort work that was
//!   queued on P since.
//! - A kernel output: C waits on the oldest "checkpoint" event of P that covers the
//!   buffer's number; if there is none, one is recorded on P now (covering everything
//!   queued on P so far) and kept for later consumers. Checkpoints are polled with
//!   `cuEventQuery` and recycled once complete. Waiting on "now" can over-wait by the
//!   work queued on P after the producer; the scheduler bounds best-effort work in
//!   flight, and outputs of latency work are normally consumed on the latency lane.
//!
//! Every wait is a `cuStreamWaitEvent`: the host never blocks. Events are created in
//! the context of the stream they are recorded on (a requirement of `cuEventRecord`);
//! `cuStreamWaitEvent` accepts events of other contexts.
//!
//! **Allocator reuse.** The pool hands a freed block to the next request on the stream
//! it was allocated for without any event: safe only if no other stream used it. Each
//! buffer keeps a bitmask of the streams that read it. When the last clone of a buffer
//! is dropped and only its own stream used it, the block goes straight back to the free
//! list (the single-stream fast path, unchanged). Otherwise an event is recorded on
//! every other stream that used it and the block waits in a pending list until those
//! events complete (PyTorch's `recordStream` approach); pending blocks are reclaimed
//! on the next allocation that misses the free list, and on `release_cached_memory`
//! (which waits for them).
//!
//! # Lifetimes
//!
//! cudarc's `CudaContext::from_raw_context` destroys its context with `cuCtxDestroy`
//! on drop, which must never happen to the `CUcontext` of a green context (it belongs to
//! the green context and dies with `cuGreenCtxDestroy`). Each green context's wrapper is
//! therefore given one extra, never released reference (an intentional leak of a
//! ~100-byte wrapper per green context per opened device); the green context itself is
//! destroyed by `GreenLane`'s drop after its stream is synchronized and destroyed.
//! Green lanes live in the pool, which every buffer keeps alive, and the device drops
//! its modules and cuBLAS handles (which use the green contexts) before the pool.

use std::ffi::c_uint;
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdevResource, CUdevResourceType, CUresult};
use cudarc::driver::{CudaContext, CudaStream, result};

/// Where work runs. See the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The primary context's stream, all SMs: best-effort work while no latency work is
    /// active. The lane of a freshly opened device.
    #[default]
    Whole,
    /// The reserved SM partition (highest stream priority): latency-class work.
    Reserved,
    /// The SMs outside the reserved partition: best-effort work while latency work is
    /// active.
    Remainder,
}

impl Lane {
    /// Every lane, in index order.
    pub const ALL: [Lane; 3] = [Lane::Whole, Lane::Reserved, Lane::Remainder];

    /// "whole", "reserved" or "remainder".
    pub fn name(self) -> &'static str {
        match self {
            Lane::Whole => "whole",
            Lane::Reserved => "reserved",
            Lane::Remainder => "remainder",
        }
    }

    pub(crate) fn index(self) -> u8 {
        match self {
            Lane::Whole => 0,
            Lane::Reserved => 1,
            Lane::Remainder => 2,
        }
    }

    pub(crate) fn from_index(i: u8) -> Lane {
        match i {
            1 => Lane::Reserved,
            2 => Lane::Remainder,
            _ => Lane::Whole,
        }
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Number of stream slots a partitioned device has (one per lane).
pub(crate) const SLOTS: usize = 3;

/// The stream slot `lane` runs on: its own with a partition, the one primary stream
/// (slot 0) without.
pub(crate) fn slot_of(lane: Lane, partitioned: bool) -> usize {
    if partitioned { lane.index() as usize } else { 0 }
}

/// Whether (and how) the device's SMs are partitioned, for logs and status pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionState {
    /// The device was opened with `reserved_sms = 0`.
    NotRequested,
    /// Two green contexts are active.
    Active {
        /// SMs of the [`Lane::Reserved`] partition.
        reserved_sms: u32,
        /// SMs of the [`Lane::Remainder`] partition.
        remainder_sms: u32,
        /// SMs of the device ([`Lane::Whole`]).
        total_sms: u32,
    },
    /// A partition was requested but could not be built; the reason.
    Unavailable(String),
}

impl PartitionState {
    /// Whether the lanes run on separate SM partitions.
    pub fn is_active(&self) -> bool {
        matches!(self, PartitionState::Active { .. })
    }
}

impl fmt::Display for PartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionState::NotRequested => f.write_str("none: not requested (reserved SMs = 0)"),
            PartitionState::Active { reserved_sms, remainder_sms, total_sms } => {
                write!(f, "reserved {reserved_sms} of {total_sms} SMs for latency work, {remainder_sms} for the rest")
            }
            PartitionState::Unavailable(why) => write!(f, "unavailable: {why}; priorities and preemption only"),
        }
    }
}

/// The documented SM-count granularity of green-context partitions: 8 on compute
/// capability 9.0 and newer, 2 before (and on Tegra). Used when the driver does not
/// report `smCoscheduledAlignment`.
pub fn sm_granularity(cc_major: u32) -> u32 {
    if cc_major >= 9 { 8 } else { 2 }
}

/// The size of the reserved partition for a request of `requested` SMs on a device with
/// `total_sms`, when partitions come in multiples of `granularity` SMs and hold at least
/// `min_partition` SMs: the request rounded up to the granularity (and to the minimum),
/// capped so that the remainder keeps at least one granule (and the minimum). An error
/// says why no partition fits.
pub fn reserved_size(requested: u32, total_sms: u32, granularity: u32, min_partition: u32) -> Result<u32, String> {
    if requested == 0 {
        return Err("no SMs requested".into());
    }
    let g = granularity.max(1);
    let round_up = |v: u32| v.div_ceil(g).saturating_mul(g);
    // The smallest partition the driver makes, and the least the remainder must keep.
    let floor = round_up(min_partition.max(g));
    let wanted = round_up(requested).max(floor);
    let cap = total_sms.saturating_sub(floor) / g * g;
    if cap < floor {
        return Err(format!(
            "the device has {total_sms} SMs, too few for two partitions of at least {floor} SMs \
             (granularity {g})"
        ));
    }
    Ok(wanted.min(cap))
}

/// A `CUresult` as a `Result` naming the call.
fn check(r: CUresult, what: &str) -> Result<(), String> {
    r.result().map_err(|e| format!("{what}: {}", crate::error::describe_driver(&e)))
}

/// The driver symbols a partition needs (all present in drivers for CUDA 12.4+).
const SYMBOLS: [&str; 8] = [
    "cuDeviceGetDevResource",
    "cuDevSmResourceSplitByCount",
    "cuDevResourceGenerateDesc",
    "cuGreenCtxCreate",
    "cuGreenCtxDestroy",
    "cuCtxFromGreenCtx",
    "cuGreenCtxStreamCreate",
    "cuGreenCtxGetDevResource",
];

/// The symbols of [`SYMBOLS`] the loaded driver lacks.
fn missing_symbols() -> Vec<&'static str> {
    SYMBOLS
        .iter()
        .copied()
        .filter(|name| {
            // SAFETY: looks the symbol up without calling it; the type is only a
            // placeholder for the lookup. `culib` is loaded (the device is open).
            unsafe { sys::culib().get::<unsafe extern "C" fn()>(name.as_bytes()).is_err() }
        })
        .collect()
}

/// One green context with its stream.
pub(crate) struct GreenLane {
    green: sys::CUgreenCtx,
    /// The green context's `CUcontext` (one reference leaked on purpose, see the module
    /// documentation).
    pub(crate) ctx: Arc<CudaContext>,
    raw_stream: sys::CUstream,
    /// Wraps `raw_stream` without owning it.
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) sms: u32,
}

// SAFETY: the raw handles are only used through the thread-safe driver API; cudarc's
// wrappers are `Send + Sync` themselves.
unsafe impl Send for GreenLane {}
// SAFETY: as above.
unsafe impl Sync for GreenLane {}

impl GreenLane {
    /// Creates a green context from one SM resource, converts it to a `CUcontext` and
    /// creates a non-blocking stream of `priority` in it.
    ///
    /// # Safety
    ///
    /// The driver is loaded and has every symbol of [`SYMBOLS`]; `resource` was filled in
    /// by `cuDevSmResourceSplitByCount` for `primary`'s device.
    unsafe fn new(primary: &Arc<CudaContext>, resource: &mut CUdevResource, priority: i32) -> Result<Self, String> {
        let dev = primary.cu_device();
        let mut desc: sys::CUdevResourceDesc = std::ptr::null_mut();
        // SAFETY: out-pointer to a live handle, one valid resource.
        check(unsafe { sys::cuDevResourceGenerateDesc(&mut desc, resource, 1) }, "cuDevResourceGenerateDesc")?;
        let mut green: sys::CUgreenCtx = std::ptr::null_mut();
        let flags = sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as c_uint;
        // SAFETY: `desc` was just generated for this device.
        check(unsafe { sys::cuGreenCtxCreate(&mut green, desc, dev, flags) }, "cuGreenCtxCreate")?;
        // From here on the green context is destroyed again on failure.
        let destroy = |green: sys::CUgreenCtx| {
            // SAFETY: `green` was created above and nothing else refers to it.
            let _ = unsafe { sys::cuGreenCtxDestroy(green) };
        };
        let mut cu_ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a live handle; `green` is valid.
        if let Err(e) = check(unsafe { sys::cuCtxFromGreenCtx(&mut cu_ctx, green) }, "cuCtxFromGreenCtx") {
            destroy(green);
            return Err(e);
        }
        let mut raw_stream: sys::CUstream = std::ptr::null_mut();
        let stream_flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
        // SAFETY: out-pointer to a live handle; `green` is valid.
        let r = unsafe { sys::cuGreenCtxStreamCreate(&mut raw_stream, green, stream_flags, priority) };
        if let Err(e) = check(r, "cuGreenCtxStreamCreate") {
            destroy(green);
            return Err(e);
        }
        let destroy_all = |raw_stream: sys::CUstream, green: sys::CUgreenCtx| {
            // SAFETY: both were created above and nothing else refers to them.
            let _ = unsafe { result::stream::destroy(raw_stream) };
            destroy(green);
        };
        let mut granted: CUdevResource = zeroed_resource();
        let sm_type = CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM;
        // SAFETY: out-pointer to a live, zero-initialised resource; `green` is valid.
        let r = unsafe { sys::cuGreenCtxGetDevResource(green, &mut granted, sm_type) };
        if let Err(e) = check(r, "cuGreenCtxGetDevResource") {
            destroy_all(raw_stream, green);
            return Err(e);
        }
        // SAFETY: an SM resource; its `sm` member was written by the driver, and an
        // all-zero `CUdevSmResource` is valid anyway.
        let sms = unsafe { granted.__bindgen_anon_1.sm.smCount };
        // SAFETY: `cu_ctx` is the valid context of `green`, on `dev`. The wrapper's drop
        // would `cuCtxDestroy` it, so one reference is leaked below and it never drops.
        let ctx = match unsafe { CudaContext::from_raw_context(primary.ordinal(), dev, cu_ctx) } {
            Ok(c) => c,
            Err(e) => {
                destroy_all(raw_stream, green);
                return Err(format!("wrapping the green context: {}", crate::error::describe_driver(&e)));
            }
        };
        std::mem::forget(Arc::clone(&ctx));
        // SAFETY: `raw_stream` belongs to `ctx` and is kept alive (by `self`) until after
        // every user of the wrapper is gone (see `Drop`).
        let stream = unsafe { ctx.wrap_borrowed_stream(raw_stream) };
        Ok(GreenLane { green, ctx, raw_stream, stream, sms })
    }
}

impl Drop for GreenLane {
    fn drop(&mut self) {
        // SAFETY: the stream and the green context were created by `new` and are
        // destroyed only here, once. The owner (the pool's `Lanes`) has dropped every
        // module, cuBLAS handle and event of this context before.
        unsafe {
            if let Err(e) = result::stream::synchronize(self.raw_stream) {
                tracing::warn!(error = %crate::error::describe_driver(&e), "green lane: synchronize failed");
            }
            if let Err(e) = result::stream::destroy(self.raw_stream) {
                tracing::warn!(error = %crate::error::describe_driver(&e), "green lane: stream destroy failed");
            }
            if let Err(e) = sys::cuGreenCtxDestroy(self.green).result() {
                tracing::warn!(error = %crate::error::describe_driver(&e), "green lane: context destroy failed");
            }
        }
    }
}

/// An all-zero `CUdevResource` (type `CU_DEV_RESOURCE_TYPE_INVALID`), the initial value
/// the driver's out-parameters expect.
fn zeroed_resource() -> CUdevResource {
    // SAFETY: `CUdevResource` is `#[repr(C)]` plain data (a `u32` enum whose 0 is
    // `CU_DEV_RESOURCE_TYPE_INVALID`, byte arrays and a union of `u32` structs and bytes):
    // all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// The two green lanes of a partition.
pub(crate) struct Split {
    pub(crate) reserved: GreenLane,
    pub(crate) remainder: GreenLane,
    pub(crate) total_sms: u32,
}

impl Split {
    pub(crate) fn state(&self) -> PartitionState {
        PartitionState::Active {
            reserved_sms: self.reserved.sms,
            remainder_sms: self.remainder.sms,
            total_sms: self.total_sms,
        }
    }
}

/// Builds the partition of `requested` SMs on `primary`'s device, or says why not.
/// Never panics: a driver without the symbols is detected first, and any panic of the
/// dynamic loader is caught.
pub(crate) fn create(
    primary: &Arc<CudaContext>,
    requested: u32,
    cc_major: u32,
    driver_version: i32,
) -> Result<Split, String> {
    if driver_version < 12040 {
        return Err(format!(
            "the driver supports CUDA {}.{}; green contexts need 12.4 or newer",
            driver_version / 1000,
            driver_version % 1000 / 10
        ));
    }
    let missing = missing_symbols();
    if !missing.is_empty() {
        return Err(format!("the driver lacks {}", missing.join(", ")));
    }
    let run = std::panic::AssertUnwindSafe(|| {
        // SAFETY: the driver is loaded and has every symbol `create_checked` calls.
        unsafe { create_checked(primary, requested, cc_major) }
    });
    match std::panic::catch_unwind(run) {
        Ok(r) => r,
        Err(panic) => Err(format!("the driver call panicked: {}", crate::error::panic_message(panic.as_ref()))),
    }
}

/// # Safety
///
/// The driver is loaded and has every symbol of [`SYMBOLS`].
unsafe fn create_checked(primary: &Arc<CudaContext>, requested: u32, cc_major: u32) -> Result<Split, String> {
    primary.bind_to_thread().map_err(|e| format!("binding the context: {}", crate::error::describe_driver(&e)))?;
    let dev = primary.cu_device();
    let sm_type = CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM;
    let mut whole = zeroed_resource();
    // SAFETY: out-pointer to a live, zero-initialised resource of the size the
    // cuda-13000 headers define (checked by a unit test).
    check(unsafe { sys::cuDeviceGetDevResource(dev, &mut whole, sm_type) }, "cuDeviceGetDevResource")?;
    // SAFETY: an SM resource: the driver wrote the `sm` member (zero-initialised before).
    let sm = unsafe { whole.__bindgen_anon_1.sm };
    let granularity = if sm.smCoscheduledAlignment > 0 { sm.smCoscheduledAlignment } else { sm_granularity(cc_major) };
    let size = reserved_size(requested, sm.smCount, granularity, sm.minSmPartitionSize)?;
    let mut group = zeroed_resource();
    let mut remainder = zeroed_resource();
    let mut groups: c_uint = 1;
    // SAFETY: `group` has room for the one group `groups` announces, `whole` is the
    // device's SM resource, `remainder` a live out-parameter; no flags. This is the
    // cuda-13000 signature (result, nbGroups in/out, input, remaining, useFlags, minCount).
    let r = unsafe { sys::cuDevSmResourceSplitByCount(&mut group, &mut groups, &whole, &mut remainder, 0, size) };
    check(r, "cuDevSmResourceSplitByCount")?;
    // SAFETY: SM resources written by the driver (or still zero).
    let (got, left) = unsafe { (group.__bindgen_anon_1.sm.smCount, remainder.__bindgen_anon_1.sm.smCount) };
    if groups != 1 || got == 0 || left == 0 {
        return Err(format!(
            "cuDevSmResourceSplitByCount of {} SMs into {size} + rest gave {groups} group(s) of {got} SMs and \
             {left} remaining",
            sm.smCount
        ));
    }
    let (least, greatest) = result::stream::get_priority_range()
        .map_err(|e| format!("cuCtxGetStreamPriorityRange: {}", crate::error::describe_driver(&e)))?;
    // SAFETY: driver loaded with the symbols; resources just filled in for `dev`.
    let reserved = unsafe { GreenLane::new(primary, &mut group, greatest)? };
    // SAFETY: as above. On failure `reserved` drops and is destroyed.
    let rest = unsafe { GreenLane::new(primary, &mut remainder, least)? };
    primary.bind_to_thread().map_err(|e| format!("binding the context: {}", crate::error::describe_driver(&e)))?;
    Ok(Split { reserved, remainder: rest, total_sms: sm.smCount })
}

/// Tells a cuBLAS handle on a green-context lane how many SMs the lane has: cuBLAS cannot
/// see the partition and would otherwise choose its kernels and splits for the whole GPU
/// (issue 11, defect 4).
pub(crate) fn set_sm_count_target(blas: &cudarc::cublas::CudaBlas, sms: u32) -> Result<(), String> {
    let target = i32::try_from(sms).map_err(|_| format!("{sms} SMs exceed cuBLAS's SM count target"))?;
    // SAFETY: a live handle made by `CudaBlas::new`, not yet shared with any other thread.
    unsafe { cudarc::cublas::sys::cublasSetSmCountTarget(*blas.handle(), target) }
        .result()
        .map_err(|e| format!("cublasSetSmCountTarget({target}): {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_13000_resource_layout() {
        // cuda.h 13.0: { CUdevResourceType type; unsigned char _internal_padding[92];
        // union { CUdevSmResource sm; unsigned char _oversize[48]; }; }
        assert_eq!(std::mem::size_of::<CUdevResource>(), 144);
        assert_eq!(std::mem::size_of::<sys::CUdevSmResource>(), 12);
        let r = zeroed_resource();
        assert_eq!(r.type_, CUdevResourceType::CU_DEV_RESOURCE_TYPE_INVALID);
    }

    #[test]
    fn granularity_by_compute_capability() {
        assert_eq!(sm_granularity(9), 8);
        assert_eq!(sm_granularity(10), 8);
        assert_eq!(sm_granularity(8), 2);
        assert_eq!(sm_granularity(7), 2);
    }

    #[test]
    fn reserved_sizes_round_up_and_keep_a_remainder() {
        // H200: 132 SMs, granularity 8.
        assert_eq!(reserved_size(16, 132, 8, 8), Ok(16));
        assert_eq!(reserved_size(1, 132, 8, 8), Ok(8));
        assert_eq!(reserved_size(9, 132, 8, 8), Ok(16));
        assert_eq!(reserved_size(17, 132, 8, 0), Ok(24));
        // Capped: the remainder keeps at least one granule.
        assert_eq!(reserved_size(124, 132, 8, 8), Ok(120));
        assert_eq!(reserved_size(130, 132, 8, 8), Ok(120));
        assert_eq!(reserved_size(u32::MAX, 132, 8, 8), Ok(120));
        assert_eq!(reserved_size(120, 128, 8, 8), Ok(120));
        // A larger driver minimum raises the floor on both sides.
        assert_eq!(reserved_size(4, 132, 8, 16), Ok(16));
        assert_eq!(reserved_size(200, 132, 8, 16), Ok(112));
        // CC 8.x: granularity 2.
        assert_eq!(reserved_size(3, 108, 2, 2), Ok(4));
        assert_eq!(reserved_size(107, 108, 2, 2), Ok(106));
        // Too small to split, or nothing asked.
        assert!(reserved_size(8, 15, 8, 8).is_err());
        assert_eq!(reserved_size(8, 16, 8, 8), Ok(8));
        assert!(reserved_size(0, 132, 8, 8).is_err());
        assert_eq!(reserved_size(5, 132, 0, 0), Ok(5), "granularity 0 is treated as 1");
        for total in [16u32, 46, 108, 132, 144] {
            for g in [2u32, 8] {
                for req in 1..=total + 10 {
                    if let Ok(s) = reserved_size(req, total, g, g) {
                        assert!(s.is_multiple_of(g) && s >= g, "{req}/{total}/{g} -> {s}");
                        assert!(total - s >= g, "{req}/{total}/{g} -> {s} leaves no granule");
                        assert!(s >= req.min(total - g) / g * g, "{req}/{total}/{g} -> {s} too small");
                    }
                }
            }
        }
    }

    #[test]
    fn state_is_reported_in_words() {
        let active = PartitionState::Active { reserved_sms: 16, remainder_sms: 116, total_sms: 132 };
        assert_eq!(active.to_string(), "reserved 16 of 132 SMs for latency work, 116 for the rest");
        assert!(active.is_active());
        assert_eq!(PartitionState::NotRequested.to_string(), "none: not requested (reserved SMs = 0)");
        let un = PartitionState::Unavailable("the driver lacks cuGreenCtxCreate".into());
        assert_eq!(un.to_string(), "unavailable: the driver lacks cuGreenCtxCreate; priorities and preemption only");
        assert!(!un.is_active() && !PartitionState::NotRequested.is_active());
    }

    #[test]
    fn lanes_map_onto_slots() {
        for lane in Lane::ALL {
            assert_eq!(slot_of(lane, false), 0, "without a partition every lane is the primary stream");
            assert_eq!(Lane::from_index(lane.index()), lane);
        }
        assert_eq!(slot_of(Lane::Whole, true), 0);
        assert_eq!(slot_of(Lane::Reserved, true), 1);
        assert_eq!(slot_of(Lane::Remainder, true), 2);
        assert_eq!(Lane::default(), Lane::Whole);
        assert_eq!(Lane::Reserved.to_string(), "reserved");
    }
}
