//! The f32 hot loops of the CPU backend at the machine's vector width: `exp`, GELU,
//! the in-place linear epilogue (bias + activation), softmax rows, layer-norm rows and
//! the residual add.
//!
//! Each kernel is written once as plain loops that LLVM vectorises, and compiled three
//! times by [`multiversion!`]: for AVX-512 (x86-64-v4), for AVX2 + FMA (x86-64-v3) and for
//! the baseline; the widest the CPU supports is chosen at run time (one cached CPUID
//! check). The loops never let the compiler fuse or reorder arithmetic (Rust does not
//! contract `a * b + c`), and every sum runs in [`LANES`] fixed lanes combined in a fixed
//! order, so the three versions compute bit-for-bit the same results: which one runs
//! changes the speed only.
//!
//! Accuracy: [`exp`] has a relative error of a few ulp for arguments in `[-87, 88]` and
//! is 0 below; [`gelu`] is the exact form `x Φ(x)` with `Φ` from a rational-exponential
//! `erfc` (relative error of `erfc` ≤ 1.2e-7 in exact arithmetic). Measured over a dense
//! grid of [-12, 12] against the f64 erf form (`tests::gelu_error_on_a_dense_grid` pins
//! the bounds): absolute error ≤ 1.2e-7 · max(|x|, 1), relative ≤ 3e-6 for |x| ≤ 5.

/// Lanes of every lane-parallel sum; fixed so that sums do not depend on the vector width.
pub(crate) const LANES: usize = 16;

/// Compiles `fn name(args) -> ret { body }` for AVX-512, AVX2 + FMA and the baseline,
/// and dispatches to the widest the CPU has. The body must be safe code.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,bmi2")]
                fn v4($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma,bmi2")]
                fn v3($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                match $crate::simd::level() {
                    // SAFETY: `level` reported the features these versions were compiled for.
                    $crate::simd::Level::V4 => return unsafe { v4($($arg),*) },
                    $crate::simd::Level::V3 => return unsafe { v3($($arg),*) },
                    $crate::simd::Level::Base => {}
                }
            }
            body($($arg),*)
        }
    };
}

pub(crate) use multiversion;

/// The instruction-set level [`multiversion!`] dispatches on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// AVX-512 F/VL/DQ/BW with AVX2, FMA, BMI2 and F16C.
    V4,
    /// AVX2, FMA, BMI2 and F16C.
    V3,
    /// Whatever the build targets (SSE2 on x86-64).
    Base,
}

/// The widest level this CPU supports (detected once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn level() -> Level {
    use std::sync::OnceLock;
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let v3 = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("bmi2")
            && is_x86_feature_detected!("f16c");
        let v4 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512bw");
        if v3 && v4 {
            Level::V4
        } else if v3 {
            Level::V3
        } else {
            Level::Base
        }
    })
}

/// Whether the CPU has AVX-512 VNNI and VL (detected once), for the Q8 dot kernel's
/// `vpdpbusd` form (`q8.rs`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn vnni() -> bool {
    use std::sync::OnceLock;
    static VNNI: OnceLock<bool> = OnceLock::new();
    *VNNI.get_or_init(|| is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl"))
}

/// The widest level this CPU supports (always the baseline off x86-64).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn level() -> Level {
    Level::Base
}

/// The vector width the CPU kernels (and gemm's) run at on this machine, in words.
pub fn vector_width() -> &'static str {
    match level() {
        Level::V4 => "AVX-512 (x86-64-v4)",
        Level::V3 => "AVX2 + FMA (x86-64-v3)",
        Level::Base => "baseline (no AVX2)",
    }
}

const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
const EXP_HI: f32 = 88.0;
const EXP_LO: f32 = -87.0;

/// `e^x` in f32 without branches (vectorises): 0 below -87, and only for `x ≤ 88`
/// (the callers' arguments are never positive beyond that); NaN stays NaN.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let xc = x.clamp(EXP_LO, EXP_HI);
    let t = xc * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    // Cody–Waite reduction: r = x - n ln 2 with ln 2 split in two parts.
    let r = xc - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * (r * r) + r + 1.0;
    // 2^n from the low bits of `t` (n + the magic number's mantissa).
    let bits = (t.to_bits().wrapping_sub(MAGIC.to_bits()) as i32 + 127) << 23;
    let y = e * f32::from_bits(bits as u32);
    if x < EXP_LO { 0.0 } else { y }
}

