//! The kernel module registry: which `.cu` file holds which symbols, the instantiation
//! lines appended to each source and the launch-configuration math (loading lives in
//! `module_cache.rs`).
//!
//! Each `.cu` file defines templates and one macro per kernel shape (`UNARY(NAME, F, T)`,
//! ...). The instantiation list is generated here from the same symbol functions the
//! ops use, so the symbols a launch asks for and the symbols a module defines cannot
//! drift apart (a unit test walks every op and dtype to make sure).

use cudarc::driver::LaunchConfig;
use sluice_host_api::{BinaryOp, DType, PoolKind, ReduceOp, UnaryOp};

const COMMON: &str = include_str!("kernels/common.cuh");

/// One kernel module: a `.cu` file of one op family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Module {
    Unary,
    Binary,
    Cast,
    Reduce,
    Softmax,
    LayerNorm,
    Indexing,
    Conv,
    Pool,
    /// The fused ops' kernels (`fused.cu`, with `unary.cu`'s activation functors).
    Fused,
    /// Rotary position embedding (`rope.cu`).
    Rope,
    /// Block-quantized weights dequantized on the fly (`quant.cu`): the linear, the
    /// embedding gather and the cast to f32 of a Q4_1 or Q8_0 tensor.
    Quant,
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// The strided-copy kernels of `indexing.cu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    Permute,
    Slice,
    Concat,
    Broadcast,
}

pub const COPY_KINDS: [CopyKind; 4] = [CopyKind::Permute, CopyKind::Slice, CopyKind::Concat, CopyKind::Broadcast];

