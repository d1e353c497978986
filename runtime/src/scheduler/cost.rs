//! The online cost model: how long a kernel will take, learned from how long
//! kernels took.
//!
//! Two levels: an exact entry per (op, shapes, dtypes), an exponentially weighted
//! average of measured durations; and, for shapes not seen yet, a rate per op family
//! (nanoseconds per unit of work: FLOPs for matmul, conv, linear and attention,
//! elements touched for the rest) learned from every measurement of that family. The scheduler uses the
//! estimate to decide whether a best-effort kernel fits the preemption budget and
//! must be sliced; fair share itself charges measured time, not estimates.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use sluice_host_api::{Op, TensorMeta};

use crate::device::Lane;

/// Weight of a new measurement in the averages.
const ALPHA: f64 = 0.2;

/// What the model needs to know about one kernel.
#[derive(Clone, Copy, Debug)]
pub struct KernelKey {
    exact: u64,
    family: &'static str,
    /// Units of work (FLOPs or elements).
    pub work: f64,
}

impl KernelKey {
    /// Describes `op` on inputs `inputs` producing `out`.
    pub fn new<'a, I>(op: &Op, inputs: I, out: &TensorMeta) -> KernelKey
    where
        I: Iterator<Item = &'a TensorMeta> + Clone,
    {
        let mut h = DefaultHasher::new();
        hash_op(op, &mut h);
        for m in inputs.clone() {
            m.hash(&mut h);
        }
        out.hash(&mut h);
        KernelKey { exact: h.finish(), family: op.name(), work: work_units(op, inputs, out) }
    }

    /// The same kernel on a lane of a partitioned device: it runs on fewer compute
    /// units there, so its exact entry is kept apart (the family rate is shared).
    pub fn on_lane(mut self, lane: Lane) -> KernelKey {
        if lane != Lane::Whole {
            self.exact ^= (lane.index() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        self
    }
}

/// Hashes an op's kind and parameters (floats by their bits) without formatting:
/// this runs once per kernel on the device thread.
fn hash_op(op: &Op, h: &mut DefaultHasher) {
    std::mem::discriminant(op).hash(h);
    match op {
        Op::Matmul(a) => (a.transpose_a, a.transpose_b).hash(h),
        Op::Binary(b) => b.hash(h),
        Op::Unary(u) => u.hash(h),
        Op::Affine { scale, bias } => (scale.to_bits(), bias.to_bits()).hash(h),
        Op::Softmax { scale } => scale.to_bits().hash(h),
        Op::LayerNorm { eps } => eps.to_bits().hash(h),
        Op::Embedding | Op::Argmax => {}
        Op::Sample(a) => (a.temperature.to_bits(), a.top_k, a.top_p.to_bits()).hash(h),
        // Not the offset: every decode step writes at another.
        Op::WriteRows { .. } => {}
        Op::Reduce(r) => r.hash(h),
        Op::Reshape(s) | Op::Permute(s) => s.hash(h),
        Op::Slice(s) => s.hash(h),
        Op::Concat { axis } => axis.hash(h),
        Op::Cast(d) => d.hash(h),
        Op::Conv2d(c) => c.hash(h),
        Op::Pool2d(p) => p.hash(h),
        // Not the offset: every decode step has another, and it changes no cost.
        Op::Rope { base, .. } => base.to_bits().hash(h),
        Op::Linear { transpose_w, activation } => (transpose_w, activation).hash(h),
        Op::AddLayerNorm { eps } | Op::RmsNorm { eps } => eps.to_bits().hash(h),
        Op::Attention { heads, scale } => (heads, scale.to_bits()).hash(h),
        // Not kv-len: it grows every decode step; the work estimate carries it.
        Op::GqaAttention { scale, .. } => scale.to_bits().hash(h),
        // Not the positions: they move every decode step; the work estimate carries them.
        Op::KvAttention(a) => (a.rope_base.to_bits(), a.scale.to_bits(), a.spans.len()).hash(h),
    }
}

/// FLOPs for contractions (matmul, conv2d, linear, attention), elements touched for
/// everything else (add-layer-norm: its four inputs and the output).
pub fn work_units<'a>(op: &Op, mut inputs: impl Iterator<Item = &'a TensorMeta>, out: &TensorMeta) -> f64 {
    match op {
        Op::Matmul(args) => {
            let Some(a) = inputs.next() else { return 0.0 };
            let k = if args.transpose_a { a.shape[a.rank() - 2] } else { a.shape[a.rank() - 1] };
            2.0 * out.numel() as f64 * k as f64
        }
        Op::Conv2d(_) => {
            let Some(w) = inputs.nth(1) else { return 0.0 };
            2.0 * out.numel() as f64 * (w.shape[1] * w.shape[2] * w.shape[3]) as f64
        }
        // 2·M·N·K: every output element is a dot product over the input's last axis.
        Op::Linear { .. } => {
            let Some(x) = inputs.next() else { return 0.0 };
            2.0 * out.numel() as f64 * x.shape.last().copied().unwrap_or(0) as f64
        }
        // 4·B·H·Sq·Sk·D = 4·(B·Sq·H·D)·Sk: the two products q·kᵀ and p·v.
        Op::Attention { .. } => {
            let Some(k) = inputs.nth(1) else { return 0.0 };
            4.0 * out.numel() as f64 * k.shape.get(1).copied().unwrap_or(0) as f64
        }
        // 4·S·H·D·kv-len: q·kᵀ and p·v over the cache positions read (about half
        // of them for a prompt, all for a decode step).
        Op::GqaAttention { kv_len, .. } => 4.0 * out.numel() as f64 * f64::from(*kv_len),
        // Each span as a `gqa-attention` over its caches' first `position + rows`.
        Op::KvAttention(a) => {
            let Some(q) = inputs.next() else { return 0.0 };
            let per_row = q.shape[1..].iter().map(|&n| f64::from(n)).product::<f64>();
            4.0 * per_row * a.row_positions() as f64
        }
        // The rows written, not the destination they go into.
        Op::WriteRows { .. } => inputs.nth(1).map_or(0.0, |src| src.numel() as f64),
        _ => (inputs.map(TensorMeta::numel).sum::<usize>() + out.numel()) as f64,
    }
}

/// Learned kernel costs.
#[derive(Debug, Default)]
pub struct CostModel {
    exact: HashMap<u64, f64>,
    rates: HashMap<&'static str, f64>,
}

/// A fixed per-kernel overhead assumed before anything is measured.
const DEFAULT_OVERHEAD_NS: f64 = 500.0;

impl CostModel {
    /// Estimated duration of the kernel.
    pub fn estimate(&self, key: &KernelKey) -> Duration {
        let ns = match self.exact.get(&key.exact) {
            Some(&ns) => ns,
            None => {
                let rate = self.rates.get(key.family).copied().unwrap_or_else(|| default_rate(key.family));
                DEFAULT_OVERHEAD_NS + rate * key.work
            }
        };
        Duration::from_nanos(ns as u64)
    }

