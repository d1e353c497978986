//! The fused ops on the GPU, each in as few launches as the hardware path allows:
//!
//! - linear: one cuBLAS GEMM over `x` as an `[m, k]` matrix (any leading axes folded
//!   into m) and `w` (transposed by the op flag, never copied), or with a
//!   block-quantized `w` a `q8_activations` kernel (x quantized to Q8 blocks, as the
//!   CPU backend multiplies it) and one `qlinear` kernel dequantizing `w` on the fly
//!   (`quant.cu`, a warp per output element), then, when there is a bias or an activation, one
//!   `bias_act` kernel in place on the product;
//! - add-layer-norm: one `add_layernorm` kernel, one block per row;
//! - gqa-attention: one `gqa_attention` kernel, a warp per query and head walking the
//!   cache positions with an online softmax (decode-shaped: s is small);
//! - rms-norm: one `rms_norm` kernel, one block per row (the residual add fused in);
//! - kv-attention (several sequences' RoPE, cache writes and attention): two kernels
//!   over a small table of spans, whatever their number (`kv.rs`);
//! - attention: three launches whatever the batch: one batched GEMM over every batch
//!   element and head reading q and k in place (leading dimension `heads * d`, heads `d`
//!   apart), in f16 with the scale as its alpha (so f16 scores hold the scaled values,
//!   never the raw `q·k` that can pass 65504), the softmax kernel with the mask (and in
//!   f32/bf16 the scale) over the scores `[b, heads, sq, sk]`, and one batched GEMM writing each head's `p · v`
//!   straight into its columns of the interleaved output (`ldc = heads * d`). With one
//!   batch element the GEMMs are strided-batched over the heads; with more, the heads of
//!   different elements are not one stride apart and the GEMMs take pointer arrays (one
//!   small host-to-device copy of [`AttentionDims::pointer_table`]). The scores,
//!   probabilities and pointer arrays are scratch buffers of the pool, returned as soon
//!   as the launches are queued.
//!
//! Like the chains they replace, they round to the dtype after the product, the bias
//! add, the residual add, the scores (scaled first in f16) and the probabilities.

use sluice_host_api::{DType, TensorMeta, UnaryOp};

use super::launch_kernel;
use crate::gemm::{GemmCall, annotate, gemm, gemm_scaled};
use crate::kernels::{self, Module, elementwise_config, rows_config};
use crate::{CudaBuffer, CudaDevice, CudaError};

/// `(m, n, k)` of a linear from its input and output metas (leading axes fold into m).
pub fn linear_dims(x: &TensorMeta, out: &TensorMeta) -> (u64, u64, u64) {
    let k = x.shape.last().copied().unwrap_or(0) as u64;
    let n = out.shape.last().copied().unwrap_or(0) as u64;
    let m = x.shape[..x.rank().saturating_sub(1)].iter().map(|&d| d as u64).product();
    (m, n, k)
}

/// The cuBLAS call of a linear (row-major `[m, k] · [k, n]`, `w` stored `[n, k]` when
/// transposed); cuBLAS's A is `w`, its B is `x`.
pub fn linear_call(m: u64, n: u64, k: u64, transpose_w: bool) -> GemmCall {
    GemmCall::row_major(m, n, k, false, transpose_w)
}

pub(crate) fn linear(
    dev: &CudaDevice,
    transpose_w: bool,
    activation: Option<UnaryOp>,
    x: (&CudaBuffer, &TensorMeta),
    w: (&CudaBuffer, &TensorMeta),
    bias: Option<&CudaBuffer>,
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let (m, _, _) = linear_dims(x.1, out);
    linear_rows(dev, transpose_w, activation, x, w, bias, out, 0..m as usize)
}

