//! The CPU device: the reference kernels of `sluice-backend-cpu` behind [`Device`].

use sluice_backend_cpu::{CpuBuffer, Team};
use std::ops::Range;
use std::sync::OnceLock;

use sluice_host_api::{DType, Op, TensorMeta};

use super::{Buffer, Device, DeviceError, DeviceInfo, DeviceKind, PartitionState, RowSlicing, ScratchFn};

/// The host CPU as a device. Kernels run in the device's own thread pool, so the
/// number of cores they may take is a setting, and the rest stay free for the host
/// (HTTP, guests' own code).
///
/// The scheduler's thread is one of the pool's threads
/// ([`Device::adopt_scheduler_thread`]): a kernel runs where it is launched and only
/// its parallel parts go to the other threads. A pool of its own would cost two thread
/// wake-ups on every kernel's path (the pool thread that takes the kernel, then the
/// scheduler waiting for it), tens of microseconds each on a busy machine: over a quarter of a
/// decode step's time for a small LLM, whose hundreds of kernels per token are each short.
///
/// The kernels that decode splits over the cores (the quantized linear of a few rows,
/// attention) run on a [`Team`] instead, whose helpers spin between kernels rather than
/// sleep (see `sluice_backend_cpu::Team`); the rest of the parallel work runs on rayon.
pub struct CpuDevice {
    threads: usize,
    pool: OnceLock<rayon::ThreadPool>,
    team: OnceLock<Option<Team>>,
    memory_bytes: u64,
}

impl CpuDevice {
    /// A device using every core.
    pub fn new() -> Self {
        Self::with_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// A device whose kernels use `threads` cores (at least one).
    pub fn with_threads(threads: usize) -> Self {
        CpuDevice {
            threads: threads.max(1),
            pool: OnceLock::new(),
            team: OnceLock::new(),
            memory_bytes: physical_memory_bytes(),
        }
    }

    /// Runs `f` with the device's team entered (made on first use; without one, when
    /// its threads could not be started, the team's kernels run on rayon).
    fn with_team<R>(&self, f: impl FnOnce() -> R) -> R {
        let team = self.team.get_or_init(|| {
            Team::new(self.threads, "sluice-team")
                .inspect_err(|e| tracing::warn!(error = %e, "the CPU device's kernel team could not start"))
                .ok()
        });
        match team {
            Some(team) => team.enter(f),
            None => f(),
        }
    }

    /// The kernel threads: made on first use unless the scheduler's thread joined them.
    fn pool(&self) -> &rayon::ThreadPool {
        self.pool.get_or_init(|| self.build_pool(false).expect("creating the CPU device's thread pool"))
    }

    fn build_pool(&self, with_current_thread: bool) -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
        let builder =
            rayon::ThreadPoolBuilder::new().num_threads(self.threads).thread_name(|i| format!("sluice-cpu-{i}"));
        // With the current thread, it is index 0 and keeps its own name.
        if with_current_thread { builder.use_current_thread().build() } else { builder.build() }
    }
}

impl Default for CpuDevice {
    fn default() -> Self {
        Self::new()
    }
}

fn physical_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(8 << 30)
}

/// Below this much work (elements touched, or multiply-adds), kernels of the CPU
/// backend stay single-threaded.
const SMALL_WORK: usize = 1 << 15;

