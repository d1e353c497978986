//! sluice's CPU backend: the reference implementation of every op of the host API
//! catalog ([`Op`]) on host memory, and the backend that is always present.
//!
//! [`launch`] runs one op on [`CpuBuffer`]s. It checks that each buffer matches its
//! metadata and that the output metadata is what [`sluice_host_api::infer`] gives for
//! the inputs (a caller's mistake is an error, never a wrong-sized buffer), and reports
//! data-dependent faults (an embedding id out of range, an integer
//! division by zero) as [`KernelError`]s instead of panicking. Kernels are grouped by op
//! family, one module each; small tensors run on the calling thread and large ones use
//! rayon, except the kernels of a language model (the quantized linear, cached
//! attention), which run on the [`Team`] the caller entered (its threads spin between
//! kernels instead of sleeping; `team.rs`). f32 products run on the panel GEMM
//! (`panel_gemm.rs`: AVX-512 or AVX2 + FMA
//! micro-kernels, the right operand packed into column panels, threads split by panels);
//! a linear's weight is packed once and shared by every later launch (`packed.rs`).
//!
//! Numerical conventions (each module's header has the details):
//! - floats are computed in `f32` (f16/bf16 widened and rounded back once); softmax and
//!   layer norm sum in f32 lanes, reductions in `f64`; GELU is `x Φ(x)` with an f32 `erfc`
//!   accurate to about 1e-7 relative (`simd.rs`);
//! - the hot f32 loops (GELU, epilogues, softmax, layer norm) run at the CPU's vector
//!   width, chosen at run time, with the same results at every width; so do the f32
//!   products, each element one FMA chain over `k` in order (the same bits at both widths,
//!   any thread count and any block of rows); without AVX2 + FMA, and for f16, they run
//!   on the `gemm` crate;
//! - `maximum`/`minimum` and max/min reductions propagate NaN; argmax takes the first
//!   NaN, else the first largest element; sample draws by the WIT `sample-args`
//!   algorithm, as the CUDA kernel does;
//! - integer arithmetic wraps (two's complement), integer division truncates toward zero
//!   and a zero divisor is an error;
//! - a softmax row whose logits are all `-inf` (fully masked) is all zeros;
//! - cast: float→int truncates toward zero and saturates (NaN → 0), int→int wraps;
//! - avg pooling counts padding as zeros in the divisor, max pooling ignores padding;
//! - block-quantized weights (Q4_1, Q8_0) are dequantized on the fly by the transposed
//!   linear, the embedding gather and the cast to f32 (`quant.rs`), which sum in another
//!   order than dequantize-then-f32 would;
//! - RoPE rotates adjacent pairs with cos and sin computed in f64, rounded to f32;
//! - RMS norm sums the squares of a row in f32, in order;
//! - the fused ops (linear, add-layer-norm, attention) round to the dtype wherever the
//!   chain of ops they replace would, so they equal that chain (see `fused.rs`).

mod broadcast;
mod buffer;
mod cast;
mod conv;
mod elementwise;
mod fused;
mod kv;
mod layout;
mod matmul;
mod nn;
mod packed;
mod panel_gemm;
mod q8;
mod quant;
mod reduce;
mod simd;
mod team;

pub use buffer::{CpuBuffer, Element};
pub use elementwise::{gelu, gelu_tanh};
pub use matmul::matmul_rows;
pub use packed::packed_weight_bytes;
pub use quant::linear_scratch_bytes as quantized_linear_scratch_bytes;
pub use simd::vector_width;
use std::sync::Arc;
pub use team::Team;

use sluice_host_api::{Op, RowSplit, TensorMeta, infer};

/// A kernel could not run: a data-dependent fault or inputs that do not match their
/// metadata. The message names the op and the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KernelError(pub String);

