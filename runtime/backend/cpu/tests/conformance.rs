//! Conformance of the CPU backend to the op catalog: every op on random (seeded) inputs
//! and edge shapes, checked against the naive `f64` references in `reference/`, plus the
//! data-dependent error cases. Tolerances: relative 1e-5 for f32 and 1e-2 for f16/bf16,
//! measured against `max(|expected|, Σ|terms|)` for ops that sum terms.

mod reference;

#[path = "conformance/elementwise.rs"]
mod elementwise;
#[path = "conformance/fused.rs"]
mod fused;
#[path = "conformance/kv_attention.rs"]
mod kv_attention;
#[path = "conformance/layout.rs"]
mod layout;
#[path = "conformance/nn.rs"]
mod nn;
#[path = "conformance/quant.rs"]
mod quant;

use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reference as r;
use sluice_backend_cpu::{CpuBuffer, KernelError, launch, launch_rows, matmul_rows};
use sluice_host_api::{
    BinaryOp, Conv2dArgs, DType, MatmulArgs, Op, Pool2dArgs, PoolKind, ReduceArgs, ReduceOp, SliceArgs, TensorMeta,
    UnaryOp, infer,
};

type Fn1 = fn(f64) -> f64;
type Fn2 = fn(f64, f64) -> f64;
type IntFn1 = fn(i128) -> i128;
type IntFn2 = fn(i128, i128) -> i128;

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const INTS: [DType; 3] = [DType::I32, DType::I64, DType::U8];

/// A test input: the buffer, its metadata and its exact values.
struct Input {
    buf: CpuBuffer,
    meta: TensorMeta,
    vals: Vec<f64>,
}

fn meta(dtype: DType, shape: &[usize]) -> TensorMeta {
    TensorMeta::new(dtype, shape.iter().map(|&d| d as u32).collect()).unwrap()
}

/// A buffer of `dtype` holding `vals` rounded to it; `vals` are replaced by the rounded values.
fn input(dtype: DType, shape: &[usize], vals: Vec<f64>) -> Input {
    assert_eq!(vals.len(), r::numel(shape));
    let buf = match dtype {
        DType::F32 => CpuBuffer::F32(vals.iter().map(|&v| v as f32).collect()),
        DType::F16 => CpuBuffer::F16(vals.iter().map(|&v| f16::from_f64(v)).collect()),
        DType::BF16 => CpuBuffer::BF16(vals.iter().map(|&v| bf16::from_f64(v)).collect()),
        DType::I32 => CpuBuffer::I32(vals.iter().map(|&v| v as i32).collect()),
        DType::I64 => CpuBuffer::I64(vals.iter().map(|&v| v as i64).collect()),
        DType::U8 => CpuBuffer::U8(vals.iter().map(|&v| v as u8).collect()),
        DType::Q4_1 | DType::Q8_0 => panic!("block formats are made from random blocks (quant.rs), not values"),
    };
    let vals = values(&buf);
    Input { buf, meta: meta(dtype, shape), vals }
}

fn random(rng: &mut StdRng, dtype: DType, shape: &[usize], lo: f64, hi: f64) -> Input {
    let vals = (0..r::numel(shape)).map(|_| rng.random_range(lo..hi)).collect();
    input(dtype, shape, vals)
}

/// Every element as `f64`, decoded here rather than by the backend.
fn values(buf: &CpuBuffer) -> Vec<f64> {
    match buf {
        CpuBuffer::F32(v) => v.iter().map(|&x| x as f64).collect(),
        CpuBuffer::F16(v) => v.iter().map(|&x| x.to_f64()).collect(),
        CpuBuffer::BF16(v) => v.iter().map(|&x| x.to_f64()).collect(),
        CpuBuffer::I32(v) => v.iter().map(|&x| x as f64).collect(),
        CpuBuffer::I64(v) => v.iter().map(|&x| x as f64).collect(),
        CpuBuffer::U8(v) => v.iter().map(|&x| x as f64).collect(),
        CpuBuffer::Blocks(d, v) => r::dequantize(*d, v),
    }
}

fn ints(buf: &CpuBuffer) -> Vec<i128> {
    match buf {
        CpuBuffer::I32(v) => v.iter().map(|&x| x as i128).collect(),
        CpuBuffer::I64(v) => v.iter().map(|&x| x as i128).collect(),
        CpuBuffer::U8(v) => v.iter().map(|&x| x as i128).collect(),
        other => panic!("not an integer buffer: {other:?}"),
    }
}

/// Validates with `infer`, then launches.
fn try_run(op: &Op, inputs: &[&Input]) -> Result<(CpuBuffer, TensorMeta), KernelError> {
    let metas: Vec<&TensorMeta> = inputs.iter().map(|i| &i.meta).collect();
    let out = infer(op, &metas).unwrap_or_else(|e| panic!("{op:?} {metas:?}: {e}"));
    let pairs: Vec<_> = inputs.iter().map(|i| (&i.buf, &i.meta)).collect();
    let buf = launch(op, &pairs, &out)?;
    assert_eq!(buf.dtype(), out.dtype, "{op:?}");
    assert_eq!(buf.len(), out.numel(), "{op:?}");
    Ok((buf, out))
}