/// Rows `rows` of a linear's output (rows of `x` flattened to `[M, K]`), as a new
/// `[rows.len(), N]` buffer: the GEMM reads `x` from the block's first row on, then one
/// kernel adds the bias and applies the activation in place. All rows: the whole linear.
#[allow(clippy::too_many_arguments, reason = "the linear's operands, as in `linear`")]
pub(crate) fn linear_rows(
    dev: &CudaDevice,
    transpose_w: bool,
    activation: Option<UnaryOp>,
    (x, xm): (&CudaBuffer, &TensorMeta),
    (w, wm): (&CudaBuffer, &TensorMeta),
    bias: Option<&CudaBuffer>,
    out: &TensorMeta,
    rows: std::ops::Range<usize>,
) -> Result<CudaBuffer, CudaError> {
    let (m, n, k) = linear_dims(xm, out);
    if rows.end as u64 > m || rows.start > rows.end {
        return Err(CudaError::failure(format!("rows {rows:?} are out of range for a linear of {m} rows")));
    }
    let block = rows.len() as u64;
    let total = block * n;
    let y = dev.alloc(total as usize * out.dtype.size_of())?;
    if total == 0 {
        return Ok(y);
    }
    if k == 0 {
        dev.memset_zero(&y)?;
    } else {
        let x_rows = x.device_ptr() + rows.start as u64 * k * xm.dtype.size_of() as u64;
        #[cfg(test)]
        let x_rows = x_rows
            + if crate::mutants::planted(crate::mutants::Mutant::LinearRowsOneRowLate) {
                k * xm.dtype.size_of() as u64
            } else {
                0
            };
        if wm.dtype.is_quantized() {
            // x's Q8 blocks as the values they stand for (one warp per block), then one
            // warp per output element (`quant.cu`); `infer` made w `[n, k]`, x f32.
            let xq = dev.alloc((block * k) as usize * 4)?;
            let (xqp, x_blocks) = (xq.device_ptr(), block * k / 32);
            let cfg = elementwise_config(x_blocks * 32, dev.launch_sms());
            launch_kernel!(dev, Module::Quant, kernels::Q8_ACTIVATIONS_SYMBOL, cfg, &x_rows, &xqp, &x_blocks)?;
            let (wp, yp) = (w.device_ptr(), y.device_ptr());
            let cfg = elementwise_config(total * 32, dev.launch_sms());
            launch_kernel!(dev, Module::Quant, kernels::qlinear_symbol(wm.dtype), cfg, &xqp, &wp, &yp, &block, &n, &k)?;
        } else {
            gemm(dev, out.dtype, &linear_call(block, n, k, transpose_w), w.device_ptr(), x_rows, y.device_ptr(), 0.0)
                .map_err(|e| annotate(e, &format!("linear {:?} rows {rows:?} (k = {k}, n = {n})", xm.shape)))?;
        }
    }
    if bias.is_some() || activation.is_some() {
        let (yp, bp) = (y.device_ptr(), bias.map_or(0, CudaBuffer::device_ptr));
        let has_bias = bias.is_some() as i32;
        let cfg = elementwise_config(total, dev.launch_sms());
        let symbol = kernels::bias_act_symbol(activation, out.dtype);
        launch_kernel!(dev, Module::Fused, symbol, cfg, &yp, &bp, &total, &n, &has_bias)?;
    }
    Ok(y)
}

pub(crate) fn add_layer_norm(
    dev: &CudaDevice,
    eps: f32,
    (x, xm): (&CudaBuffer, &TensorMeta),
    residual: &CudaBuffer,
    gamma: &CudaBuffer,
    beta: &CudaBuffer,
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let len = xm.shape.last().copied().unwrap_or(1) as u64;
    let rows = (xm.numel() as u64).checked_div(len).unwrap_or(0);
    if rows == 0 {
        return Ok(y);
    }
    let (xp, rp, gp, bp, yp) =
        (x.device_ptr(), residual.device_ptr(), gamma.device_ptr(), beta.device_ptr(), y.device_ptr());
    let cfg = rows_config(rows, len);
    let symbol = kernels::add_layernorm_symbol(xm.dtype);
    launch_kernel!(dev, Module::Fused, symbol, cfg, &xp, &rp, &gp, &bp, &yp, &rows, &len, &eps)?;
    Ok(y)
}