/// GELU, `x Φ(x)` with the exact normal CDF `Φ(x) = erfc(-x/√2) / 2`; `erfc` is the
/// rational-exponential form of Numerical Recipes (fractional error < 1.2e-7), evaluated
/// on `|x|/√2` so that it stays accurate (relatively) for negative `x`. Branch-free.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let mut p = 0.170_872_77f32;
    p = p * t - 0.822_152_23;
    p = p * t + 1.488_515_9;
    p = p * t - 1.135_204;
    p = p * t + 0.278_868_07;
    p = p * t - 0.186_288_06;
    p = p * t + 0.096_784_18;
    p = p * t + 0.374_091_96;
    p = p * t + 1.000_023_7;
    p = p * t - 1.265_512_2;
    // erfc(z) / 2 = Φ(-|x|)
    let half_erfc = 0.5 * t * exp(p - z * z);
    let y = if x > 0.0 { x * (1.0 - half_erfc) } else { x * half_erfc };
    if x == f32::NEG_INFINITY { -0.0 } else { y }
}

multiversion! {
    /// GELU of every element, in place.
    pub(crate) fn gelu_in_place(x: &mut [f32]) {
        for v in x.iter_mut() {
            *v = gelu(*v);
        }
    }
}

multiversion! {
    /// `row[j] += bias[j]` over every `bias.len()`-element row of `data`, then GELU
    /// when `gelu_too`: the linear epilogue, in place while the rows are in cache.
    pub(crate) fn bias_gelu_rows(data: &mut [f32], bias: &[f32], gelu_too: bool) {
        let n = bias.len();
        for row in data.chunks_exact_mut(n) {
            if gelu_too {
                for (v, &b) in row.iter_mut().zip(bias) {
                    *v = gelu(*v + b);
                }
            } else {
                for (v, &b) in row.iter_mut().zip(bias) {
                    *v += b;
                }
            }
        }
    }
}

/// Lane-parallel maximum (NaN-propagating) of `row`.
#[inline(always)]
fn max_lanes(row: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut nan = false;
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
            nan |= v.is_nan();
        }
    }
    for &v in tail {
        acc[0] = if v > acc[0] { v } else { acc[0] };
        nan |= v.is_nan();
    }
    if nan {
        return f32::NAN;
    }
    acc.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// Lane-parallel f32 sum of `row`, combined in a fixed order.
#[inline(always)]
fn sum_lanes(row: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        *a += v;
    }
    pairwise(acc)
}

/// Sums 16 lanes as a balanced tree (a fixed order).
#[inline(always)]
fn pairwise(mut acc: [f32; LANES]) -> f32 {
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    acc[0]
}

/// Lane-parallel f32 dot product of `a` and `b` (equal lengths), combined in a fixed order.
#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((s, &x), &y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    for ((s, &x), &y) in acc.iter_mut().zip(ta).zip(tb) {
        *s += x * y;
    }
    pairwise(acc)
}

multiversion! {
    /// One query row's attention over `scores.len()` cached positions: key and value
    /// `j` are `keys[j · stride..][..d]` and `values[j · stride..][..d]` (`d = q.len()`,
    /// the slices starting at the row's kv head). Scores `q · k · scale` (lane-parallel
    /// dots), their [`softmax_row`], then `out = Σ p_j v_j` in position order. `scores`
    /// is scratch.
    pub(crate) fn attend_row(
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        stride: usize,
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        scores_into(q, keys, stride, scale, scores);
        softmax_row(scores);
        weighted_sum(scores, values, stride, out);
    }
}

/// `scores[j] = (q · k_j) · scale` by [`dot_lanes`], `k_j = keys[j · stride..][..d]`.
/// For the common head sizes (64, 128) the length is known at compile time, so each dot
/// runs in whole vectors; the generic loop vectorizes across positions instead, in
/// 128-bit pieces. The same operations in the same order, so the same bits.
#[inline(always)]
fn scores_into(q: &[f32], keys: &[f32], stride: usize, scale: f32, scores: &mut [f32]) {
    match q.len() {
        64 => scores_of::<64>(q, keys, stride, scale, scores),
        128 => scores_of::<128>(q, keys, stride, scale, scores),
        _ => scores_any(q, keys, stride, scale, scores),
    }
}

#[inline(always)]
fn scores_any(q: &[f32], keys: &[f32], stride: usize, scale: f32, scores: &mut [f32]) {
    for (j, score) in scores.iter_mut().enumerate() {
        *score = dot_lanes(q, &keys[j * stride..][..q.len()]) * scale;
    }
}

#[inline(always)]
fn scores_of<const D: usize>(q: &[f32], keys: &[f32], stride: usize, scale: f32, scores: &mut [f32]) {
    let q: &[f32; D] = q.try_into().expect("D elements");
    for (j, score) in scores.iter_mut().enumerate() {
        let k: &[f32; D] = keys[j * stride..][..D].try_into().expect("D keys");
        *score = dot_lanes(q, k) * scale;
    }
}