/// Runs one op and returns its output, whose metadata is `out`.
///
/// `inputs` and `out` must be what [`sluice_host_api::infer`] accepted and returned for
/// `op`; inputs `infer` rejects, an `out` other than what it returns, or a buffer whose
/// dtype or length disagrees with its metadata is an error.
pub fn launch(op: &Op, inputs: &[(&CpuBuffer, &TensorMeta)], out: &TensorMeta) -> Result<CpuBuffer, KernelError> {
    check_inputs(inputs)?;
    check_output(op, inputs, out)?;
    let result = match (op, inputs) {
        (Op::Matmul(args), &[a, b]) => matmul::matmul(args, a, b, out),
        (Op::Binary(bop), &[a, b]) => elementwise::binary(*bop, a, b, out),
        (Op::Unary(uop), &[(x, _)]) => elementwise::unary(*uop, x),
        (Op::Affine { scale, bias }, &[(x, _)]) => elementwise::affine(x, *scale, *bias),
        (Op::Softmax { scale }, &[x]) => nn::softmax(*scale, x, None),
        (Op::Softmax { scale }, &[x, mask]) => nn::softmax(*scale, x, Some(mask)),
        (Op::LayerNorm { eps }, &[x, (gamma, _), (beta, _)]) => nn::layer_norm(*eps, x, gamma, beta),
        (Op::Embedding, &[table, ids]) => nn::embedding(table, ids),
        (Op::Reduce(args), &[x]) => reduce::reduce(args, x),
        (Op::Reshape(_), &[(x, _)]) => Ok(x.clone()),
        (Op::Permute(perm), &[x]) => layout::permute(x, perm),
        (Op::Slice(args), &[x]) => layout::slice(x, args),
        (Op::Concat { axis }, inputs) if !inputs.is_empty() => layout::concat(inputs, *axis, out),
        (Op::Cast(to), &[(x, _)]) => Ok(cast::cast(x, *to)),
        (Op::Conv2d(args), &[x, w]) => conv::conv2d(args, x, w, None, out),
        (Op::Conv2d(args), &[x, w, (bias, _)]) => conv::conv2d(args, x, w, Some(bias), out),
        (Op::Pool2d(args), &[x]) => conv::pool2d(args, x, out),
        (Op::Rope { base, offset }, &[x]) => nn::rope(*base, *offset, x),
        (Op::Argmax, &[x]) => reduce::argmax(x),
        (Op::Sample(args), &[x]) => reduce::sample(args, x),
        (Op::Linear { transpose_w, activation }, &[x, w]) => fused::linear(*transpose_w, *activation, x, w, None, out),
        (Op::Linear { transpose_w, activation }, &[x, w, (b, _)]) => {
            fused::linear(*transpose_w, *activation, x, w, Some(b), out)
        }
        (Op::AddLayerNorm { eps }, &[x, (r, _), (g, _), (b, _)]) => fused::add_layer_norm(*eps, x, r, g, b),
        (Op::RmsNorm { eps }, &[x, (w, _)]) => fused::rms_norm(*eps, x, None, w),
        (Op::GqaAttention { kv_len, scale }, &[q, k, (v, _)]) => fused::gqa_attention(*kv_len, *scale, q, k, v),
        (Op::RmsNorm { eps }, &[x, (r, _), (w, _)]) => fused::rms_norm(*eps, x, Some(r), w),
        (Op::Attention { heads, scale }, &[q, k, (v, _)]) => fused::attention(*heads, *scale, q, k, v, None, out),
        (Op::Attention { heads, scale }, &[q, k, (v, _), mask]) => {
            fused::attention(*heads, *scale, q, k, v, Some(mask), out)
        }
        (Op::WriteRows { .. }, _) => Err(KernelError("write-rows changes its input: run it with write_rows".into())),
        (Op::KvAttention(_), _) => Err(KernelError("kv-attention changes its caches: run it with kv_attention".into())),
        (op, inputs) => Err(KernelError(format!("{} cannot take {} input(s)", op.name(), inputs.len()))),
    };
    let result = result.map_err(|e| KernelError(format!("{}: {}", op.name(), e.0)))?;
    if result.dtype() != out.dtype || result.len() != out.numel() {
        return Err(KernelError(format!(
            "{}: produced {} × {} elements, expected {} × {} (shape {:?})",
            op.name(),
            result.len(),
            result.dtype(),
            out.numel(),
            out.dtype,
            out.shape
        )));
    }
    Ok(result)
}

