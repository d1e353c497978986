//! `kv-attention` on the GPU: two launches whatever the number of spans (sequences).
//!
//! 1. `kv_write` (a thread per pair of k): RoPE of each k row at its sequence's position,
//!    written with the v row in place into its span's caches;
//! 2. `kv_attention` (a warp per row of q and head): RoPE of the q row, rounded to the
//!    dtype as the chain stores it, then the causal attention over the first
//!    `position + j + 1` positions of its span's caches (`fused.cu`'s `gqa_attend`, the
//!    loop `gqa-attention` runs, so the two give the same bits).
//!
//! Each row finds its span, and each span its caches, position and first row, in one
//! small table ([`kv_table`]) copied to the device on the lane's stream before the
//! launches and returned to the pool once they are queued (the stream orders any reuse
//! after them). The second launch reads rows the first wrote, so both go on the one
//! stream in that order. The caches are changed in place, like `write-rows`' destination
//! (`CudaDevice::wrote_in_place`).

use sluice_host_api::{KvAttentionArgs, KvSpan, TensorMeta};

use super::launch_kernel;
use crate::kernels::{self, Module, elementwise_config};
use crate::{CudaBuffer, CudaDevice, CudaError};

/// Words of a span's entry in the table: k cache and v cache device pointers, position,
/// first row (`KV_SPAN_WORDS` in `fused.cu`).
pub const KV_SPAN_WORDS: usize = 4;

/// The launches' table: per span its entry (`[k cache, v cache, position, first row]`),
/// then per row the index of its span. `caches` holds each span's two device pointers.
pub fn kv_table(spans: &[KvSpan], caches: &[(u64, u64)]) -> Vec<u64> {
    let rows: usize = spans.iter().map(|s| s.rows as usize).sum();
    let mut table = Vec::with_capacity(KV_SPAN_WORDS * spans.len() + rows);
    let mut first = 0u64;
    for (span, &(k, v)) in spans.iter().zip(caches) {
        table.extend([k, v, u64::from(span.position), first]);
        first += u64::from(span.rows);
    }
    for (i, span) in spans.iter().enumerate() {
        table.extend(std::iter::repeat_n(i as u64, span.rows as usize));
    }
    table
}

/// Bytes of the table a kv-attention over `k` uploads: none when it launches nothing
/// (no element of k to write, so no query to attend either).
pub fn kv_table_bytes(args: &KvAttentionArgs, k: &TensorMeta) -> u64 {
    if k.numel() == 0 {
        return 0;
    }
    let rows: u64 = args.spans.iter().map(|s| u64::from(s.rows)).sum();
    8 * (KV_SPAN_WORDS as u64 * args.spans.len() as u64 + rows)
}

/// [`sluice_host_api::Op::KvAttention`] on `[q, k, v, k-cache 0, v-cache 0, …]` (checked
/// by `infer`): writes each span's turned k rows and v rows into its caches and returns
/// the attention `[n, heads, d]`.
pub(crate) fn kv_attention(
    dev: &CudaDevice,
    args: &KvAttentionArgs,
    inputs: &[(&CudaBuffer, &TensorMeta)],
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let [(q, qm), (k, km), (v, _)] = [inputs[0], inputs[1], inputs[2]];
    let caches = &inputs[3..];
    if caches.len() != 2 * args.spans.len() {
        return Err(CudaError::failure(format!(
            "kv-attention over {} span(s) got {} cache(s)",
            args.spans.len(),
            caches.len()
        )));
    }
    let y = dev.alloc(out.byte_len())?;
    let table_bytes = kv_table_bytes(args, km);
    if table_bytes == 0 {
        return Ok(y);
    }
    let pointers: Vec<(u64, u64)> =
        caches.chunks_exact(2).map(|c| (c[0].0.device_ptr(), c[1].0.device_ptr())).collect();
    let bytes: Vec<u8> = kv_table(&args.spans, &pointers).iter().flat_map(|w| w.to_ne_bytes()).collect();
    debug_assert_eq!(bytes.len() as u64, table_bytes);
    let table = dev.alloc(bytes.len())?;
    {
        let lane = dev.active();
        lane.bind()?;
        // SAFETY: `table` holds `bytes.len()` bytes; pageable source memory is staged by
        // the driver before this returns, and the copy is ordered before the launches.
        unsafe { cudarc::driver::result::memcpy_htod_async(table.device_ptr(), &bytes, lane.stream.cu_stream()) }
            .map_err(|e| CudaError::driver("copying the kv-attention table", e))?;
    }
    let (n, heads, kv_heads, d) = (qm.shape[0] as u64, qm.shape[1] as u64, km.shape[1] as u64, qm.shape[2] as u64);
    let spans = args.spans.len() as u64;
    let (kp, vp, tp) = (k.device_ptr(), v.device_ptr(), table.device_ptr());
    let pairs = n * kv_heads * d / 2;
    let base = args.rope_base;
    let cfg = elementwise_config(pairs, dev.launch_sms());
    let symbol = kernels::kv_write_symbol(km.dtype);
    launch_kernel!(dev, Module::Fused, symbol, cfg, &kp, &vp, &tp, &spans, &pairs, &kv_heads, &d, &base)?;
    if n * heads * d > 0 {
        let (qp, yp, scale) = (q.device_ptr(), y.device_ptr(), args.scale);
        let cfg = elementwise_config(n * heads * 32, dev.launch_sms());
        let symbol = kernels::kv_attention_symbol(qm.dtype);
        launch_kernel!(
            dev,
            Module::Fused,
            symbol,
            cfg,
            &qp,
            &yp,
            &tp,
            &spans,
            &n,
            &heads,
            &kv_heads,
            &d,
            &base,
            &scale
        )?;
    }
    drop(table);
    let writes = caches.chunks_exact(2).flat_map(|c| [(c[0].0, k), (c[1].0, v)]);
    dev.wrote_in_place(writes)?;
    Ok(y)
}

#[cfg(test)]
mod tests {
    use sluice_host_api::DType;

    use super::*;

    #[test]
    fn the_table_gives_each_row_its_span() {
        let spans = [KvSpan { rows: 1, position: 7 }, KvSpan { rows: 0, position: 3 }, KvSpan { rows: 3, position: 0 }];
        let table = kv_table(&spans, &[(100, 200), (300, 400), (500, 600)]);
        #[rustfmt::skip]
        assert_eq!(table, vec![
            100, 200, 7, 0,
            300, 400, 3, 1,
            500, 600, 0, 1,
            0, 2, 2, 2,
        ]);
        let args = KvAttentionArgs { rope_base: 1e4, scale: 0.5, spans: spans.to_vec() };
        let k = TensorMeta::new(DType::F32, vec![4, 2, 8]).unwrap();
        assert_eq!(kv_table_bytes(&args, &k), 8 * table.len() as u64);
        let empty = TensorMeta::new(DType::F32, vec![4, 2, 0]).unwrap();
        assert_eq!(kv_table_bytes(&args, &empty), 0, "nothing launched, no table");
    }
}