/// `out = Σ_j w_j v_j` over the weights `w` in position order, `v_j =
/// values[j · stride..][..out.len()]`, each element's products added one after the other
/// from zero. The common head sizes (64, 128) keep the sums in registers across the
/// positions (one load, multiply and add per element and position; the generic loop
/// reloads and stores `out` for every position): the same operations in the same
/// order, so the same bits.
#[inline(always)]
fn weighted_sum(weights: &[f32], values: &[f32], stride: usize, out: &mut [f32]) {
    match out.len() {
        64 => weighted_sum_of::<64>(weights, values, stride, out),
        128 => weighted_sum_of::<128>(weights, values, stride, out),
        _ => weighted_sum_any(weights, values, stride, out),
    }
}

#[inline(always)]
fn weighted_sum_any(weights: &[f32], values: &[f32], stride: usize, out: &mut [f32]) {
    let d = out.len();
    out.fill(0.0);
    for (j, &w) in weights.iter().enumerate() {
        for (o, &v) in out.iter_mut().zip(&values[j * stride..][..d]) {
            *o += w * v;
        }
    }
}

#[inline(always)]
fn weighted_sum_of<const D: usize>(weights: &[f32], values: &[f32], stride: usize, out: &mut [f32]) {
    let mut acc = [0.0f32; D];
    for (j, &w) in weights.iter().enumerate() {
        let v: &[f32; D] = values[j * stride..][..D].try_into().expect("D values");
        for (a, &v) in acc.iter_mut().zip(v) {
            *a += w * v;
        }
    }
    out.copy_from_slice(&acc);
}

multiversion! {
    /// Softmax of one row in place: subtracts the maximum, exponentiates, divides by the
    /// sum. A row whose every element is `-inf` becomes zeros; NaN or `+inf` gives NaN.
    pub(crate) fn softmax_row(row: &mut [f32]) {
        let max = max_lanes(row);
        if max == f32::NEG_INFINITY {
            row.fill(0.0);
            return;
        }
        for v in row.iter_mut() {
            *v = exp(*v - max);
        }
        let inv = 1.0 / sum_lanes(row);
        for v in row.iter_mut() {
            *v *= inv;
        }
    }
}

multiversion! {
    /// Layer norm of every `g.len()`-element row of `data` in place: mean and biased
    /// variance (two passes over the row, lane-parallel sums), then `(v - mean) · rstd · g + b`.
    pub(crate) fn normalize_rows(data: &mut [f32], g: &[f32], b: &[f32], eps: f32) {
        let width = g.len();
        let n = width as f32;
        for row in data.chunks_exact_mut(width) {
            let mean = sum_lanes(row) / n;
            let mut acc = [0.0f32; LANES];
            let chunks = row.chunks_exact(LANES);
            let tail = chunks.remainder();
            for c in chunks {
                for (a, &v) in acc.iter_mut().zip(c) {
                    let d = v - mean;
                    *a += d * d;
                }
            }
            for (a, &v) in acc.iter_mut().zip(tail) {
                let d = v - mean;
                *a += d * d;
            }
            let var = pairwise(acc) / n;
            let rstd = 1.0 / (var + eps).sqrt();
            for ((v, &g), &b) in row.iter_mut().zip(g).zip(b) {
                *v = (*v - mean) * rstd * g + b;
            }
        }
    }
}

multiversion! {
    /// `row[j] = row[j] · scale + mask[j]` (the logits of a masked softmax).
    pub(crate) fn scale_add_row(row: &mut [f32], scale: f32, mask: &[f32]) {
        for (v, &m) in row.iter_mut().zip(mask) {
            *v = *v * scale + m;
        }
    }
}

multiversion! {
    /// `row[j] = row[j] · scale + m` (a mask broadcast along the row).
    pub(crate) fn scale_add_scalar(row: &mut [f32], scale: f32, m: f32) {
        for v in row.iter_mut() {
            *v = *v * scale + m;
        }
    }
}