impl Module {
    pub const ALL: [Module; 12] = [
        Module::Unary,
        Module::Binary,
        Module::Cast,
        Module::Reduce,
        Module::Softmax,
        Module::LayerNorm,
        Module::Indexing,
        Module::Conv,
        Module::Pool,
        Module::Fused,
        Module::Rope,
        Module::Quant,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Module::Unary => "unary",
            Module::Binary => "binary",
            Module::Cast => "cast",
            Module::Reduce => "reduce",
            Module::Softmax => "softmax",
            Module::LayerNorm => "layernorm",
            Module::Indexing => "indexing",
            Module::Conv => "conv",
            Module::Pool => "pool",
            Module::Fused => "fused",
            Module::Rope => "rope",
            Module::Quant => "quant",
        }
    }

    fn file(self) -> &'static str {
        match self {
            Module::Unary => include_str!("kernels/unary.cu"),
            Module::Binary => include_str!("kernels/binary.cu"),
            Module::Cast => include_str!("kernels/cast.cu"),
            Module::Reduce => include_str!("kernels/reduce.cu"),
            Module::Softmax => include_str!("kernels/softmax.cu"),
            Module::LayerNorm => include_str!("kernels/layernorm.cu"),
            Module::Indexing => include_str!("kernels/indexing.cu"),
            Module::Conv => include_str!("kernels/conv.cu"),
            Module::Pool => include_str!("kernels/pool.cu"),
            // The activation functors (U_Gelu, ...) are unary.cu's, so a fused linear
            // computes exactly what the unary op does.
            Module::Fused => concat!(include_str!("kernels/unary.cu"), "\n", include_str!("kernels/fused.cu")),
            Module::Rope => include_str!("kernels/rope.cu"),
            Module::Quant => include_str!("kernels/quant.cu"),
        }
    }

    /// `(symbol, instantiation line)` for every kernel the module defines.
    pub fn instances(self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        match self {
            Module::Unary => {
                for u in UnaryOp::ALL {
                    for d in DType::ALL.into_iter().filter(|d| d.is_float() || u.accepts_integers()) {
                        let s = unary_symbol(u, d);
                        v.push((s.clone(), format!("UNARY({s}, U_{u:?}, {})", ctype(d))));
                    }
                }
                for d in FLOATS {
                    let s = affine_symbol(d);
                    v.push((s.clone(), format!("AFFINE({s}, {})", ctype(d))));
                }
            }
            Module::Binary => {
                for op in BinaryOp::ALL {
                    for d in DType::ALL {
                        let s = binary_symbol(op, d);
                        v.push((s.clone(), format!("BINARY({s}, B_{op:?}, {})", ctype(d))));
                    }
                }
            }
            Module::Cast => {
                for from in DType::ALL {
                    for to in DType::ALL {
                        let s = cast_symbol(from, to);
                        v.push((s.clone(), format!("CAST({s}, {}, {})", ctype(from), ctype(to))));
                    }
                }
            }
            Module::Reduce => {
                for op in ReduceOp::ALL {
                    for d in DType::ALL.into_iter().filter(|d| d.is_float() || op != ReduceOp::Mean) {
                        let (cols, rows) = (reduce_symbol(op, d, false), reduce_symbol(op, d, true));
                        let line = format!("REDUCE({cols}, {rows}, R_{op:?}, {})", ctype(d));
                        v.push((cols, line));
                        v.push((rows, String::new()));
                    }
                }
                for d in FLOATS {
                    let s = argmax_symbol(d);
                    v.push((s.clone(), format!("ARGMAX({s}, {})", ctype(d))));
                }
                // Defined directly in reduce.cu (f32 logits only).
                v.push((SAMPLE_SYMBOL.to_owned(), String::new()));
            }
            Module::Softmax => {
                for d in FLOATS {
                    let s = softmax_symbol(d);
                    v.push((s.clone(), format!("SOFTMAX({s}, {})", ctype(d))));
                }
            }
            Module::LayerNorm => {
                for d in FLOATS {
                    let s = layernorm_symbol(d);
                    v.push((s.clone(), format!("LAYERNORM({s}, {})", ctype(d))));
                }
            }
            Module::Indexing => {
                for d in FLOATS {
                    for i in [DType::I32, DType::I64] {
                        let s = embedding_symbol(d, i);
                        v.push((s.clone(), format!("EMBEDDING({s}, {}, {})", ctype(d), ctype(i))));
                    }
                }
                for c in COPY_KINDS {
                    for d in DType::ALL {
                        let s = copy_symbol(c, d);
                        v.push((s.clone(), format!("COPY({s}, {})", ctype(d))));
                    }
                }
            }
            Module::Conv => {
                for d in FLOATS {
                    let (im, bias) = (im2col_symbol(d), bias_fill_symbol(d));
                    v.push((im.clone(), format!("IM2COL({im}, {})", ctype(d))));
                    v.push((bias.clone(), format!("BIAS_FILL({bias}, {})", ctype(d))));
                }
            }
            Module::Pool => {
                for d in FLOATS {
                    for k in [PoolKind::Max, PoolKind::Avg] {
                        let s = pool_symbol(k, d);
                        let mac = if k == PoolKind::Max { "MAX_POOL" } else { "AVG_POOL" };
                        v.push((s.clone(), format!("{mac}({s}, {})", ctype(d))));
                    }
                }
            }
            Module::Fused => {
                for d in FLOATS {
                    for act in std::iter::once(None).chain(UnaryOp::ALL.map(Some)) {
                        let s = bias_act_symbol(act, d);
                        let functor = act.map_or("U_Identity".to_owned(), |u| format!("U_{u:?}"));
                        v.push((s.clone(), format!("BIAS_ACT({s}, {functor}, {})", ctype(d))));
                    }
                    let s = add_layernorm_symbol(d);
                    v.push((s.clone(), format!("ADD_LAYERNORM({s}, {})", ctype(d))));
                    let s = rms_norm_symbol(d);
                    v.push((s.clone(), format!("RMS_NORM({s}, {})", ctype(d))));
                    let s = gqa_attention_symbol(d);
                    v.push((s.clone(), format!("GQA_ATTENTION({s}, {})", ctype(d))));
                    let s = kv_write_symbol(d);
                    v.push((s.clone(), format!("KV_WRITE({s}, {})", ctype(d))));
                    let s = kv_attention_symbol(d);
                    v.push((s.clone(), format!("KV_ATTENTION({s}, {})", ctype(d))));
                }
            }
            Module::Rope => {
                for d in FLOATS {
                    let s = rope_symbol(d);
                    v.push((s.clone(), format!("ROPE({s}, {})", ctype(d))));
                }
            }
            Module::Quant => {
                v.push((Q8_ACTIVATIONS_SYMBOL.to_owned(), format!("Q8_ACTIVATIONS({Q8_ACTIVATIONS_SYMBOL})")));
                for q in DType::QUANTIZED {
                    let s = qlinear_symbol(q);
                    v.push((s.clone(), format!("QLINEAR({s}, {q:?})")));
                    let s = cast_symbol(q, DType::F32);
                    v.push((s.clone(), format!("DEQUANT({s}, {q:?})")));
                    for i in [DType::I32, DType::I64] {
                        let s = embedding_symbol(q, i);
                        v.push((s.clone(), format!("QEMBEDDING({s}, {q:?}, {})", ctype(i))));
                    }
                }
            }
        }
        v
    }

    /// The full NVRTC source: common header, the family's file, the instantiations.
    pub fn source(self) -> String {
        let mut s = String::with_capacity(COMMON.len() + self.file().len() + 4096);
        s.push_str(COMMON);
        s.push('\n');
        s.push_str(self.file());
        s.push_str("\n// Instantiations generated by kernels.rs\n");
        for (_, line) in self.instances() {
            if !line.is_empty() {
                s.push_str(&line);
                s.push('\n');
            }
        }
        s
    }
}

