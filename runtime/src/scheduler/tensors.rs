//! The device actor's table of tensors: one slot per tensor of the device, from the
//! moment work producing it is queued until the last handle is gone and no queued
//! kernel reads it any more.
//!
//! A slot is pending until its producer ran, then ready (a buffer) or failed (the
//! first cause, which poisons every later op on it). A read of a pending tensor waits
//! in the slot; a free of a tensor that queued kernels still read is deferred until
//! they ran. The table counts the bytes of the buffers it holds.
//!
//! An in-place write (`write-rows` into a tensor made by `tensor.zeros`, or
//! `kv-attention` into its caches: [`sluice_host_api::Op::written_inputs`]) changes a
//! ready tensor: until the writes queued into it ran, a read of it waits as a read of a
//! pending tensor does, and afterwards waits for the writer's lane. A failed write
//! poisons the tensors written.

use rustc_hash::FxHashMap;
use sluice_host_api::{ApiError, ErrorCode, TensorMeta};
use tokio::sync::oneshot;

use super::TensorId;
use super::work::Work;
use crate::device::{Buffer, Lane};

/// Where the answer to a read goes.
pub(super) type Reply = oneshot::Sender<Result<Vec<u8>, ApiError>>;

/// A tensor's contents, as far as the device thread knows.
pub(super) enum TensorState {
    Pending,
    Ready(Buffer),
    Failed(ApiError),
}

struct Slot {
    state: TensorState,
    bytes: u64,
    /// Queued kernels that read this tensor.
    uses: u32,
    /// The last handle is gone; remove once `uses` is zero and it is produced.
    freed: bool,
    /// Where it was produced, or last written (a read waits for that lane).
    lane: Lane,
    /// In-place writes queued into this tensor that have not run yet.
    writes: u32,
    /// For the output of an in-place write: the tensors it writes.
    writes_into: Vec<TensorId>,
    readers: Vec<(TensorMeta, Reply)>,
}

/// A read to answer: the tensor, the metadata it is read as, and where the answer goes.
pub(super) type Waiting = (TensorId, TensorMeta, Reply);

/// What a read found.
pub(super) enum ReadOutcome {
    /// The tensor is not produced yet: the reply waits in its slot.
    Waiting,
    /// The tensor is ready, produced on `lane`: download it and answer.
    Ready { buffer: Buffer, lane: Lane, reply: Reply },
    /// The tensor failed, or is unknown: the reply and the error, to answer with.
    Failed(Reply, ApiError),
}

/// Table capacity (slots) above which an idle device shrinks a mostly empty table.
const SHRINK_ABOVE: usize = 1024;

/// Every tensor of one device.
#[derive(Default)]
pub(super) struct TensorTable {
    /// Keyed by the host-assigned (sequential) id, so a fast hash serves.
    slots: FxHashMap<TensorId, Slot>,
    resident_bytes: u64,
}

impl TensorTable {
    /// Tensors in the table.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Gives back the table's memory after a burst: a table far emptier than its
    /// capacity shrinks (it keeps what a burst of tensors grew it to otherwise).
    pub fn shrink_after_burst(&mut self) {
        if self.slots.capacity() > SHRINK_ABOVE && self.slots.capacity() > 4 * self.slots.len() {
            self.slots.shrink_to(2 * self.slots.len());
        }
    }

    /// Bytes of the buffers held.
    pub fn resident_bytes(&self) -> u64 {
        self.resident_bytes
    }

    /// Work was queued: its output is pending and its inputs have one more use.
    /// An in-place write also counts as queued into its destination.
    pub fn queued(&mut self, work: &Work) {
        for (input, _) in work.inputs() {
            if let Some(s) = self.slots.get_mut(input) {
                s.uses += 1;
            }
        }
        let writes_into: Vec<TensorId> = match work {
            Work::Launch { op, inputs, .. } => {
                inputs[op.written_inputs(inputs.len())].iter().map(|(dst, _)| *dst).collect()
            }
            _ => Vec::new(),
        };
        for dst in &writes_into {
            if let Some(dst) = self.slots.get_mut(dst) {
                dst.writes += 1;
            }
        }
        let slot = Slot {
            state: TensorState::Pending,
            bytes: 0,
            uses: 0,
            freed: false,
            lane: Lane::Whole,
            writes: 0,
            writes_into,
            readers: vec![],
        };
        self.slots.insert(work.output(), slot);
    }

