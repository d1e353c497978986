//! Large uploads through pinned staging memory, off the caller's thread (issue 11,
//! defect 2).
//!
//! A plain upload copies from pageable memory: the driver first copies the bytes into its
//! own pinned buffer, on the calling thread, before `cuMemcpyHtoDAsync` returns, so a
//! 256 MiB upload (or 90 MB of weights) holds the scheduler's one thread for tens of
//! milliseconds and every tenant waits. [`CudaDevice::upload_owned`] takes the bytes
//! instead: an upload of at least [`STAGED_MIN`] bytes only allocates the device buffer
//! on the caller's thread (and records an event on its lane's stream, which the copy
//! waits for: the block may be a reused one that queued work still reads) and hands the
//! bytes to the device's stager thread, which copies them, [`CHUNK`] at a time, into two pinned buffers used in turn and queues each
//! piece on its own copy stream, then records an event after the last piece. Work that
//! reads the buffer (on any lane, and its download) waits for that event on its stream;
//! only if the stager has not queued the copy yet does the reader's thread wait for it,
//! and then for that upload alone. A staged buffer dropped unread waits for its copy
//! before its memory can be reused.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use cudarc::driver::sys::{CUevent_flags, CUevent_wait_flags};
use cudarc::driver::{CudaStream, result};
use sluice_host_api::TensorMeta;

use crate::alloc::Pool;
use crate::lanes::{Event, Lanes};
use crate::{CudaBuffer, CudaDevice, CudaError};

/// Uploads this large or larger go through the stager; smaller ones are copied at once.
pub const STAGED_MIN: usize = 1 << 20;

/// Bytes of each of the two pinned staging buffers.
pub const CHUNK: usize = 8 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The copy of one staged upload, shared by its buffer and the stager.
pub(crate) struct Staged {
    /// The event recorded after the copy, once the stager queued it.
    queued: Mutex<Option<Result<Event, CudaError>>>,
    ready: Condvar,
    /// Stream slots that already queued a wait on the event.
    waited: AtomicU8,
}

impl Staged {
    /// Whether the stager has queued the copy (or failed to), without waiting.
    pub(crate) fn is_queued(&self) -> bool {
        lock(&self.queued).is_some()
    }

