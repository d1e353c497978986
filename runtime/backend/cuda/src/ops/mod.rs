//! Op dispatch: one `match` over [`Op`] onto the family modules, and [`plan`], the list
//! of kernels (and cuBLAS calls) each op runs, which the tests check against the
//! symbols the kernel modules define.

pub(crate) mod conv;
pub(crate) mod elementwise;
pub mod fused;
pub(crate) mod indexing;
pub mod kv;
pub(crate) mod norm;
pub(crate) mod reduce;

use sluice_host_api::{DType, Op, TensorMeta};

use crate::kernels::{self, CopyKind, Module};
use crate::{CudaBuffer, CudaDevice, CudaError};

/// Launches `symbol` of `module` on the current lane's stream (loaded in that lane's
/// context) with the given argument references (device pointers as `u64`, scalars,
/// `Layout`s).
macro_rules! launch_kernel {
    ($dev:expr, $module:expr, $symbol:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        use cudarc::driver::PushKernelArg as _;
        let symbol: &str = &$symbol;
        let lane = $dev.active();
        let f = lane.kernels.function($module, symbol)?;
        let mut b = lane.stream.launch_builder(&f);
        $( b.arg($arg); )+
        // SAFETY: the argument list matches the kernel's C signature in its .cu file, and
        // every pointer is a live buffer sized by `infer` for the indices the kernel uses.
        unsafe { b.launch($cfg) }
            .map(|_| ())
            .map_err(|e| $crate::CudaError::driver(&format!("launching {symbol}"), e))
    }};
}
pub(crate) use launch_kernel;

/// Runs `op` (already checked by `infer`) and returns its output buffer.
pub(crate) fn launch(
    dev: &CudaDevice,
    op: &Op,
    inputs: &[(&CudaBuffer, &TensorMeta)],
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let arity = |n: usize| {
        if inputs.len() < n {
            Err(CudaError::failure(format!("{} got {} input(s)", op.name(), inputs.len())))
        } else {
            Ok(())
        }
    };
    match op {
        Op::Matmul(args) => {
            arity(2)?;
            crate::gemm::matmul(dev, args, inputs[0], inputs[1], out)
        }
        Op::Binary(b) => {
            arity(2)?;
            elementwise::binary(dev, *b, inputs[0], inputs[1], out)
        }
        Op::Unary(u) => {
            arity(1)?;
            elementwise::unary(dev, *u, inputs[0], out)
        }
        Op::Affine { scale, bias } => {
            arity(1)?;
            elementwise::affine(dev, *scale, *bias, inputs[0], out)
        }
        Op::Cast(to) => {
            arity(1)?;
            elementwise::cast(dev, *to, inputs[0], out)
        }
        Op::Softmax { scale } => {
            arity(1)?;
            norm::softmax(dev, *scale, inputs[0], inputs.get(1).copied(), out)
        }
        Op::LayerNorm { eps } => {
            arity(3)?;
            norm::layer_norm(dev, *eps, inputs[0], inputs[1].0, inputs[2].0, out)
        }
        Op::Embedding => {
            arity(2)?;
            indexing::embedding(dev, inputs[0], inputs[1], out)
        }
        Op::Reduce(args) => {
            arity(1)?;
            reduce::reduce(dev, args, inputs[0], out)
        }
        // A reshape shares its input's memory: buffers are immutable but for the rows
        // `write-rows` writes into a tensor made by `zeros`, which a view then shows.
        Op::Reshape(_) => {
            arity(1)?;
            Ok(inputs[0].0.clone())
        }
        Op::Permute(perm) => {
            arity(1)?;
            indexing::permute(dev, perm, inputs[0], out)
        }
        Op::Slice(args) => {
            arity(1)?;
            indexing::slice(dev, args, inputs[0], out)
        }
        Op::Concat { axis } => {
            arity(1)?;
            indexing::concat(dev, *axis, inputs, out)
        }
        Op::Conv2d(args) => {
            arity(2)?;
            conv::conv2d(dev, args, inputs[0], inputs[1], inputs.get(2).map(|(b, _)| *b), out)
        }
        Op::Pool2d(args) => {
            arity(1)?;
            conv::pool2d(dev, args, inputs[0], out)
        }
        Op::Argmax => {
            arity(1)?;
            reduce::argmax(dev, inputs[0], out)
        }
        Op::Sample(args) => {
            arity(1)?;
            reduce::sample(dev, args, inputs[0], out)
        }
        Op::Rope { base, offset } => {
            arity(1)?;
            norm::rope(dev, *base, *offset, inputs[0], out)
        }
        Op::Linear { transpose_w, activation } => {
            arity(2)?;
            let bias = inputs.get(2).map(|(b, _)| *b);
            fused::linear(dev, *transpose_w, *activation, inputs[0], inputs[1], bias, out)
        }
        Op::GqaAttention { kv_len, scale } => {
            arity(3)?;
            fused::gqa_attention(dev, *kv_len, *scale, inputs[0], inputs[1], inputs[2].0, out)
        }
        Op::RmsNorm { eps } => {
            arity(2)?;
            let (residual, w) = if inputs.len() > 2 { (Some(inputs[1].0), inputs[2].0) } else { (None, inputs[1].0) };
            fused::rms_norm(dev, *eps, inputs[0], residual, w, out)
        }
        Op::AddLayerNorm { eps } => {
            arity(4)?;
            fused::add_layer_norm(dev, *eps, inputs[0], inputs[1].0, inputs[2].0, inputs[3].0, out)
        }
        Op::Attention { heads, scale } => {
            arity(3)?;
            fused::attention(dev, *heads, *scale, inputs[0], inputs[1], inputs[2].0, inputs.get(3).copied(), out)
        }
        Op::WriteRows { offset } => {
            arity(2)?;
            indexing::write_rows(dev, *offset, inputs[0], inputs[1].0, out)
        }
        // The caches are written in place, as write-rows' destination is.
        Op::KvAttention(args) => {
            arity(3 + 2 * args.spans.len())?;
            kv::kv_attention(dev, args, inputs, out)
        }
    }
}