    /// A read of `id` as `meta`: waits in the slot if pending or written.
    pub fn read(&mut self, id: TensorId, meta: TensorMeta, reply: Reply) -> ReadOutcome {
        match self.slots.get_mut(&id) {
            Some(Slot { state: TensorState::Pending, readers, .. })
            | Some(Slot { state: TensorState::Ready(_), writes: 1.., readers, .. }) => {
                readers.push((meta, reply));
                ReadOutcome::Waiting
            }
            Some(Slot { state: TensorState::Ready(buffer), lane, .. }) => {
                ReadOutcome::Ready { buffer: buffer.clone(), lane: *lane, reply }
            }
            Some(Slot { state: TensorState::Failed(e), .. }) => ReadOutcome::Failed(reply, e.clone()),
            None => ReadOutcome::Failed(reply, missing(id)),
        }
    }

    /// The last handle of `id` is gone.
    pub fn free(&mut self, id: TensorId) {
        if let Some(s) = self.slots.get_mut(&id) {
            s.freed = true;
            self.collect(id);
        }
    }

    /// Sets a tensor's contents, produced on `lane`, and returns the reads that waited
    /// for it (answer them, then [`TensorTable::collect`] it). For the output of an
    /// in-place write, the destination was written on `lane` (or is poisoned by the
    /// write's failure): its reads are returned too once no more writes are queued.
    pub fn complete(&mut self, id: TensorId, result: Result<(Buffer, u64), ApiError>, lane: Lane) -> Vec<Waiting> {
        let Some(slot) = self.slots.get_mut(&id) else { return Vec::new() };
        slot.lane = lane;
        let failure = result.as_ref().err().cloned();
        slot.state = match result {
            Ok((b, bytes)) => {
                slot.bytes = bytes;
                self.resident_bytes += bytes;
                TensorState::Ready(b)
            }
            Err(e) => TensorState::Failed(e),
        };
        // A tensor produced with writes already queued into it (a read, its upload and
        // the writes arrived together) is read once they ran, not now.
        let mut waiting: Vec<Waiting> = if slot.writes == 0 || failure.is_some() {
            slot.readers.drain(..).map(|(m, r)| (id, m, r)).collect()
        } else {
            Vec::new()
        };
        for dst_id in std::mem::take(&mut slot.writes_into) {
            let Some(dst) = self.slots.get_mut(&dst_id) else { continue };
            dst.writes = dst.writes.saturating_sub(1);
            dst.lane = lane;
            if let Some(e) = &failure
                && !matches!(dst.state, TensorState::Failed(_))
            {
                dst.state = TensorState::Failed(e.clone());
                self.resident_bytes -= std::mem::take(&mut dst.bytes);
            }
            if dst.writes == 0 {
                waiting.extend(dst.readers.drain(..).map(|(m, r)| (dst_id, m, r)));
            }
        }
        waiting
    }

    /// The device was reset: every buffer is gone. Each tensor not failed already
    /// fails with `e` (so does every later op on it) and holds no memory any more; the
    /// reads that waited are handed back, to be answered with `e`.
    pub fn lose_all(&mut self, e: &ApiError) -> Vec<(TensorMeta, Reply)> {
        let mut readers = Vec::new();
        for slot in self.slots.values_mut() {
            if !matches!(slot.state, TensorState::Failed(_)) {
                slot.state = TensorState::Failed(e.clone());
            }
            slot.bytes = 0;
            readers.append(&mut slot.readers);
        }
        self.resident_bytes = 0;
        let ids: Vec<TensorId> = self.slots.keys().copied().collect();
        for id in ids {
            self.collect(id);
        }
        readers
    }

