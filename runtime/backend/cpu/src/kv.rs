//! `kv-attention`: a llama's attention of new positions for several sequences at once,
//! each with its own KV caches. Per sequence (span of rows) it runs the kernels of the
//! chain it replaces (`rope` of its q and k rows at its position, the k and v rows
//! written in place into its caches, `gqa-attention` over them), so it gives that
//! chain's bits; what it saves is the chain's launches, one set per sequence.

use sluice_host_api::{KvAttentionArgs, TensorMeta};

use crate::KernelError;
use crate::buffer::{CpuBuffer, float_with};
use crate::fused::gqa_attention;
use crate::nn::rope;

/// [`sluice_host_api::Op::KvAttention`] on `[q, k, v, k-cache 0, v-cache 0, …]`, checked
/// by the caller; writes each span's rows into its caches and returns `[n, heads, d]`.
///
/// # Safety
/// Nothing may read or write the caches' elements (through any clone of them) during the
/// call, and no cache may share storage with another input.
pub(crate) unsafe fn kv_attention(
    args: &KvAttentionArgs,
    inputs: &[(&CpuBuffer, &TensorMeta)],
) -> Result<CpuBuffer, KernelError> {
    let [(q, qm), (k, km), (v, _)] = [inputs[0], inputs[1], inputs[2]];
    let (heads, kv_heads, d) = (qm.shape[1], km.shape[1], qm.shape[2]);
    let (q_row, kv_row) = ((heads * d) as usize, (kv_heads * d) as usize);
    let mut outputs = Vec::with_capacity(args.spans.len());
    let mut first = 0usize;
    for (span, caches) in args.spans.iter().zip(inputs[3..].chunks_exact(2)) {
        let rows = span.rows as usize;
        let meta = |h: u32| TensorMeta { dtype: qm.dtype, shape: vec![span.rows, h, d] };
        let (span_q, span_kv) = (meta(heads), meta(kv_heads));
        let q_turned = rope(args.rope_base, span.position, (&q.rows(first * q_row..(first + rows) * q_row), &span_q))?;
        let kv_rows = first * kv_row..(first + rows) * kv_row;
        let k_turned = rope(args.rope_base, span.position, (&k.rows(kv_rows.clone()), &span_kv))?;
        let at = span.position as usize * kv_row;
        // SAFETY: the caller's contract; the rows written are copies (`rows`, `rope`),
        // not views of a cache.
        unsafe {
            caches[0].0.write_at(at, &k_turned)?;
            caches[1].0.write_at(at, &v.rows(kv_rows))?;
        }
        let kv_len = span.position + span.rows;
        outputs.push(gqa_attention(kv_len, args.scale, (&q_turned, &span_q), caches[0], caches[1].0)?);
        first += rows;
    }
    let mut views = Vec::with_capacity(outputs.len());
    for o in &outputs {
        views.push(o.float_view()?);
    }
    Ok(float_with(qm.dtype, first * q_row, |out| {
        let mut at = 0;
        for view in &views {
            out[at..at + view.len()].copy_from_slice(view);
            at += view.len();
        }
    }))
}