multiversion! {
    /// `out[i] = x[i] + r[i]` (the residual add of add-layer-norm).
    pub(crate) fn add_into(x: &[f32], r: &[f32], out: &mut [f32]) {
        for ((o, &a), &b) in out.iter_mut().zip(x).zip(r) {
            *o = a + b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gelu_exact(x: f64) -> f64 {
        0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
    }

    #[test]
    fn the_attentions_loops_for_common_head_sizes_give_the_generic_loops_bits() {
        // Positions of a cache with three kv heads (the stride), in the multiversioned
        // forms the attention runs (AVX-512 or AVX2 where the CPU has them).
        multiversion! {
            fn both(weights: &[f32], values: &[f32], stride: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
                let (mut fast, mut generic) = (vec![f32::NAN; d], vec![f32::NAN; d]);
                weighted_sum(weights, values, stride, &mut fast);
                weighted_sum_any(weights, values, stride, &mut generic);
                (fast, generic)
            }
        }
        multiversion! {
            fn scores(q: &[f32], keys: &[f32], stride: usize, positions: usize) -> (Vec<f32>, Vec<f32>) {
                let (mut fast, mut generic) = (vec![f32::NAN; positions], vec![f32::NAN; positions]);
                scores_into(q, keys, stride, 0.125, &mut fast);
                scores_any(q, keys, stride, 0.125, &mut generic);
                (fast, generic)
            }
        }
        for d in [64, 128, 24] {
            for positions in [1, 7, 150] {
                let stride = 3 * d;
                let wave = |i: usize, m: usize| ((i * m % 1009) as f32 - 504.0) / 311.0;
                let weights: Vec<f32> = (0..positions).map(|j| wave(j, 7919).abs() / positions as f32).collect();
                let values: Vec<f32> = (0..positions * stride).map(|i| wave(i, 104_729)).collect();
                let (fast, generic) = both(&weights, &values, stride, d);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fast), bits(&generic), "d {d}, {positions} positions");
                let q: Vec<f32> = (0..d).map(|i| wave(i, 613)).collect();
                let (fast, generic) = scores(&q, &values, stride, positions);
                assert_eq!(bits(&fast), bits(&generic), "scores: d {d}, {positions} positions");
            }
        }
    }

    #[test]
    fn exp_matches_f64_within_a_few_ulp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let want = (x as f64).exp();
            worst = worst.max(((exp(x) as f64) - want).abs() / want);
            x += 0.001_37;
        }
        assert!(worst < 4e-7, "max relative error {worst}");
        assert_eq!(exp(-87.5), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(0.0), 1.0);
    }

    /// The GELU's error against the exact erf form, over a dense grid of [-12, 12]
    /// (step 2⁻¹⁴, 393 217 points): absolute ≤ 2e-7 · max(|x|, 1); relative ≤ 3e-6 for
    /// |x| ≤ 5, ≤ 3e-5 beyond (down to results of 1e-30, where f32's rounding of the
    /// `z²` in `e^{-z²}` dominates).
    #[test]
    fn gelu_error_on_a_dense_grid() {
        let (mut worst_abs, mut worst_rel_core, mut worst_rel_tail) = (0.0f64, 0.0f64, 0.0f64);
        for i in -(12 << 14)..=(12 << 14) {
            let x = i as f32 / (1 << 14) as f32;
            let (got, want) = (gelu(x) as f64, gelu_exact(x as f64));
            let err = (got - want).abs();
            worst_abs = worst_abs.max(err / (x.abs() as f64).max(1.0));
            if x.abs() <= 5.0 && want != 0.0 {
                worst_rel_core = worst_rel_core.max(err / want.abs());
            } else if want.abs() > 1e-30 {
                worst_rel_tail = worst_rel_tail.max(err / want.abs());
            }
        }
        println!(
            "gelu vs exact: abs/max(|x|,1) {worst_abs:.2e}, rel |x|≤5 {worst_rel_core:.2e}, rel tail {worst_rel_tail:.2e}"
        );
        assert!(worst_abs <= 2e-7, "max abs error / max(|x|, 1): {worst_abs}");
        assert!(worst_rel_core <= 3e-6, "max relative error for |x| ≤ 5: {worst_rel_core}");
        assert!(worst_rel_tail <= 3e-5, "max relative error beyond: {worst_rel_tail}");
    }

    #[test]
    fn gelu_special_values() {
        assert!(gelu(f32::NAN).is_nan());
        assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
        assert_eq!(gelu(f32::NEG_INFINITY), 0.0);
        assert_eq!(gelu(-0.0), 0.0);
        assert_eq!(gelu(-30.0), 0.0);
        assert_eq!(gelu(30.0), 30.0);
    }

    #[test]
    fn every_level_computes_the_same_bits() {
        // The dispatched version against the baseline body run through a plain call.
        let data: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 2001) as f32 / 100.0 - 10.0).collect();
        let mut a = data.clone();
        gelu_in_place(&mut a);
        let b: Vec<f32> = data.iter().map(|&x| gelu(x)).collect();
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        let mut s = data[..384].to_vec();
        softmax_row(&mut s);
        let total: f32 = s.iter().sum();
        assert!((total - 1.0).abs() < 1e-5);
    }
}