    /// The contents of `id`, if it is in the table.
    pub fn state(&self, id: TensorId) -> Option<&TensorState> {
        self.slots.get(&id).map(|s| &s.state)
    }

    /// Removes a freed tensor once nothing needs it any more.
    pub fn collect(&mut self, id: TensorId) {
        let removable = matches!(self.slots.get(&id), Some(s) if s.freed && s.uses == 0 && !matches!(s.state, TensorState::Pending));
        if removable && let Some(s) = self.slots.remove(&id) {
            self.resident_bytes -= s.bytes;
        }
    }

    /// Releases the inputs a finished (or cancelled) work item held.
    pub fn release_inputs(&mut self, work: &Work) {
        for (input, _) in work.inputs() {
            if let Some(s) = self.slots.get_mut(input) {
                s.uses = s.uses.saturating_sub(1);
            }
            self.collect(*input);
        }
    }

    /// The inputs' buffers (cheap clones of shared handles), or the error that
    /// poisons them.
    pub fn gather(&self, inputs: &[(TensorId, TensorMeta)]) -> Result<Vec<Buffer>, ApiError> {
        inputs
            .iter()
            .map(|(id, _)| match self.state(*id) {
                Some(TensorState::Ready(b)) => Ok(b.clone()),
                Some(TensorState::Failed(e)) => Err(e.clone()),
                Some(TensorState::Pending) => Err(ApiError::new(
                    ErrorCode::DeviceFailure,
                    format!("tensor {} was used before it was produced", id.0),
                )),
                None => Err(missing(*id)),
            })
            .collect()
    }
}