/// The C storage type of a dtype in the kernels (a block format's packed bytes are `u8`).
pub fn ctype(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "f16_t",
        DType::BF16 => "bf16_t",
        DType::I32 => "int",
        DType::I64 => "i64",
        DType::U8 | DType::Q4_1 | DType::Q8_0 => "u8",
    }
}

pub fn unary_name(u: UnaryOp) -> &'static str {
    match u {
        UnaryOp::Relu => "relu",
        UnaryOp::Gelu => "gelu",
        UnaryOp::GeluTanh => "gelu_tanh",
        UnaryOp::Silu => "silu",
        UnaryOp::Tanh => "tanh",
        UnaryOp::Sigmoid => "sigmoid",
        UnaryOp::Exp => "exp",
        UnaryOp::Log => "log",
        UnaryOp::Sqrt => "sqrt",
        UnaryOp::Rsqrt => "rsqrt",
        UnaryOp::Neg => "neg",
        UnaryOp::Abs => "abs",
    }
}

pub fn unary_symbol(u: UnaryOp, d: DType) -> String {
    format!("{}_{d}", unary_name(u))
}

pub fn affine_symbol(d: DType) -> String {
    format!("affine_{d}")
}

pub fn binary_symbol(op: BinaryOp, d: DType) -> String {
    let name = match op {
        BinaryOp::Add => "add",
        BinaryOp::Sub => "sub",
        BinaryOp::Mul => "mul",
        BinaryOp::Div => "div",
        BinaryOp::Maximum => "maximum",
        BinaryOp::Minimum => "minimum",
    };
    format!("{name}_{d}")
}

pub fn cast_symbol(from: DType, to: DType) -> String {
    format!("cast_{from}_{to}")
}

pub fn reduce_symbol(op: ReduceOp, d: DType, rows: bool) -> String {
    let name = match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Mean => "mean",
        ReduceOp::Max => "max",
        ReduceOp::Min => "min",
    };
    if rows { format!("reduce_rows_{name}_{d}") } else { format!("reduce_{name}_{d}") }
}

pub fn embedding_symbol(table: DType, ids: DType) -> String {
    format!("embedding_{table}_{ids}")
}