    /// Feeds one measurement.
    pub fn record(&mut self, key: &KernelKey, measured: Duration) {
        let ns = measured.as_nanos() as f64;
        let e = self.exact.entry(key.exact).or_insert(ns);
        *e += ALPHA * (ns - *e);
        if key.work > 0.0 {
            let sample = (ns - DEFAULT_OVERHEAD_NS).max(0.0) / key.work;
            let r = self.rates.entry(key.family).or_insert(sample);
            *r += ALPHA * (sample - *r);
        }
    }

    /// Whether this exact kernel (op, shapes, dtypes, lane) was measured before.
    pub fn knows(&self, key: &KernelKey) -> bool {
        self.exact.contains_key(&key.exact)
    }

    /// Distinct kernel shapes seen.
    pub fn known_shapes(&self) -> usize {
        self.exact.len()
    }
}

/// Prior rates: ~20 GFLOP/s for contractions, ~1 ns per element otherwise.
fn default_rate(family: &str) -> f64 {
    match family {
        "matmul" | "conv2d" | "linear" | "attention" => 0.05,
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_host_api::{DType, MatmulArgs};

    fn meta(shape: &[u32]) -> TensorMeta {
        TensorMeta::new(DType::F32, shape.to_vec()).unwrap()
    }

    #[test]
    fn learns_exact_shapes_and_generalises_by_family() {
        let mut model = CostModel::default();
        let op = Op::Matmul(MatmulArgs::default());
        let small = KernelKey::new(&op, [meta(&[64, 64]), meta(&[64, 64])].iter(), &meta(&[64, 64]));
        let big = KernelKey::new(&op, [meta(&[512, 64]), meta(&[64, 64])].iter(), &meta(&[512, 64]));
        assert_eq!(big.work, 8.0 * small.work);
        for _ in 0..50 {
            model.record(&small, Duration::from_micros(100));
        }
        let exact = model.estimate(&small).as_micros();
        assert!((99..=101).contains(&exact), "{exact}");
        // Never measured, but 8× the work of a known shape of the same family.
        let guess = model.estimate(&big).as_micros();
        assert!((700..=900).contains(&guess), "{guess}");
    }

    #[test]
    fn fused_ops_count_flops_and_hash_their_parameters() {
        use sluice_host_api::UnaryOp;
        // linear: x [2, 3, 8] · w [8, 5] → 2·M·N·K with M = 6.
        let lin = Op::Linear { transpose_w: false, activation: None };
        let (x, w, b, y) = (meta(&[2, 3, 8]), meta(&[8, 5]), meta(&[5]), meta(&[2, 3, 5]));
        assert_eq!(work_units(&lin, [&x, &w, &b].into_iter(), &y), 2.0 * 6.0 * 5.0 * 8.0);
        // attention: B 2, Sq 3, Sk 7, H·D = 12 → 4·B·H·Sq·Sk·D.
        let att = Op::Attention { heads: 4, scale: 0.5 };
        let (q, kv) = (meta(&[2, 3, 12]), meta(&[2, 7, 12]));
        assert_eq!(work_units(&att, [&q, &kv, &kv].into_iter(), &q), 4.0 * 2.0 * 3.0 * 7.0 * 12.0);
        // add-layer-norm: elements of x, residual, gamma, beta and the output.
        let aln = Op::AddLayerNorm { eps: 1e-5 };
        let (g, z) = (meta(&[12]), meta(&[2, 3, 12]));
        assert_eq!(work_units(&aln, [&z, &z, &g, &g].into_iter(), &z), (72 * 3 + 24) as f64);
        // Parameters are part of the exact key.
        let key = |op: &Op| KernelKey::new(op, [&x, &w].into_iter(), &y).exact;
        let gelu = Op::Linear { transpose_w: false, activation: Some(UnaryOp::Gelu) };
        let relu = Op::Linear { transpose_w: false, activation: Some(UnaryOp::Relu) };
        assert_ne!(key(&lin), key(&gelu));
        assert_ne!(key(&gelu), key(&relu));
        assert_ne!(key(&Op::Attention { heads: 4, scale: 0.5 }), key(&Op::Attention { heads: 2, scale: 0.5 }));
        assert_ne!(key(&Op::AddLayerNorm { eps: 1e-5 }), key(&Op::AddLayerNorm { eps: 1e-6 }));
    }
}