/// RMS norm of `x` (or `x + residual`) over the last axis, times `w`: one kernel, one
/// block per row.
pub(crate) fn rms_norm(
    dev: &CudaDevice,
    eps: f32,
    (x, xm): (&CudaBuffer, &TensorMeta),
    residual: Option<&CudaBuffer>,
    w: &CudaBuffer,
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let len = xm.shape.last().copied().unwrap_or(1) as u64;
    let rows = (xm.numel() as u64).checked_div(len).unwrap_or(0);
    if rows == 0 {
        return Ok(y);
    }
    let (xp, wp, yp) = (x.device_ptr(), w.device_ptr(), y.device_ptr());
    // Without a residual the kernel never reads `r`; x stands in for the pointer.
    let (rp, has_r) = residual.map_or((xp, 0i32), |r| (r.device_ptr(), 1));
    let cfg = rows_config(rows, len);
    let symbol = kernels::rms_norm_symbol(xm.dtype);
    launch_kernel!(dev, Module::Fused, symbol, cfg, &xp, &rp, &wp, &yp, &rows, &len, &eps, &has_r)?;
    Ok(y)
}

/// Causal grouped-query attention of q `[s, heads, d]` over the first `kv_len` positions
/// of the caches k, v `[ctx, kv_heads, d]`: one kernel, a warp per query and head.
pub(crate) fn gqa_attention(
    dev: &CudaDevice,
    kv_len: u32,
    scale: f32,
    (q, qm): (&CudaBuffer, &TensorMeta),
    (k, km): (&CudaBuffer, &TensorMeta),
    v: &CudaBuffer,
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    let (s, heads, d) = (qm.shape[0] as u64, qm.shape[1] as u64, qm.shape[2] as u64);
    let (kv_heads, kv_len) = (km.shape[1] as u64, u64::from(kv_len));
    if s * heads * d == 0 {
        return Ok(y);
    }
    let (qp, kp, vp, yp) = (q.device_ptr(), k.device_ptr(), v.device_ptr(), y.device_ptr());
    let cfg = elementwise_config(s * heads * 32, dev.launch_sms());
    let symbol = kernels::gqa_attention_symbol(qm.dtype);
    launch_kernel!(dev, Module::Fused, symbol, cfg, &qp, &kp, &vp, &yp, &s, &heads, &kv_heads, &d, &kv_len, &scale)?;
    Ok(y)
}

/// Sizes of an attention: batch, query length, key length, heads, head size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionDims {
    pub b: u64,
    pub sq: u64,
    pub sk: u64,
    pub heads: u64,
    pub d: u64,
}

impl AttentionDims {
    pub fn new(q: &TensorMeta, k: &TensorMeta, heads: u32) -> AttentionDims {
        let heads = heads.max(1) as u64;
        let (b, sq, e) = (q.shape[0] as u64, q.shape[1] as u64, q.shape[2] as u64);
        AttentionDims { b, sq, sk: k.shape[1] as u64, heads, d: e / heads }
    }

    /// Width of the interleaved rows of q, k, v and the output.
    pub fn e(&self) -> u64 {
        self.heads * self.d
    }

    /// The scores' shape `[b, heads, sq, sk]`.
    pub fn scores_shape(&self) -> Vec<u32> {
        [self.b, self.heads, self.sq, self.sk].map(|v| v as u32).to_vec()
    }

    /// `S_h = Q_h · K_hᵀ` for every head of one batch element: row-major `[sq, d]·[d, sk]`
    /// with q and k rows `e` apart and heads `d` apart; the scores are dense
    /// `[heads, sq, sk]`. cuBLAS's A is k, its B is q.
    pub fn scores_call(&self) -> GemmCall {
        let mut c = GemmCall::row_major(self.sq, self.sk, self.d, false, true);
        c.lda = self.e();
        c.ldb = self.e();
        c.stride_a = self.d;
        c.stride_b = self.d;
        c.stride_c = self.sq * self.sk;
        c.batch = self.heads;
        c
    }

    /// `O_h = P_h · V_h` for every head of one batch element: the probabilities are dense
    /// `[heads, sq, sk]`, v's rows `e` apart and heads `d` apart, and each head's output
    /// lands in its `d` columns of the interleaved `[sq, e]` output. cuBLAS's A is v, its
    /// B is p.
    pub fn context_call(&self) -> GemmCall {
        let mut c = GemmCall::row_major(self.sq, self.d, self.sk, false, false);
        c.lda = self.e();
        c.ldc = self.e();
        c.stride_a = self.d;
        c.stride_b = self.sq * self.sk;
        c.stride_c = self.d;
        c.batch = self.heads;
        c
    }
}