fn is_small(op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> bool {
    let work = match op {
        Op::Matmul(_) | Op::Conv2d(_) => {
            // Multiply-adds: output elements times the reduced length.
            let reduced: usize =
                inputs.get(1).map_or(1, |(_, m)| m.numel()) / out.shape.last().copied().unwrap_or(1).max(1) as usize;
            out.numel().saturating_mul(reduced.max(1))
        }
        // Multiply-adds of the product(s): out · k for linear, 2 · out · sk for attention.
        Op::Linear { .. } => {
            let k = inputs.first().and_then(|(_, m)| m.shape.last().copied()).unwrap_or(1) as usize;
            out.numel().saturating_mul(k.max(1))
        }
        Op::GqaAttention { kv_len, .. } => out.numel().saturating_mul(2 * (*kv_len as usize).max(1)),
        // As a `gqa-attention` per sequence, over its `position + rows` positions.
        Op::KvAttention(a) => {
            let per_row = out.numel() / out.shape.first().copied().unwrap_or(1).max(1) as usize;
            per_row.saturating_mul(2 * (a.row_positions() as usize).max(1))
        }
        Op::Attention { .. } => {
            let sk = inputs.get(1).and_then(|(_, m)| m.shape.get(1).copied()).unwrap_or(1) as usize;
            out.numel().saturating_mul(2 * sk.max(1))
        }
        _ => inputs.iter().map(|(_, m)| m.numel()).sum::<usize>() + out.numel(),
    };
    work < SMALL_WORK
}

/// The CPU buffers of `inputs`, with their metadata.
fn cpu_inputs<'a>(
    inputs: &[(&'a Buffer, &'a TensorMeta)],
) -> Result<Vec<(&'a CpuBuffer, &'a TensorMeta)>, DeviceError> {
    inputs.iter().map(|(b, m)| Ok((cpu(b)?, *m))).collect()
}

fn cpu(buffer: &Buffer) -> Result<&CpuBuffer, DeviceError> {
    match buffer {
        Buffer::Cpu(b) => Ok(b),
        _ => Err(DeviceError::Failure("buffer of another device passed to the CPU".into())),
    }
}

impl Device for CpuDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            kind: DeviceKind::Cpu,
            name: format!("CPU ({} threads)", self.threads),
            memory_bytes: self.memory_bytes,
            compute_units: self.threads as u32,
        }
    }

    fn adopt_scheduler_thread(&self) {
        if self.pool.get().is_some() {
            return;
        }
        // Fails only when this thread already belongs to a rayon pool; the device then
        // keeps a pool of its own threads.
        match self.build_pool(true) {
            Ok(pool) => {
                let _ = self.pool.set(pool);
            }
            Err(e) => tracing::debug!(error = %e, "the CPU device's kernels run on a pool of their own"),
        }
    }

    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        if bytes.len() != meta.byte_len() {
            return Err(DeviceError::Failure(format!(
                "{} bytes uploaded for a tensor of {} bytes",
                bytes.len(),
                meta.byte_len()
            )));
        }
        Ok(Buffer::Cpu(CpuBuffer::from_le_bytes(meta.dtype, bytes)))
    }

    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        let cpu_inputs = cpu_inputs(inputs)?;
        if let (Op::WriteRows { offset }, &[dst, src]) = (op, cpu_inputs.as_slice()) {
            // SAFETY: the device runs its kernels and downloads one at a time on the
            // scheduler's thread (the `Device` contract), so nothing else touches `dst`.
            let written = unsafe { sluice_backend_cpu::write_rows(*offset, dst, src, out) };
            return written.map(Buffer::Cpu).map_err(|e| DeviceError::Failure(e.to_string()));
        }
        let run = || match op {
            // SAFETY: as for the write above; the host gives each cache once, and never
            // a cache as q, k or v.
            Op::KvAttention(_) => unsafe { sluice_backend_cpu::kv_attention(&cpu_inputs, op, out) },
            _ => sluice_backend_cpu::launch(op, &cpu_inputs, out),
        };
        // Where this thread is not one of the pool's (a device used directly, not through
        // a scheduler), handing a kernel to the pool wakes one of its threads; small
        // kernels, which run single-threaded anyway (on the team too), run right here
        // instead.
        let result = if is_small(op, inputs, out) { run() } else { self.pool().install(|| self.with_team(run)) };
        result.map(Buffer::Cpu).map_err(|e| DeviceError::Failure(e.to_string()))
    }

    fn download(&self, buffer: &Buffer, _meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        Ok(cpu(buffer)?.to_le_bytes())
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn partition(&self) -> PartitionState {
        PartitionState::None {
            reason: "the CPU backend has no spatial partitions (priorities and preemption only)".into(),
        }
    }

    fn rows(&self) -> Option<&dyn RowSlicing> {
        Some(self)
    }

    fn scratch(&self) -> Option<ScratchFn> {
        Some(scratch_bytes)
    }
}

