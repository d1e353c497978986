//! A wrapper that times every upload, kernel and download of a real device on the
//! host clock, by op, for the benchmarks' breakdowns (the MiniLM kernel table). Only
//! meaningful for a synchronous device such as the CPU.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_host_api::{Op, TensorMeta};

use crate::device::{Buffer, Device, DeviceError, DeviceInfo, PartitionState, RowSlicing};

/// Calls and time by op, shared between the device thread and the benchmark.
#[derive(Clone, Default)]
pub struct KernelTimes(Arc<Mutex<BTreeMap<String, (u64, Duration)>>>);

impl KernelTimes {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, (u64, Duration)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, op: String, elapsed: Duration) {
        let mut map = self.lock();
        let entry = map.entry(op).or_default();
        entry.0 += 1;
        entry.1 += elapsed;
    }

    pub fn reset(&self) {
        self.lock().clear();
    }

    /// The calls and time per op so far, leaving the record empty.
    pub fn take(&self) -> BTreeMap<String, (u64, Duration)> {
        std::mem::take(&mut *self.lock())
    }
}

/// `inner`, with every call it runs timed into `times`.
pub struct ProfilingDevice {
    pub inner: Box<dyn Device>,
    pub times: KernelTimes,
}

/// The breakdown's name for an op: the family, the elementwise op, and for products
/// whether the right operand is a weight matrix (a linear layer) or an activation.
fn op_key(op: &Op, inputs: &[(&Buffer, &TensorMeta)]) -> String {
    match op {
        Op::Matmul(_) if inputs.get(1).is_some_and(|(_, m)| m.rank() == 2) => "matmul (linear)".into(),
        Op::Matmul(_) => "matmul (attention)".into(),
        Op::Binary(b) => format!("{b:?}").to_lowercase(),
        Op::Unary(u) => format!("{u:?}").to_lowercase(),
        other => other.name().into(),
    }
}

impl ProfilingDevice {
    fn timed<T>(&self, key: impl FnOnce() -> String, call: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let result = call();
        self.times.add(key(), t0.elapsed());
        result
    }
}

impl Device for ProfilingDevice {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn adopt_scheduler_thread(&self) {
        self.inner.adopt_scheduler_thread()
    }

    fn upload(&self, meta: &TensorMeta, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        self.timed(|| "upload".into(), || self.inner.upload(meta, bytes))
    }

    fn launch(&self, op: &Op, inputs: &[(&Buffer, &TensorMeta)], out: &TensorMeta) -> Result<Buffer, DeviceError> {
        self.timed(|| op_key(op, inputs), || self.inner.launch(op, inputs, out))
    }

    fn download(&self, buffer: &Buffer, meta: &TensorMeta) -> Result<Vec<u8>, DeviceError> {
        self.timed(|| "download".into(), || self.inner.download(buffer, meta))
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.inner.synchronize()
    }

    fn partition(&self) -> PartitionState {
        self.inner.partition()
    }

    fn rows(&self) -> Option<&dyn RowSlicing> {
        self.inner.rows().map(|_| self as &dyn RowSlicing)
    }
}

impl RowSlicing for ProfilingDevice {
    fn launch_rows(
        &self,
        op: &Op,
        inputs: &[(&Buffer, &TensorMeta)],
        out: &TensorMeta,
        rows: Range<usize>,
    ) -> Result<Buffer, DeviceError> {
        let inner = self.inner.rows().ok_or_else(|| DeviceError::Failure("the device cannot slice rows".into()))?;
        self.timed(|| op_key(op, inputs), || inner.launch_rows(op, inputs, out, rows))
    }
}
