//! Scratch memory: what a kernel of this backend allocates besides its output (issue
//! 11, defect 5), for the host to charge to the invocation's quota with the output.
//!
//! An upper bound from the op, the shapes and the thread count alone: attention's
//! score tiles (one `tile × sk` f32 block per tile running at once), a convolution's
//! im2col buffers (one per image and group running at once), and the f32 copies of
//! f16/bf16 operands and outputs that the float kernels compute in. The other kernels
//! allocate nothing but their output.

use sluice_host_api::{DType, Op, TensorMeta};

use crate::fused::tile_rows;

/// Bytes of an f32 element.
const F32: u64 = 4;

/// Upper bound of the memory `op` over `inputs` (as `infer` accepted them, producing
/// `out`) allocates besides its output, running on `threads` threads.
pub fn scratch_bytes(op: &Op, inputs: &[&TensorMeta], out: &TensorMeta, threads: usize) -> u64 {
    if out.numel() == 0 {
        return 0;
    }
    let threads = threads.max(1) as u64;
    // f16/bf16 operands are widened to f32 and the output computed in f32.
    let widened = |metas: &[&TensorMeta]| -> u64 {
        metas.iter().chain([&out]).filter(|m| m.dtype != DType::F32).map(|m| m.numel() as u64 * F32).sum()
    };
    match (op, inputs) {
        (Op::Attention { .. }, &[q, k, ..]) => {
            let (b, sq, sk) = (q.shape[0] as usize, q.shape[1] as usize, k.shape[1] as u64);
            let tile = tile_rows(b, sq, threads as usize) as u64;
            let tiles = b as u64 * (sq as u64).div_ceil(tile.max(1));
            tiles.min(threads) * tile * sk * F32 + widened(inputs)
        }
        (Op::Conv2d(args), &[x, w, ..]) => {
            let k = w.shape[1] as u64 * w.shape[2] as u64 * w.shape[3] as u64;
            let p = out.shape[2] as u64 * out.shape[3] as u64;
            let direct = w.shape[2] == 1 && w.shape[3] == 1 && args.stride == (1, 1) && args.padding == (0, 0);
            let pairs = x.shape[0] as u64 * args.groups.max(1) as u64;
            let im2col = if direct { 0 } else { pairs.min(threads) * k * p * F32 };
            im2col + widened(inputs)
        }
        (Op::Matmul(_) | Op::Linear { .. }, _) if out.dtype == DType::BF16 || out.dtype == DType::F16 => {
            widened(inputs)
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_host_api::{Conv2dArgs, infer};

    fn meta(dtype: DType, shape: &[u32]) -> TensorMeta {
        TensorMeta::new(dtype, shape.to_vec()).unwrap()
    }

    #[test]
    fn attention_takes_its_running_score_tiles() {
        let (q, k) = (meta(DType::F32, &[2, 256, 64]), meta(DType::F32, &[2, 512, 64]));
        let op = Op::Attention { heads: 4, scale: 0.125 };
        let out = infer(&op, &[&q, &k, &k]).unwrap();
        let one = scratch_bytes(&op, &[&q, &k, &k], &out, 1);
        // One thread: one tile of at most 64 query rows over 512 keys.
        assert_eq!(one, 64 * 512 * 4);
        let many = scratch_bytes(&op, &[&q, &k, &k], &out, 64);
        // Never more than the whole score matrix of one head per batch element.
        assert!(many > one && many <= 2 * 256 * 512 * 4, "{many}");
        let h = |m: &TensorMeta| meta(DType::F16, &m.shape);
        let out16 = infer(&op, &[&h(&q), &h(&k), &h(&k)]).unwrap();
        let widened = scratch_bytes(&op, &[&h(&q), &h(&k), &h(&k)], &out16, 1);
        assert_eq!(widened, one + 4 * (2 * 256 * 64 * 2 + 2 * 512 * 64 * 2));
    }

    #[test]
    fn convolution_takes_im2col_unless_direct() {
        let (x, w) = (meta(DType::F32, &[4, 3, 16, 16]), meta(DType::F32, &[8, 3, 3, 3]));
        let args = |pad| Conv2dArgs { stride: (1, 1), padding: (pad, pad), dilation: (1, 1), groups: 1 };
        let op = Op::Conv2d(args(1));
        let out = infer(&op, &[&x, &w]).unwrap();
        assert_eq!(scratch_bytes(&op, &[&x, &w], &out, 2), 2 * 27 * 256 * 4);
        let w1 = meta(DType::F32, &[8, 3, 1, 1]);
        let direct = Op::Conv2d(args(0));
        let out1 = infer(&direct, &[&x, &w1]).unwrap();
        assert_eq!(scratch_bytes(&direct, &[&x, &w1], &out1, 2), 0);
        let neg = Op::Unary(sluice_host_api::UnaryOp::Neg);
        assert_eq!(scratch_bytes(&neg, &[&x], &x, 2), 0, "elementwise ops take nothing");
    }
}