pub fn copy_symbol(c: CopyKind, d: DType) -> String {
    let name = match c {
        CopyKind::Permute => "permute",
        CopyKind::Slice => "slice",
        CopyKind::Concat => "concat",
        CopyKind::Broadcast => "broadcast",
    };
    format!("{name}_{d}")
}

pub fn softmax_symbol(d: DType) -> String {
    format!("softmax_{d}")
}

pub fn layernorm_symbol(d: DType) -> String {
    format!("layernorm_{d}")
}

/// The epilogue of a linear: bias add and activation (`none`: the bias only).
pub fn bias_act_symbol(act: Option<UnaryOp>, d: DType) -> String {
    format!("bias_act_{}_{d}", act.map_or("none", unary_name))
}

/// The sampling kernel (`Op::Sample`, f32 logits).
pub const SAMPLE_SYMBOL: &str = "sample_f32";

pub fn argmax_symbol(d: DType) -> String {
    format!("argmax_{d}")
}

pub fn rope_symbol(d: DType) -> String {
    format!("rope_{d}")
}

/// The activations of a quantized linear as their Q8 blocks stand for (f32 in and out).
pub const Q8_ACTIVATIONS_SYMBOL: &str = "q8_activations";

/// The dequantizing linear of a block-format weight (f32 activations, quantized by
/// [`Q8_ACTIVATIONS_SYMBOL`] first, and f32 output).
pub fn qlinear_symbol(w: DType) -> String {
    format!("qlinear_{w}")
}

/// The module of a cast or an embedding from `d`: [`Module::Quant`] for a block format.
pub fn gather_module(d: DType, plain: Module) -> Module {
    if d.is_quantized() { Module::Quant } else { plain }
}

pub fn gqa_attention_symbol(d: DType) -> String {
    format!("gqa_attention_{d}")
}

/// kv-attention's first launch: the turned k rows and the v rows into each span's caches.
pub fn kv_write_symbol(d: DType) -> String {
    format!("kv_write_{d}")
}

/// kv-attention's second launch: each turned q row attending over its span's caches.
pub fn kv_attention_symbol(d: DType) -> String {
    format!("kv_attention_{d}")
}

pub fn rms_norm_symbol(d: DType) -> String {
    format!("rms_norm_{d}")
}

pub fn add_layernorm_symbol(d: DType) -> String {
    format!("add_layernorm_{d}")
}

pub fn im2col_symbol(d: DType) -> String {
    format!("im2col_{d}")
}

pub fn bias_fill_symbol(d: DType) -> String {
    format!("bias_fill_{d}")
}

pub fn pool_symbol(k: PoolKind, d: DType) -> String {
    match k {
        PoolKind::Max => format!("max_pool2d_{d}"),
        PoolKind::Avg => format!("avg_pool2d_{d}"),
    }
}

/// Threads per block of the elementwise kernels.
pub const BLOCK: u32 = 256;

/// Grid-stride launch over `n` elements: enough blocks to fill the device a few times
/// over (`sm_count * 32` at most), at least one.
pub fn elementwise_config(n: u64, sm_count: u32) -> LaunchConfig {
    let cap = (sm_count.max(1) as u64) * 32;
    let blocks = n.div_ceil(BLOCK as u64).clamp(1, cap) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}

/// Threads a block of a row kernel may have: the `__launch_bounds__` every row kernel
/// declares (`ROW_THREADS` in `kernels/common.cuh`), so 1024-thread blocks always fit.
pub const ROW_THREADS: u32 = 1024;