fn missing(id: TensorId) -> ApiError {
    ApiError::new(ErrorCode::DeviceFailure, format!("tensor {} is not resident on the device", id.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_host_api::{DType, Op, UnaryOp};

    fn meta() -> TensorMeta {
        TensorMeta::new(DType::F32, vec![2]).unwrap()
    }

    fn buffer() -> Buffer {
        Buffer::Cpu(crate::device::CpuBuffer::from_le_bytes(DType::F32, &[0; 8]))
    }

    fn upload(id: u64) -> Work {
        Work::Upload { id: TensorId(id), meta: meta(), bytes: vec![0; 8] }
    }

    fn neg(id: u64, input: u64) -> Work {
        Work::Launch {
            id: TensorId(id),
            op: Op::Unary(UnaryOp::Neg),
            inputs: vec![(TensorId(input), meta())],
            out: meta(),
            scratch: None,
        }
    }

    #[test]
    fn a_read_of_a_pending_tensor_waits_for_it() {
        let mut table = TensorTable::default();
        table.queued(&upload(1));
        let (reply, _rx) = oneshot::channel();
        assert!(matches!(table.read(TensorId(1), meta(), reply), ReadOutcome::Waiting));
        let waiting = table.complete(TensorId(1), Ok((buffer(), 8)), Lane::Reserved);
        assert_eq!(waiting.len(), 1, "the read is handed back to be answered");
        let (reply, _rx) = oneshot::channel();
        assert!(matches!(table.read(TensorId(1), meta(), reply), ReadOutcome::Ready { lane: Lane::Reserved, .. }));
        assert_eq!(table.resident_bytes(), 8);
    }

    #[test]
    fn a_freed_tensor_stays_while_queued_kernels_read_it() {
        let mut table = TensorTable::default();
        table.queued(&upload(1));
        table.complete(TensorId(1), Ok((buffer(), 8)), Lane::Whole);
        let kernel = neg(2, 1);
        table.queued(&kernel);
        table.free(TensorId(1));
        assert_eq!(table.len(), 2, "the kernel still reads tensor 1");
        assert_eq!(table.gather(kernel.inputs()).unwrap().len(), 1);
        table.complete(TensorId(2), Ok((buffer(), 8)), Lane::Whole);
        table.release_inputs(&kernel);
        assert_eq!((table.len(), table.resident_bytes()), (1, 8), "tensor 1 is gone once the kernel ran");
        table.free(TensorId(2));
        assert_eq!((table.len(), table.resident_bytes()), (0, 0));
    }

    fn write(id: u64, dst: u64, src: u64) -> Work {
        Work::Launch {
            id: TensorId(id),
            op: Op::WriteRows { offset: 0 },
            inputs: vec![(TensorId(dst), meta()), (TensorId(src), meta())],
            out: TensorMeta::new(DType::U8, vec![0]).unwrap(),
            scratch: None,
        }
    }

    #[test]
    fn a_read_of_a_written_tensor_waits_for_the_write_and_its_lane() {
        let mut table = TensorTable::default();
        for id in [1, 2] {
            table.queued(&upload(id));
            table.complete(TensorId(id), Ok((buffer(), 8)), Lane::Whole);
        }
        let w = write(3, 1, 2);
        table.queued(&w);
        let (reply, _rx) = oneshot::channel();
        assert!(matches!(table.read(TensorId(1), meta(), reply), ReadOutcome::Waiting), "a write is queued");
        let (reply, _rx) = oneshot::channel();
        assert!(matches!(table.read(TensorId(2), meta(), reply), ReadOutcome::Ready { .. }), "the source is not");
        table.release_inputs(&w);
        let empty = Buffer::Cpu(crate::device::CpuBuffer::from_le_bytes(DType::U8, &[]));
        let waiting = table.complete(TensorId(3), Ok((empty, 0)), Lane::Remainder);
        let ids: Vec<TensorId> = waiting.iter().map(|(id, ..)| *id).collect();
        assert_eq!(ids, vec![TensorId(1)], "the destination's read is answered once written");
        let (reply, _rx) = oneshot::channel();
        assert!(
            matches!(table.read(TensorId(1), meta(), reply), ReadOutcome::Ready { lane: Lane::Remainder, .. }),
            "later reads wait for the writer's lane"
        );
    }

    #[test]
    fn a_read_waiting_for_a_pending_tensor_also_waits_for_the_writes_queued_into_it() {
        // Upload, write and read arrive in one intake, before the upload ran.
        let mut table = TensorTable::default();
        table.queued(&upload(1));
        table.queued(&upload(2));
        let w = write(3, 1, 2);
        table.queued(&w);
        let (reply, _rx) = oneshot::channel();
        assert!(matches!(table.read(TensorId(1), meta(), reply), ReadOutcome::Waiting));
        let waiting = table.complete(TensorId(1), Ok((buffer(), 8)), Lane::Whole);
        assert!(waiting.is_empty(), "the destination is not read before its write ran");
        table.complete(TensorId(2), Ok((buffer(), 8)), Lane::Whole);
        table.release_inputs(&w);
        let empty = Buffer::Cpu(crate::device::CpuBuffer::from_le_bytes(DType::U8, &[]));
        let waiting = table.complete(TensorId(3), Ok((empty, 0)), Lane::Whole);
        let ids: Vec<TensorId> = waiting.iter().map(|(id, ..)| *id).collect();
        assert_eq!(ids, vec![TensorId(1)], "answered once written");
    }

    #[test]
    fn a_failed_write_poisons_its_destination() {
        let mut table = TensorTable::default();
        for id in [1, 2] {
            table.queued(&upload(id));
            table.complete(TensorId(id), Ok((buffer(), 8)), Lane::Whole);
        }
        let w = write(3, 1, 2);
        table.queued(&w);
        table.release_inputs(&w);
        let e = ApiError::new(ErrorCode::DeviceFailure, "boom");
        table.complete(TensorId(3), Err(e.clone()), Lane::Whole);
        assert_eq!(table.gather(&[(TensorId(1), meta())]).unwrap_err(), e);
        assert_eq!(table.resident_bytes(), 8, "the poisoned destination holds no memory");
    }

    /// A `kv-attention` of one sequence: q, k, v (tensors 1–3) and the caches `k_cache`
    /// and `v_cache`, written in place; its output is a tensor of its own.
    fn kv_attention(id: u64, k_cache: u64, v_cache: u64) -> Work {
        use sluice_host_api::{KvAttentionArgs, KvSpan};
        let args = KvAttentionArgs { rope_base: 1e4, scale: 1.0, spans: vec![KvSpan { rows: 1, position: 0 }] };
        let inputs = [1, 2, 3, k_cache, v_cache].into_iter().map(|t| (TensorId(t), meta())).collect();
        Work::Launch { id: TensorId(id), op: Op::KvAttention(Box::new(args)), inputs, out: meta(), scratch: None }
    }

    #[test]
    fn an_op_writing_several_tensors_holds_back_their_reads_and_poisons_them_all() {
        let mut table = TensorTable::default();
        for id in 1..=5 {
            table.queued(&upload(id));
            table.complete(TensorId(id), Ok((buffer(), 8)), Lane::Whole);
        }
        let attend = kv_attention(6, 4, 5);
        table.queued(&attend);
        for (id, written) in [(1, false), (2, false), (3, false), (4, true), (5, true)] {
            let (reply, _rx) = oneshot::channel();
            let waits = matches!(table.read(TensorId(id), meta(), reply), ReadOutcome::Waiting);
            assert_eq!(waits, written, "tensor {id}: only the caches wait for the write");
        }
        table.release_inputs(&attend);
        let waiting = table.complete(TensorId(6), Ok((buffer(), 8)), Lane::Remainder);
        let mut ids: Vec<TensorId> = waiting.iter().map(|(id, ..)| *id).collect();
        ids.sort_by_key(|id| id.0);
        assert_eq!(ids, vec![TensorId(4), TensorId(5)], "both caches' reads are answered once written");
        for cache in [4, 5] {
            let (reply, _rx) = oneshot::channel();
            let outcome = table.read(TensorId(cache), meta(), reply);
            assert!(
                matches!(outcome, ReadOutcome::Ready { lane: Lane::Remainder, .. }),
                "cache {cache}: the writer's lane"
            );
        }
        // A failed one poisons both caches, and nothing else it read.
        let attend = kv_attention(7, 4, 5);
        table.queued(&attend);
        table.release_inputs(&attend);
        let e = ApiError::new(ErrorCode::DeviceFailure, "boom");
        table.complete(TensorId(7), Err(e.clone()), Lane::Whole);
        for cache in [4, 5] {
            assert_eq!(table.gather(&[(TensorId(cache), meta())]).unwrap_err(), e, "cache {cache}");
        }
        assert!(table.gather(&[(TensorId(1), meta()), (TensorId(2), meta()), (TensorId(3), meta())]).is_ok());
    }

    #[test]
    fn the_table_shrinks_after_a_burst() {
        let mut table = TensorTable::default();
        for id in 1..=10_000 {
            table.queued(&upload(id));
            table.complete(TensorId(id), Ok((buffer(), 8)), Lane::Whole);
        }
        for id in 1..=9_990 {
            table.free(TensorId(id));
        }
        let grown = table.slots.capacity();
        table.shrink_after_burst();
        assert!(table.slots.capacity() < grown / 4, "{} slots kept of {grown}", table.slots.capacity());
        assert_eq!((table.len(), table.resident_bytes()), (10, 80), "the live tensors stay");
    }

    #[test]
    fn a_failure_poisons_readers_and_later_ops() {
        let mut table = TensorTable::default();
        table.queued(&upload(1));
        let e = ApiError::new(ErrorCode::DeviceFailure, "boom");
        table.complete(TensorId(1), Err(e.clone()), Lane::Whole);
        let kernel = neg(2, 1);
        table.queued(&kernel);
        assert_eq!(table.gather(kernel.inputs()).unwrap_err(), e);
        let (reply, _rx) = oneshot::channel();
        assert!(matches!(table.read(TensorId(1), meta(), reply), ReadOutcome::Failed(_, got) if got == e));
        let (reply, _rx) = oneshot::channel();
        assert!(matches!(table.read(TensorId(9), meta(), reply), ReadOutcome::Failed(..)), "unknown tensor");
        assert!(table.gather(&[(TensorId(2), meta())]).is_err(), "a pending input cannot be used");
    }
}