/// Where the matrices of an attention's products live, as device addresses: the inputs,
/// the scratch scores and probabilities, and the output.
#[derive(Clone, Copy, Debug)]
pub struct AttentionBuffers {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub scores: u64,
    pub probs: u64,
    pub out: u64,
}

impl AttentionDims {
    /// The six pointer arrays of the batched GEMMs (one pointer per batch element and
    /// head, batch-major), concatenated: k, q and scores for `S = Q·Kᵀ`, then v, probs
    /// and out for `O = P·V`. `es` is the element size in bytes.
    pub fn pointer_table(&self, es: u64, at: &AttentionBuffers) -> Vec<u64> {
        let n = (self.b * self.heads) as usize;
        let mut table = vec![0u64; 6 * n];
        for bi in 0..self.b {
            for hi in 0..self.heads {
                let i = (bi * self.heads + hi) as usize;
                let (q_off, kv_off) = (bi * self.sq * self.e() + hi * self.d, bi * self.sk * self.e() + hi * self.d);
                #[cfg(test)]
                let q_off = if crate::mutants::planted(crate::mutants::Mutant::AttentionQueryOfTheFirstHead) {
                    bi * self.sq * self.e()
                } else {
                    q_off
                };
                let s_off = i as u64 * self.sq * self.sk;
                for (slot, addr) in [
                    at.k + kv_off * es,
                    at.q + q_off * es,
                    at.scores + s_off * es,
                    at.v + kv_off * es,
                    at.probs + s_off * es,
                    at.out + q_off * es,
                ]
                .into_iter()
                .enumerate()
                {
                    table[slot * n + i] = addr;
                }
            }
        }
        table
    }
}