/// Launches and checks the output shape against the reference's.
fn run(op: &Op, inputs: &[&Input], shape: &[usize]) -> CpuBuffer {
    let (buf, out) = try_run(op, inputs).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    assert_eq!(out.shape, meta(out.dtype, shape).shape, "{op:?} output shape");
    buf
}

fn tol(dtype: DType) -> f64 {
    if dtype == DType::F32 { 1e-5 } else { 1e-2 }
}

/// `|got - want| ≤ tol · max(|want|, mag, floor)`, NaN and infinities matched exactly.
fn check(ctx: &str, got: &[f64], want: &[f64], mags: Option<&[f64]>, tol: f64, floor: f64) {
    assert_eq!(got.len(), want.len(), "{ctx}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() || w.is_infinite() {
            assert!(g.is_nan() == w.is_nan() && (w.is_nan() || g == w), "{ctx}[{i}]: got {g}, want {w}");
            continue;
        }
        let scale = w.abs().max(mags.map_or(0.0, |m| m[i])).max(floor);
        assert!((g - w).abs() <= tol * scale, "{ctx}[{i}]: got {g}, want {w} (tol {tol} × {scale})");
    }
}

fn wrap(v: i128, dtype: DType) -> i128 {
    let bits = match dtype {
        DType::I32 => 32,
        DType::I64 => 64,
        _ => return v.rem_euclid(256),
    };
    let m = 1i128 << bits;
    (v + m / 2).rem_euclid(m) - m / 2
}

fn int_range(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::I64 => (-9.0e18, 9.0e18),
        _ => (0.0, 255.0),
    }
}

/// Small integers, exact in every dtype.
fn small_ints(rng: &mut StdRng, dtype: DType, shape: &[usize]) -> Input {
    let vals = (0..r::numel(shape)).map(|_| rng.random_range(0..100) as f64).collect();
    input(dtype, shape, vals)
}

#[test]
fn buffers_that_disagree_with_their_metadata_are_errors() {
    let x = input(DType::F32, &[3], vec![1.0, 2.0, 3.0]);
    let wrong_len = meta(DType::F32, &[4]);
    let out = meta(DType::F32, &[4]);
    let err = launch(&Op::Unary(UnaryOp::Neg), &[(&x.buf, &wrong_len)], &out).unwrap_err();
    assert!(err.0.contains("input 0"), "{err}");
    let wrong_dtype = meta(DType::I32, &[3]);
    assert!(launch(&Op::Unary(UnaryOp::Neg), &[(&x.buf, &wrong_dtype)], &wrong_dtype).is_err());
    assert!(launch(&Op::Unary(UnaryOp::Neg), &[], &out).is_err());
}

#[test]
fn output_metadata_that_disagrees_with_the_inputs_is_an_error() {
    let x = input(DType::F32, &[3], vec![1.0, 2.0, 3.0]);
    let x_meta = meta(DType::F32, &[3]);
    for wrong in [meta(DType::F32, &[4]), meta(DType::F16, &[3]), meta(DType::F32, &[3, 1])] {
        let err = launch(&Op::Unary(UnaryOp::Neg), &[(&x.buf, &x_meta)], &wrong).unwrap_err();
        assert!(err.0.contains("output is described as"), "{err}");
    }
    // Inputs `infer` rejects are an error too, not a panic.
    let err = launch(&Op::Binary(BinaryOp::Add), &[(&x.buf, &x_meta), (&x.buf, &x_meta)], &x_meta);
    assert!(err.is_ok());
    let y = input(DType::F32, &[2], vec![1.0, 2.0]);
    let y_meta = meta(DType::F32, &[2]);
    assert!(launch(&Op::Binary(BinaryOp::Add), &[(&x.buf, &x_meta), (&y.buf, &y_meta)], &x_meta).is_err());
}

#[test]
fn little_endian_bytes_round_trip() {
    let one = CpuBuffer::from_le_bytes(DType::F32, &[0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]);
    assert_eq!(values(&one), vec![1.0, -2.0]);
    assert_eq!(one.byte_len(), 8);
    assert_eq!(values(&CpuBuffer::from_le_bytes(DType::BF16, &[0x80, 0x3f])), vec![1.0]);
    assert_eq!(values(&CpuBuffer::from_le_bytes(DType::F16, &[0x00, 0x3c])), vec![1.0]);
    assert_eq!(ints(&CpuBuffer::from_le_bytes(DType::I64, &[0xfe; 8])), vec![-0x0101010101010102]);
    let mut rng = StdRng::seed_from_u64(16);
    for dtype in DType::ALL {
        let bytes: Vec<u8> = (0..24).map(|_| rng.random()).collect();
        let buf = CpuBuffer::from_le_bytes(dtype, &bytes);
        assert_eq!((buf.dtype(), buf.len(), buf.byte_len()), (dtype, 24 / dtype.size_of(), 24));
        assert_eq!(buf.to_le_bytes(), bytes, "{dtype}");
    }
}