/// The CPU kernels' scratch, an upper estimate: f16/bf16 inputs of float kernels are
/// read as f32 copies; a convolution that is not direct unrolls its input (im2col,
/// one `k × p` block per thread); attention holds one block of scores (at most
/// `sq × sk`) per thread; a bf16 matmul computes in an f32 copy of its output; a linear
/// with a block-quantized weight dequantizes panels of it, a cast from a block format
/// dequantizes into an f32 copy.
fn scratch_bytes(op: &Op, inputs: &[&TensorMeta], out: &TensorMeta, threads: u32) -> u64 {
    const F32: u64 = 4;
    let threads = u64::from(threads.max(1));
    let numel = |m: &TensorMeta| m.numel() as u64;
    let dim = |m: Option<&&TensorMeta>, i: usize| m.and_then(|m| m.shape.get(i)).map_or(1, |&d| u64::from(d));
    let floats_copied = || -> u64 {
        inputs.iter().filter(|m| matches!(m.dtype, DType::F16 | DType::BF16)).map(|m| numel(m) * F32).sum()
    };
    match op {
        Op::Conv2d(_) => {
            // Weight [oc, cg, kh, kw]: k = cg·kh·kw; output [n, oc, oh, ow]: p = oh·ow.
            let w = inputs.get(1);
            let k = dim(w, 1) * dim(w, 2) * dim(w, 3);
            let p = out.shape.iter().skip(2).map(|&d| u64::from(d)).product::<u64>();
            floats_copied() + threads * k * p * F32
        }
        Op::Attention { .. } => {
            let (sq, sk) = (dim(inputs.first(), 1), dim(inputs.get(1), 1));
            floats_copied() + threads * sq * sk * F32
        }
        Op::Linear { .. } if inputs.get(1).is_some_and(|w| w.dtype.is_quantized()) => {
            let (n, k) = (dim(inputs.get(1), 0), dim(inputs.get(1), 1));
            let m = numel(out) / n.max(1);
            sluice_backend_cpu::quantized_linear_scratch_bytes(m as usize, k as usize, n as usize, threads as usize)
        }
        Op::Cast(_) if inputs.first().is_some_and(|x| x.dtype.is_quantized()) => numel(out) * F32,
        Op::Matmul(_) | Op::Linear { .. } if out.dtype == DType::BF16 => floats_copied() + numel(out) * F32,
        Op::Matmul(_)
        | Op::Linear { .. }
        | Op::Softmax { .. }
        | Op::LayerNorm { .. }
        | Op::AddLayerNorm { .. }
        | Op::RmsNorm { .. } => floats_copied(),
        _ => 0,
    }
}

impl RowSlicing for CpuDevice {
    fn launch_rows(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
        rows: Range<usize>,
    ) -> Result<Buffer, DeviceError> {
        let cpu_inputs = cpu_inputs(inputs)?;
        self.pool()
            .install(|| self.with_team(|| sluice_backend_cpu::launch_rows(op, &cpu_inputs, out, rows)))
            .map(Buffer::Cpu)
            .map_err(|e| DeviceError::Failure(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_of(pool: &rayon::ThreadPool) -> std::thread::ThreadId {
        pool.install(|| std::thread::current().id())
    }

    #[test]
    fn an_adopted_thread_runs_what_it_hands_the_pool_and_a_plain_one_hands_it_over() {
        std::thread::spawn(|| {
            let device = CpuDevice::with_threads(2);
            device.adopt_scheduler_thread();
            assert_eq!(thread_of(device.pool()), std::thread::current().id());
            assert_eq!(device.pool().current_num_threads(), 2, "the adopted thread is one of the two");
        })
        .join()
        .expect("the adopting thread");
        let device = CpuDevice::with_threads(1);
        assert_ne!(thread_of(device.pool()), std::thread::current().id());
    }
}