/// One step of an op's execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Kernel(Module, String),
    Cublas,
    /// The output shares the input's buffer.
    Alias,
    /// A device-to-device copy (no kernel).
    Copy,
}

/// The steps `op` may run for inputs of the given dtypes (the union over shapes).
pub fn plan(op: &Op, dtypes: &[DType]) -> Vec<Step> {
    let d = dtypes[0];
    let k = |m: Module, s: String| Step::Kernel(m, s);
    match op {
        Op::Matmul(_) => vec![Step::Cublas, k(Module::Indexing, kernels::copy_symbol(CopyKind::Broadcast, d))],
        Op::Binary(b) => vec![k(Module::Binary, kernels::binary_symbol(*b, d))],
        Op::Unary(u) => vec![k(Module::Unary, kernels::unary_symbol(*u, d))],
        Op::Affine { .. } => vec![k(Module::Unary, kernels::affine_symbol(d))],
        Op::Cast(to) => vec![k(kernels::gather_module(d, Module::Cast), kernels::cast_symbol(d, *to))],
        Op::Softmax { .. } => vec![k(Module::Softmax, kernels::softmax_symbol(d))],
        Op::LayerNorm { .. } => vec![k(Module::LayerNorm, kernels::layernorm_symbol(d))],
        Op::Embedding => vec![k(kernels::gather_module(d, Module::Indexing), kernels::embedding_symbol(d, dtypes[1]))],
        Op::Reduce(a) => vec![
            k(Module::Reduce, kernels::reduce_symbol(a.op, d, false)),
            k(Module::Reduce, kernels::reduce_symbol(a.op, d, true)),
        ],
        Op::Reshape(_) => vec![Step::Alias],
        Op::Permute(_) => vec![k(Module::Indexing, kernels::copy_symbol(CopyKind::Permute, d))],
        Op::Slice(_) => vec![k(Module::Indexing, kernels::copy_symbol(CopyKind::Slice, d))],
        Op::Concat { .. } => vec![k(Module::Indexing, kernels::copy_symbol(CopyKind::Concat, d))],
        Op::Conv2d(_) => vec![
            Step::Cublas,
            k(Module::Conv, kernels::im2col_symbol(d)),
            k(Module::Conv, kernels::bias_fill_symbol(d)),
        ],
        Op::Pool2d(p) => vec![k(Module::Pool, kernels::pool_symbol(p.kind, d))],
        Op::Rope { .. } => vec![k(Module::Rope, kernels::rope_symbol(d))],
        Op::Argmax => vec![k(Module::Reduce, kernels::argmax_symbol(d))],
        Op::Sample(_) => vec![k(Module::Reduce, kernels::SAMPLE_SYMBOL.to_owned())],
        // A block-format weight: the dequantizing kernel instead of cuBLAS (f32 out).
        Op::Linear { activation, .. } if dtypes.get(1).is_some_and(|w| w.is_quantized()) => {
            let mut steps = vec![
                k(Module::Quant, kernels::Q8_ACTIVATIONS_SYMBOL.to_owned()),
                k(Module::Quant, kernels::qlinear_symbol(dtypes[1])),
            ];
            if activation.is_some() || dtypes.len() > 2 {
                steps.push(k(Module::Fused, kernels::bias_act_symbol(*activation, d)));
            }
            steps
        }
        // The epilogue runs only with a bias (a third input) or an activation.
        Op::Linear { activation, .. } if activation.is_some() || dtypes.len() > 2 => {
            vec![Step::Cublas, k(Module::Fused, kernels::bias_act_symbol(*activation, d))]
        }
        Op::Linear { .. } => vec![Step::Cublas],
        Op::AddLayerNorm { .. } => vec![k(Module::Fused, kernels::add_layernorm_symbol(d))],
        Op::RmsNorm { .. } => vec![k(Module::Fused, kernels::rms_norm_symbol(d))],
        Op::GqaAttention { .. } => vec![k(Module::Fused, kernels::gqa_attention_symbol(d))],
        Op::Attention { .. } => vec![Step::Cublas, k(Module::Softmax, kernels::softmax_symbol(d))],
        Op::WriteRows { .. } => vec![Step::Copy],
        Op::KvAttention(_) => {
            vec![k(Module::Fused, kernels::kv_write_symbol(d)), k(Module::Fused, kernels::kv_attention_symbol(d))]
        }
    }
}

#[cfg(test)]
mod tests;