/// Runs one product of the attention, scaled by `alpha`, for every batch element and
/// head: with one batch element, a strided-batched GEMM over the heads (`table`
/// unused); with more, a pointer-array batched GEMM over all of them (`table` holds the
/// arrays, the product's three starting at slot `first`).
#[allow(clippy::too_many_arguments)]
fn attention_gemm(
    dev: &CudaDevice,
    dtype: DType,
    dims: &AttentionDims,
    call: &GemmCall,
    (a, b, c): (u64, u64, u64),
    table: Option<(&CudaBuffer, usize)>,
    alpha: f32,
) -> Result<(), CudaError> {
    match table {
        None => gemm_scaled(dev, dtype, call, (a, b, c), alpha, 0.0),
        Some((t, first)) => {
            let n = dims.b * dims.heads;
            let array = |slot: usize| t.device_ptr() + (first + slot) as u64 * n * 8;
            crate::gemm::gemm_batched(dev, dtype, call, n, (array(0), array(1), array(2)), alpha)
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    dev: &CudaDevice,
    heads: u32,
    scale: f32,
    (q, qm): (&CudaBuffer, &TensorMeta),
    (k, km): (&CudaBuffer, &TensorMeta),
    v: &CudaBuffer,
    mask: Option<(&CudaBuffer, &TensorMeta)>,
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let y = dev.alloc(out.byte_len())?;
    if out.numel() == 0 {
        return Ok(y);
    }
    let dims = AttentionDims::new(qm, km, heads);
    if dims.sk == 0 {
        // Softmax over no keys, then a product with no values: zeros.
        dev.memset_zero(&y)?;
        return Ok(y);
    }
    let dtype: DType = out.dtype;
    let es = dtype.size_of() as u64;
    let scores_meta = TensorMeta::new(dtype, dims.scores_shape())
        .map_err(|e| CudaError::failure(format!("attention scores: {e}")))?;
    let scores = dev.alloc(scores_meta.byte_len())?;
    let probs = dev.alloc(scores_meta.byte_len())?;
    let at = AttentionBuffers {
        q: q.device_ptr(),
        k: k.device_ptr(),
        v: v.device_ptr(),
        scores: scores.device_ptr(),
        probs: probs.device_ptr(),
        out: y.device_ptr(),
    };
    // Several batch elements: the heads of different elements are not one stride apart,
    // so both products go through pointer arrays (one small copy, still one GEMM each).
    let table = if dims.b > 1 {
        let bytes: Vec<u8> = dims.pointer_table(es, &at).iter().flat_map(|p| p.to_ne_bytes()).collect();
        let t = dev.alloc(bytes.len())?;
        let lane = dev.active();
        lane.bind()?;
        // SAFETY: `t` holds `bytes.len()` bytes; pageable source memory is staged by the
        // driver before this returns, and the copy is ordered before the GEMMs reading it.
        unsafe { cudarc::driver::result::memcpy_htod_async(t.device_ptr(), &bytes, lane.stream.cu_stream()) }
            .map_err(|e| CudaError::driver("copying the attention's GEMM pointers", e))?;
        Some(t)
    } else {
        None
    };
    let context = |what: &str, e: CudaError| annotate(e, &format!("attention {what} {:?}", qm.shape));
    // In f16 the scale is the first GEMM's alpha, applied to the f32 accumulator: stored
    // raw, f16 scores overflow to inf once |q·k| passes 65504 even when the scaled scores
    // are moderate (issue 11, defect 6); the softmax then scales by 1. f32 and bf16 have
    // f32's range, so they keep the chain's rounding (raw scores, then the softmax's
    // scale), which is what the CPU backend computes.
    let (gemm_scale, softmax_scale) = if dtype == DType::F16 { (scale, 1.0) } else { (1.0, scale) };
    let (k_q_scores, v_p_out) = ((at.k, at.q, at.scores), (at.v, at.probs, at.out));
    attention_gemm(dev, dtype, &dims, &dims.scores_call(), k_q_scores, table.as_ref().map(|t| (t, 0)), gemm_scale)
        .map_err(|e| context("q·kᵀ", e))?;
    super::norm::softmax_into(dev, softmax_scale, (&scores, &scores_meta), mask, &probs)?;
    attention_gemm(dev, dtype, &dims, &dims.context_call(), v_p_out, table.as_ref().map(|t| (t, 3)), 1.0)
        .map_err(|e| context("p·v", e))?;
    // The scratch goes back to the pool; the stream keeps the launches ordered before any
    // reuse.
    drop((scores, probs, table));
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(shape: &[u32]) -> TensorMeta {
        TensorMeta::new(DType::F32, shape.to_vec()).unwrap()
    }

    /// Plays a column-major GEMM call on the host, as cuBLAS would, over flat arrays.
    fn play(c: &GemmCall, a: &[f32], b: &[f32], out: &mut [f32]) {
        for batch in 0..c.batch as usize {
            let (ao, bo, co) = (batch * c.stride_a as usize, batch * c.stride_b as usize, batch * c.stride_c as usize);
            for j in 0..c.n as usize {
                for i in 0..c.m as usize {
                    let mut s = 0.0;
                    for p in 0..c.k as usize {
                        let av =
                            if c.trans_a { a[ao + i * c.lda as usize + p] } else { a[ao + p * c.lda as usize + i] };
                        let bv =
                            if c.trans_b { b[bo + p * c.ldb as usize + j] } else { b[bo + j * c.ldb as usize + p] };
                        s += av * bv;
                    }
                    out[co + j * c.ldc as usize + i] = s;
                }
            }
        }
    }

    #[test]
    fn linear_folds_leading_axes_into_rows() {
        let (m, n, k) = linear_dims(&meta(&[2, 3, 4]), &meta(&[2, 3, 5]));
        assert_eq!((m, n, k), (6, 5, 4));
        assert_eq!(linear_dims(&meta(&[4]), &meta(&[5])), (1, 5, 4));
        // x [2, 3] · wᵀ with w [2, 3] stored [n, k].
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let w = [1.0, 0.0, -1.0, 2.0, 1.0, 0.0];
        let mut y = [0.0; 4];
        play(&linear_call(2, 2, 3, true), &w, &x, &mut y);
        assert_eq!(y, [-2.0, 4.0, -2.0, 13.0]);
    }

    /// Plays a pointer-array batched GEMM on the host: the "pointers" are offsets into
    /// one flat memory.
    fn play_table(c: &GemmCall, n: usize, table: &[u64], first: usize, mem: &mut [f32]) {
        for i in 0..n {
            let [a, b, out] = [0, 1, 2].map(|slot| table[(first + slot) * n + i] as usize);
            let one = GemmCall { batch: 1, ..*c };
            let (src_a, src_b) = (mem[a..].to_vec(), mem[b..].to_vec());
            play(&one, &src_a, &src_b, &mut mem[out..]);
        }
    }

    /// The two attention GEMMs, played on the host both ways (strided over the heads for
    /// one batch element, pointer arrays for several), give softmax-free attention
    /// (`(q_h·k_hᵀ)·v_h` per batch element and head) in the interleaved layout.
    #[test]
    fn attention_calls_read_and_write_heads_in_place() {
        for b in [1usize, 2, 3] {
            let (sq, sk, heads, d) = (2usize, 3usize, 2usize, 2usize);
            let e = heads * d;
            let qm = meta(&[b as u32, sq as u32, e as u32]);
            let dims = AttentionDims::new(&qm, &meta(&[b as u32, sk as u32, e as u32]), heads as u32);
            assert_eq!(dims, AttentionDims { b: b as u64, sq: 2, sk: 3, heads: 2, d: 2 });
            assert_eq!(dims.scores_shape(), vec![b as u32, 2, 2, 3]);
            // One flat memory: q, k, v, scores, probs, out.
            let (nq, nk, ns) = (b * sq * e, b * sk * e, b * heads * sq * sk);
            let at = AttentionBuffers {
                q: 0,
                k: nq as u64,
                v: (nq + nk) as u64,
                scores: (nq + 2 * nk) as u64,
                probs: (nq + 2 * nk + ns) as u64,
                out: (nq + 2 * nk + 2 * ns) as u64,
            };
            let mut mem = vec![0.0f32; nq + 2 * nk + 2 * ns + nq];
            for (i, x) in mem[..nq + 2 * nk].iter_mut().enumerate() {
                *x = ((i * 7) % 11) as f32 * 0.5 - 2.0;
            }
            let (q, k, v) = (at.q as usize, at.k as usize, at.v as usize);
            if b == 1 {
                let (src, mut s) = (mem.clone(), vec![0.0; ns]);
                play(&dims.scores_call(), &src[k..], &src[q..], &mut s);
                mem[at.probs as usize..][..ns].copy_from_slice(&s);
                let src = mem.clone();
                play(&dims.context_call(), &src[v..], &src[at.probs as usize..], &mut mem[at.out as usize..]);
            } else {
                let table = dims.pointer_table(1, &at);
                assert_eq!(table.len(), 6 * b * heads);
                play_table(&dims.scores_call(), b * heads, &table, 0, &mut mem);
                mem.copy_within(at.scores as usize..at.scores as usize + ns, at.probs as usize);
                play_table(&dims.context_call(), b * heads, &table, 3, &mut mem);
            }
            for bi in 0..b {
                for h in 0..heads {
                    for i in 0..sq {
                        let qv = |c: usize| mem[q + (bi * sq + i) * e + h * d + c];
                        let kv = |j: usize, c: usize| mem[k + (bi * sk + j) * e + h * d + c];
                        let scores: Vec<f32> = (0..sk).map(|j| (0..d).map(|c| qv(c) * kv(j, c)).sum()).collect();
                        for (j, want) in scores.iter().enumerate() {
                            let got = mem[at.probs as usize + ((bi * heads + h) * sq + i) * sk + j];
                            assert_eq!(got, *want, "b={b}: score {bi} h{h} i{i} j{j}");
                        }
                        for c in 0..d {
                            let want: f32 = (0..sk).map(|j| scores[j] * mem[v + (bi * sk + j) * e + h * d + c]).sum();
                            let got = mem[at.out as usize + (bi * sq + i) * e + h * d + c];
                            assert_eq!(got, want, "b={b}: out {bi} h{h} i{i} c{c}");
                        }
                    }
                }
            }
        }
    }
}