    /// Waits until the stager queued the copy; returns the event after it.
    pub(crate) fn queued(&self) -> Result<Event, CudaError> {
        let mut q = lock(&self.queued);
        loop {
            if let Some(r) = q.as_ref() {
                return r.clone();
            }
            q = self.ready.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn finish(&self, r: Result<Event, CudaError>) {
        *lock(&self.queued) = Some(r);
        self.ready.notify_all();
    }
}

struct Job {
    dst: u64,
    bytes: Vec<u8>,
    staged: Arc<Staged>,
    /// Recorded on the uploading slot's stream after the buffer was allocated: the block
    /// may be a reused one that work queued there still reads, so the copy waits for it.
    after: (usize, Event),
    /// The mutant `StagedCopyNotOrdered` was planted by the uploading thread.
    #[cfg(test)]
    skip_order: bool,
}

/// What the stager did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagingStats {
    /// Uploads whose copy the stager queued.
    pub uploads: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The device's stager thread and what it shares with the device.
pub(crate) struct Stager {
    tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    uploads: AtomicU64,
    bytes: AtomicU64,
    /// Holds in force ([`CudaDevice::hold_staging`]).
    holds: Mutex<u32>,
    released: Condvar,
}

impl Stager {
    fn start(pool: Arc<Pool>) -> Result<Stager, CudaError> {
        let slot = pool.lanes.slot(0);
        let stream = slot.ctx.new_stream().map_err(|e| CudaError::driver("creating the copy stream", e))?;
        let (tx, rx) = channel();
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("sluice-cuda-stager".into())
            .spawn(move || run(&pool, stream, rx, &theirs))
            .map_err(|e| CudaError::failure(format!("starting the stager thread: {e}")))?;
        Ok(Stager { tx: Mutex::new(Some(tx)), thread: Mutex::new(Some(thread)), shared })
    }
}

impl Drop for Stager {
    fn drop(&mut self) {
        lock(&self.tx).take();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

/// Two pinned buffers used in turn, each with the event after its last copy.
struct Pinned {
    bufs: Vec<(*mut u8, Option<Event>)>,
}

fn run(pool: &Arc<Pool>, stream: Arc<CudaStream>, rx: Receiver<Job>, shared: &Shared) {
    let mut pinned = Pinned { bufs: Vec::new() };
    let mut turn = 0usize;
    for job in rx {
        let mut holds = lock(&shared.holds);
        while *holds > 0 {
            holds = shared.released.wait(holds).unwrap_or_else(|p| p.into_inner());
        }
        drop(holds);
        let r = copy(pool, &stream, &mut pinned, &mut turn, &job);
        if r.is_ok() {
            shared.uploads.fetch_add(1, Ordering::Relaxed);
            shared.bytes.fetch_add(job.bytes.len() as u64, Ordering::Relaxed);
        }
        job.staged.finish(r);
        // The bytes are freed here, off the caller's thread too.
    }
    if pool.is_lost() {
        // Dead handles: leak them rather than hand them back (see `crate::recovery`).
        std::mem::forget(stream);
        return;
    }
    let _ = stream.synchronize();
    for (ptr, event) in pinned.bufs {
        // SAFETY: pinned memory from cuMemHostAlloc whose copies completed (synchronized
        // above); events of this context, waited on by no one later.
        unsafe {
            let _ = result::free_host(ptr.cast());
            if let Some(e) = event {
                let _ = result::event::destroy(e.0);
            }
        }
    }
}

fn event() -> Result<Event, CudaError> {
    result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map(Event)
        .map_err(|e| CudaError::driver("creating an event", e))
}

/// Copies `job` through the pinned buffers on `stream`; returns the event after it.
fn copy(
    pool: &Pool,
    stream: &CudaStream,
    pinned: &mut Pinned,
    turn: &mut usize,
    job: &Job,
) -> Result<Event, CudaError> {
    if pool.is_lost() {
        return Err(CudaError::Lost("the device was lost before the upload was copied".into()));
    }
    pool.lanes.slot(0).bind()?;
    let (slot, after) = job.after;
    #[cfg(test)]
    if job.skip_order {
        pool.lanes.recycle(slot, after);
        return copy_pieces(stream, pinned, turn, job);
    }
    // SAFETY: live stream and event; events of another context are allowed.
    let waited =
        unsafe { result::stream::wait_event(stream.cu_stream(), after.0, CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) };
    pool.lanes.recycle(slot, after);
    waited.map_err(|e| CudaError::driver("ordering a staged copy after the block's last readers", e))?;
    copy_pieces(stream, pinned, turn, job)
}

/// The copy itself: `job`'s bytes through the pinned buffers on `stream`, then the event
/// after it.
fn copy_pieces(stream: &CudaStream, pinned: &mut Pinned, turn: &mut usize, job: &Job) -> Result<Event, CudaError> {
    for (i, piece) in job.bytes.chunks(CHUNK).enumerate() {
        if pinned.bufs.len() < 2 {
            // SAFETY: a plain pinned allocation in the bound context.
            let p = unsafe { result::malloc_host(CHUNK, 0) }
                .map_err(|e| CudaError::driver("allocating pinned memory", e))?;
            pinned.bufs.push((p.cast(), None));
        }
        let (buf, last) = &mut pinned.bufs[*turn];
        *turn = 1 - *turn;
        if let Some(e) = last {
            // The previous copy out of this buffer must have run before it is refilled.
            // SAFETY: a live event of this context.
            unsafe { result::event::synchronize(e.0) }
                .map_err(|e| CudaError::driver("waiting for a staging copy", e))?;
        }
        // SAFETY: `buf` holds CHUNK ≥ piece.len() bytes and no queued copy reads it now.
        let staging = unsafe {
            std::ptr::copy_nonoverlapping(piece.as_ptr(), *buf, piece.len());
            std::slice::from_raw_parts(*buf as *const u8, piece.len())
        };
        let dst = job.dst + (i * CHUNK) as u64;
        // SAFETY: the destination lies inside the upload's device buffer; the pinned
        // source stays untouched until the event recorded next has completed.
        unsafe { result::memcpy_htod_async(dst, staging, stream.cu_stream()) }
            .map_err(|e| CudaError::driver("copying to the device", e))?;
        let e = match last.take() {
            Some(e) => e,
            None => event()?,
        };
        // SAFETY: live event and stream of this context.
        unsafe { result::event::record(e.0, stream.cu_stream()) }
            .map_err(|e| CudaError::driver("recording an event", e))?;
        *last = Some(e);
    }
    let done = event()?;
    // SAFETY: as above.
    unsafe { result::event::record(done.0, stream.cu_stream()) }
        .map_err(|e| CudaError::driver("recording an event", e))?;
    Ok(done)
}

/// Keeps the stager from starting a copy until dropped (a test hook: it shows that an
/// upload returns before its copy was made).
pub struct StagingHold(Arc<Shared>);

impl Drop for StagingHold {
    fn drop(&mut self) {
        *lock(&self.0.holds) -= 1;
        self.0.released.notify_all();
    }
}

impl CudaDevice {
    fn stager(&self) -> Result<&Stager, CudaError> {
        if let Some(s) = self.stager.get() {
            return Ok(s);
        }
        let s = Stager::start(self.pool.clone())?;
        Ok(self.stager.get_or_init(|| s))
    }

    /// Uploads `bytes` (exactly `meta.byte_len()`) to a new device buffer. From
    /// [`STAGED_MIN`] bytes on the copy is made by the stager thread through pinned
    /// memory and this returns at once; work reading the buffer waits for the copy.
    pub fn upload_owned(&self, meta: &TensorMeta, bytes: Vec<u8>) -> Result<CudaBuffer, CudaError> {
        if bytes.len() < STAGED_MIN || bytes.len() != meta.byte_len() {
            return self.upload(meta, &bytes);
        }
        let stager = self.stager()?;
        let slot = self.slot();
        self.pool.lanes.begin(slot);
        let buf = self.alloc(bytes.len())?;
        let staged = Arc::new(Staged { queued: Mutex::new(None), ready: Condvar::new(), waited: AtomicU8::new(0) });
        buf.set_staged(staged.clone());
        // The block may have been freed by work still queued on this lane that reads it.
        let after = (slot, self.pool.lanes.record(slot)?);
        let job = Job {
            dst: buf.device_ptr(),
            bytes,
            staged,
            after,
            #[cfg(test)]
            skip_order: crate::mutants::planted(crate::mutants::Mutant::StagedCopyNotOrdered),
        };
        let sent = lock(&stager.tx).as_ref().map(|tx| tx.send(job).is_ok()).unwrap_or(false);
        if !sent {
            return Err(CudaError::failure("the stager thread has stopped"));
        }
        Ok(buf)
    }

    /// What the stager did so far.
    pub fn staging_stats(&self) -> StagingStats {
        self.stager.get().map_or_else(StagingStats::default, |s| StagingStats {
            uploads: s.shared.uploads.load(Ordering::Relaxed),
            bytes: s.shared.bytes.load(Ordering::Relaxed),
        })
    }

    /// Holds the stager until the returned guard drops (see [`StagingHold`]).
    pub fn hold_staging(&self) -> Result<StagingHold, CudaError> {
        let shared = self.stager()?.shared.clone();
        *lock(&shared.holds) += 1;
        Ok(StagingHold(shared))
    }

    /// Orders slot `slot`'s stream after the staged copies of `inputs` (once per slot).
    pub(crate) fn after_staged<'a>(
        &self,
        inputs: impl IntoIterator<Item = &'a CudaBuffer>,
        slot: usize,
    ) -> Result<(), CudaError> {
        #[cfg(test)]
        if crate::mutants::planted(crate::mutants::Mutant::StagedReadWithoutWait) {
            return Ok(());
        }
        for buf in inputs {
            let Some(staged) = buf.staged() else { continue };
            let bit = 1u8 << slot;
            if staged.waited.load(Ordering::Acquire) & bit != 0 {
                continue;
            }
            let e = staged.queued()?;
            let s = self.pool.lanes.slot(slot);
            s.bind()?;
            // SAFETY: live stream and event; events of another context are allowed.
            unsafe { result::stream::wait_event(s.stream.cu_stream(), e.0, CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
                .map_err(|err| CudaError::driver("waiting for a staged upload", err))?;
            staged.waited.fetch_or(bit, Ordering::AcqRel);
        }
        Ok(())
    }
}

/// A dropped staged buffer: waits for its copy (its memory is about to be reused) and
/// gives the copy's event back to the primary context's slot.
pub(crate) fn release(lanes: &Lanes, staged: &Staged) {
    if let Ok(e) = staged.queued() {
        // SAFETY: a live event of the primary context.
        if let Err(err) = unsafe { result::event::synchronize(e.0) } {
            tracing::warn!(error = ?err, "cuda stager: waiting for the copy of a dropped upload failed");
        }
        lanes.recycle(0, e);
    }
}