/// [`Op::WriteRows`]: `dst[offset .. offset + src.shape[0]] = src` along axis 0, in
/// place (no copy of the rest of `dst`: every clone of `dst`, e.g. a reshape of it,
/// shows the rows), checked as [`launch`] checks an op; returns the op's output, an empty
/// u8 buffer.
///
/// # Safety
/// Nothing may read or write `dst`'s elements (through any clone of it) during the call:
/// the caller runs its kernels and reads one at a time, as the CPU device does on its
/// scheduler thread.
pub unsafe fn write_rows(
    offset: u32,
    dst: (&CpuBuffer, &TensorMeta),
    src: (&CpuBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CpuBuffer, KernelError> {
    let op = Op::WriteRows { offset };
    check_inputs(&[dst, src])?;
    check_output(&op, &[dst, src], out)?;
    let row = dst.1.shape[1..].iter().map(|&d| d as usize).product::<usize>();
    // SAFETY: the caller's contract.
    unsafe { dst.0.write_at(offset as usize * row, src.0) }.map_err(|e| KernelError(format!("write-rows: {}", e.0)))?;
    Ok(CpuBuffer::U8(Arc::from([])))
}

/// [`Op::KvAttention`] on `[q, k, v, k-cache 0, v-cache 0, …]`: per span of rows, RoPE of
/// its q and k rows, its k and v rows written in place into its caches (every clone of a
/// cache shows them), then causal GQA attention; checked as [`launch`] checks an op.
/// Returns the output `[n, heads, d]`.
///
/// # Safety
/// Nothing may read or write the caches' elements (through any clone of them) during the
/// call, and no cache may share storage with another input: the caller runs its kernels
/// and reads one at a time, as the CPU device does on its scheduler thread, and gives
/// each cache once.
pub unsafe fn kv_attention(
    inputs: &[(&CpuBuffer, &TensorMeta)],
    op: &Op,
    out: &TensorMeta,
) -> Result<CpuBuffer, KernelError> {
    let Op::KvAttention(args) = op else {
        return Err(KernelError(format!("kv_attention cannot run {}", op.name())));
    };
    check_inputs(inputs)?;
    check_output(op, inputs, out)?;
    // SAFETY: the caller's contract.
    unsafe { kv::kv_attention(args, inputs) }.map_err(|e| KernelError(format!("kv-attention: {}", e.0)))
}

/// Output rows `rows` of `op` (see [`RowSplit`]): for a matmul, rows of the M axis in
/// every batch; for a linear, rows of `x` flattened to `[M, K]`. The result has the
/// metadata `RowSplit::of(op, out).block(rows.len())`; blocks of a partition of the rows
/// concatenate to the whole output. Other ops cannot be computed in rows.
pub fn launch_rows(
    op: &Op,
    inputs: &[(&CpuBuffer, &TensorMeta)],
    out: &TensorMeta,
    rows: std::ops::Range<usize>,
) -> Result<CpuBuffer, KernelError> {
    let Some(split) = RowSplit::of(op, out) else {
        return Err(KernelError(format!("{} with output {:?} cannot be computed in row blocks", op.name(), out.shape)));
    };
    if rows.start > rows.end || rows.end > split.rows {
        return Err(KernelError(format!("rows {rows:?} are out of range for {} rows of {}", split.rows, op.name())));
    }
    check_inputs(inputs)?;
    check_output(op, inputs, out)?;
    match (op, inputs) {
        (Op::Matmul(args), &[a, b]) => matmul::matmul_rows(args, a, b, out, rows),
        (Op::Linear { transpose_w, activation }, &[(x, xm), w, ref bias @ ..]) => {
            let k = xm.shape.last().copied().unwrap_or(0);
            let block = split.block(rows.len());
            let x_block = x.rows(rows.start * k as usize..rows.end * k as usize);
            let x_meta = TensorMeta::new(xm.dtype, vec![rows.len() as u32, k]).map_err(|e| KernelError(e.message))?;
            fused::linear(*transpose_w, *activation, (&x_block, &x_meta), w, bias.first().map(|(b, _)| *b), &block)
        }
        (op, inputs) => Err(KernelError(format!("{} cannot take {} input(s)", op.name(), inputs.len()))),
    }
}

/// Checks that `out` is the metadata [`sluice_host_api::infer`] gives `op` on the inputs.
fn check_output(op: &Op, inputs: &[(&CpuBuffer, &TensorMeta)], out: &TensorMeta) -> Result<(), KernelError> {
    let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| *m).collect();
    let inferred = infer(op, &metas).map_err(|e| KernelError(format!("{}: {e}", op.name())))?;
    if inferred != *out {
        return Err(KernelError(format!(
            "{}: the output is described as {} {:?} but the inputs give {} {:?}",
            op.name(),
            out.dtype,
            out.shape,
            inferred.dtype,
            inferred.shape
        )));
    }
    Ok(())
}

/// Checks that each buffer holds exactly what its metadata describes.
pub(crate) fn check_inputs(inputs: &[(&CpuBuffer, &TensorMeta)]) -> Result<(), KernelError> {
    for (i, (buf, meta)) in inputs.iter().enumerate() {
        if buf.dtype() != meta.dtype || buf.len() != meta.numel() {
            return Err(KernelError(format!(
                "input {i} holds {} {} elements but is described as {} {:?}",
                buf.len(),
                buf.dtype(),
                meta.dtype,
                meta.shape
            )));
        }
    }
    Ok(())
}