/// One block per row of `len` elements: the row length rounded up to a warp multiple,
/// between 32 and [`ROW_THREADS`] threads; rows beyond 2^20 are walked grid-stride.
pub fn rows_config(rows: u64, len: u64) -> LaunchConfig {
    let threads = len.div_ceil(32).clamp(1, (ROW_THREADS / 32) as u64) as u32 * 32;
    let blocks = rows.clamp(1, 1 << 20) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every module has an NVRTC source with C-linkage kernels. With
    /// `SLUICE_KERNEL_DUMP=dir` the sources are also written there, for reading or for
    /// a host-compiler syntax check.
    #[test]
    fn every_module_has_a_source() {
        let dump = std::env::var("SLUICE_KERNEL_DUMP").ok();
        for m in Module::ALL {
            let source = m.source();
            assert!(source.contains("extern \"C\""), "module {} has no C-linkage kernels", m.name());
            if let Some(dir) = &dump {
                std::fs::create_dir_all(dir).unwrap();
                std::fs::write(format!("{dir}/{}.cu", m.name()), &source).unwrap();
            }
        }
    }

    #[test]
    fn launch_configs() {
        let c = elementwise_config(1000, 132);
        assert_eq!((c.grid_dim.0, c.block_dim.0), (4, 256));
        assert_eq!(elementwise_config(0, 132).grid_dim.0, 1);
        assert_eq!(elementwise_config(1 << 32, 132).grid_dim.0, 132 * 32);
        assert_eq!(elementwise_config(1 << 32, 0).grid_dim.0, 32);
        let r = rows_config(1536, 128);
        assert_eq!((r.grid_dim.0, r.block_dim.0), (1536, 128));
        assert_eq!(rows_config(10, 384).block_dim.0, 384);
        assert_eq!(rows_config(10, 1).block_dim.0, 32);
        assert_eq!(rows_config(10, 100_000).block_dim.0, 1024);
        assert_eq!(rows_config(0, 0).grid_dim.0, 1);
        assert_eq!(rows_config(1 << 40, 7).grid_dim.0, 1 << 20);
    }

    /// The kernels launched with `rows_config` declare the bound it relies on.
    #[test]
    fn row_kernels_declare_the_row_launch_bound() {
        let common = Module::Softmax.source();
        assert!(common.contains(&format!("#define ROW_THREADS {ROW_THREADS}\n")), "common.cuh and ROW_THREADS differ");
        for (m, signature) in [
            (Module::Softmax, "NAME(const T* x, const T* mask"),
            (Module::LayerNorm, "NAME(const T* x, const T* gamma"),
            (Module::Fused, "NAME(const T* x, const T* r,"),
            (Module::Reduce, "ROWS(const T* x"),
        ] {
            let bounded = format!("__global__ void __launch_bounds__(ROW_THREADS) {signature}");
            assert!(m.file().contains(&bounded), "{} lacks {bounded:?}", m.name());
        }
    }

    #[test]
    fn symbols_are_unique_and_sources_are_self_contained() {
        let mut all = std::collections::HashSet::new();
        for m in Module::ALL {
            let src = m.source();
            assert!(!src.contains("#include"), "{} must not need headers", m.name());
            for (sym, _) in m.instances() {
                assert!(all.insert(sym.clone()), "symbol {sym} defined twice");
                assert!(sym.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            }
        }
        assert!(all.contains("gelu_tanh_bf16") && all.contains("cast_i64_f16") && all.contains("reduce_rows_max_u8"));
        assert!(!all.contains("gelu_i32") && !all.contains("reduce_mean_i64"));
        assert!(all.contains("bias_act_gelu_f16") && all.contains("bias_act_none_bf16"));
        assert!(all.contains("add_layernorm_f32") && !all.contains("bias_act_none_i32"));
    }

    #[test]
    fn every_macro_and_functor_used_is_defined() {
        for m in Module::ALL {
            let file = m.file();
            for (_, line) in m.instances() {
                if line.is_empty() {
                    continue;
                }
                let mac = &line[..line.find('(').unwrap()];
                assert!(file.contains(&format!("#define {mac}(")), "{mac} missing in {}.cu", m.name());
                for functor in line
                    .split([',', '(', ')', ' '])
                    .filter(|t| t.starts_with("U_") || t.starts_with("B_") || t.starts_with("R_"))
                {
                    assert!(file.contains(&format!("struct {functor} ")), "{functor} missing in {}.cu", m.name());
                }
            }
        }
    }
}
