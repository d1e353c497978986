//! Each [`Mutant`] on the fake CUDA device: the unmodified backend passes every check,
//! and with one mutant planted at least one check fails (a result that differs from the
//! CPU backend's, or an error). Runs only on the fake (`SLUICE_FAKE_CUDA=1`, as `cargo
//! xtask test-cuda-fake` sets up): the lane mutants rely on its lazy streams, which run
//! queued work only when something waits on it, so a missing wait is never hidden by
//! timing; anywhere else the test records a skip and passes.

use sluice_backend_cpu::CpuBuffer;
use sluice_host_api::{DType, MatmulArgs, Op, TensorMeta, UnaryOp, infer};

use super::{Mutant, plant};
use crate::{CudaBuffer, CudaDevice, CudaOptions, Lane};

#[path = "../../../../../tests/src/skip.rs"]
mod skip;

fn meta(shape: &[u32]) -> TensorMeta {
    TensorMeta::new(DType::F32, shape.to_vec()).unwrap()
}

/// Deterministic values in [-1, 1) that differ from element to element.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0).collect()
}

fn upload(dev: &CudaDevice, m: &TensorMeta, v: &[f32]) -> Result<CudaBuffer, String> {
    dev.upload(m, &CpuBuffer::from_f32_as(DType::F32, v).to_le_bytes()).map_err(|e| e.to_string())
}

fn download(dev: &CudaDevice, b: &CudaBuffer, m: &TensorMeta) -> Result<Vec<f32>, String> {
    let bytes = dev.download(b, m).map_err(|e| e.to_string())?;
    Ok(CpuBuffer::from_le_bytes(DType::F32, &bytes).to_f32_vec())
}

/// `got` equals `want` to f32 summation noise, with no NaN.
fn check(what: &str, got: &[f32], want: &[f32]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, want {}", got.len(), want.len()));
    }
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        if a.is_nan() || (a - b).abs() > 1e-4 * b.abs().max(1.0) {
            return Err(format!("{what}: element {i} is {a}, want {b}"));
        }
    }
    Ok(())
}

/// A matmul's arguments, operand shapes, and the row block to compute (`None`: all).
type MatmulCase = (MatmulArgs, &'static [u32], &'static [u32], Option<std::ops::Range<usize>>);

/// Matmuls (full and row blocks) covering every GEMM-planning path a mutant touches.
fn gemm_checks(dev: &CudaDevice) -> Result<(), String> {
    dev.set_lane(Lane::Whole);
    let mm = |transpose_a, transpose_b| MatmulArgs { transpose_a, transpose_b };
    let cases: [MatmulCase; 6] = [
        (mm(false, false), &[37, 33], &[33, 20], None),
        (mm(false, true), &[37, 33], &[20, 33], None),
        (mm(true, false), &[3, 17, 37], &[17, 5], None),
        (mm(false, false), &[37, 17], &[4, 17, 5], None),
        (mm(false, false), &[37, 33], &[33, 20], Some(5..18)),
        (mm(true, false), &[33, 37], &[33, 20], Some(5..18)),
    ];
    for (seed, (args, ash, bsh, rows)) in cases.into_iter().enumerate() {
        let what = format!("matmul {args:?} {ash:?} x {bsh:?} rows {rows:?}");
        let (am, bm) = (meta(ash), meta(bsh));
        let out = infer(&Op::Matmul(args), &[&am, &bm]).unwrap();
        let (ha, hb) = (values(am.numel(), seed), values(bm.numel(), seed + 100));
        let (ca, cb) = (CpuBuffer::from_f32_as(DType::F32, &ha), CpuBuffer::from_f32_as(DType::F32, &hb));
        let (a, b) = (upload(dev, &am, &ha)?, upload(dev, &bm, &hb)?);
        let (got, want) = match rows {
            None => {
                let y = dev.launch(&Op::Matmul(args), &[(&a, &am), (&b, &bm)], &out).map_err(|e| e.to_string())?;
                let want = sluice_backend_cpu::launch(&Op::Matmul(args), &[(&ca, &am), (&cb, &bm)], &out).unwrap();
                (download(dev, &y, &out)?, want)
            }
            Some(rows) => {
                let y = dev.matmul_rows(&args, (&a, &am), (&b, &bm), &out, rows.clone()).map_err(|e| e.to_string())?;
                let want = sluice_backend_cpu::matmul_rows(&args, (&ca, &am), (&cb, &bm), &out, rows.clone()).unwrap();
                let mut shape = out.shape.clone();
                let r = shape.len() - 2;
                shape[r] = rows.len() as u32;
                (download(dev, &y, &meta(&shape))?, want)
            }
        };
        check(&what, &got, &want.to_f32_vec())?;
    }
    Ok(())
}

/// Work on one lane reading buffers of another, and a buffer dropped while another
/// lane's reader has not run yet.
fn lane_checks(dev: &CudaDevice) -> Result<(), String> {
    let m = meta(&[8, 40]);
    let h = values(m.numel(), 7);
    let relu = Op::Unary(UnaryOp::Relu);
    let (first, second) = (Op::Affine { scale: 2.0, bias: 0.25 }, Op::Affine { scale: -3.0, bias: 0.5 });
    let affine = |op: &Op| -> Vec<f32> {
        let Op::Affine { scale, bias } = op else { unreachable!() };
        h.iter().map(|v| v * scale + bias).collect()
    };
    let launch = |op: &Op, x: &CudaBuffer| dev.launch(op, &[(x, &m)], &m).map_err(|e| e.to_string());

    // An upload on Whole read by a kernel on Reserved.
    dev.set_lane(Lane::Whole);
    let x = upload(dev, &m, &h)?;
    dev.set_lane(Lane::Reserved);
    let y = launch(&relu, &x)?;
    let got = download(dev, &y, &m)?;
    check("relu on Reserved of an upload on Whole", &got, &h.iter().map(|v| v.max(0.0)).collect::<Vec<_>>())?;

    // A kernel output of Whole read on Reserved, then dropped; Whole's next buffer of the
    // same size must not take its memory before the reader ran.
    dev.set_lane(Lane::Whole);
    let x = upload(dev, &m, &h)?;
    let a = launch(&first, &x)?;
    dev.set_lane(Lane::Reserved);
    let y = launch(&relu, &a)?;
    drop(a);
    dev.set_lane(Lane::Whole);
    let b = launch(&second, &x)?;
    check("the second affine on Whole", &download(dev, &b, &m)?, &affine(&second))?;
    dev.set_lane(Lane::Reserved);
    let got = download(dev, &y, &m)?;
    let want: Vec<f32> = affine(&first).iter().map(|v| v.max(0.0)).collect();
    check("relu on Reserved of a dropped output of Whole", &got, &want)?;
    dev.set_lane(Lane::Whole);
    Ok(())
}

/// Staged uploads (`crate::staging`) read by kernels: each upload dropped once its
/// reader is queued and its block reused by the next, all queued before any result is
/// read; then one kept alive while read.
fn staging_checks(dev: &CudaDevice) -> Result<(), String> {
    dev.set_lane(Lane::Whole);
    let n = crate::staging::STAGED_MIN / 4 + 3;
    let m = meta(&[n as u32]);
    let double = Op::Affine { scale: 2.0, bias: 0.0 };
    let mut outputs = Vec::new();
    for layer in 0..3 {
        let h = values(n, 40 + layer);
        let x =
            dev.upload_owned(&m, CpuBuffer::from_f32_as(DType::F32, &h).to_le_bytes()).map_err(|e| e.to_string())?;
        outputs.push((dev.launch(&double, &[(&x, &m)], &m).map_err(|e| e.to_string())?, h));
    }
    for (layer, (y, h)) in outputs.iter().enumerate() {
        let want: Vec<f32> = h.iter().map(|v| v * 2.0).collect();
        check(&format!("staged upload {layer} doubled"), &download(dev, y, &m)?, &want)?;
    }
    // A kernel reading a staged upload kept alive: nothing but the kernel's own wait
    // makes the copy run before it.
    let h = values(n, 50);
    let x = dev.upload_owned(&m, CpuBuffer::from_f32_as(DType::F32, &h).to_le_bytes()).map_err(|e| e.to_string())?;
    let y = dev.launch(&double, &[(&x, &m)], &m).map_err(|e| e.to_string())?;
    let want: Vec<f32> = h.iter().map(|v| v * 2.0).collect();
    check("a staged upload doubled while kept", &download(dev, &y, &m)?, &want)
}

/// The fused ops' own GEMMs: an attention over two batch elements (pointer-array GEMMs)
/// and a block of a linear's rows, against the CPU backend.
fn fused_checks(dev: &CudaDevice) -> Result<(), String> {
    dev.set_lane(Lane::Whole);
    let cpu_in = |metas: &[TensorMeta], seed: usize| -> Vec<CpuBuffer> {
        metas
            .iter()
            .enumerate()
            .map(|(i, m)| CpuBuffer::from_f32_as(DType::F32, &values(m.numel(), seed + i)))
            .collect()
    };
    let run = |op: &Op, metas: &[TensorMeta], rows: Option<std::ops::Range<usize>>, seed: usize| {
        let host = cpu_in(metas, seed);
        let refs: Vec<&TensorMeta> = metas.iter().collect();
        let out = infer(op, &refs).unwrap();
        let bufs: Vec<CudaBuffer> = host
            .iter()
            .zip(metas)
            .map(|(h, m)| dev.upload(m, &h.to_le_bytes()).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let gpu_args: Vec<(&CudaBuffer, &TensorMeta)> = bufs.iter().zip(metas).collect();
        let cpu_args: Vec<(&CpuBuffer, &TensorMeta)> = host.iter().zip(metas).collect();
        let (y, ym, want) = match rows {
            None => {
                let y = dev.launch(op, &gpu_args, &out).map_err(|e| e.to_string())?;
                (y, out.clone(), sluice_backend_cpu::launch(op, &cpu_args, &out).unwrap())
            }
            Some(rows) => {
                let y = dev.launch_rows(op, &gpu_args, &out, rows.clone()).map_err(|e| e.to_string())?;
                let ym = meta(&[rows.len() as u32, out.shape[out.rank() - 1]]);
                (y, ym, sluice_backend_cpu::launch_rows(op, &cpu_args, &out, rows).unwrap())
            }
        };
        check(&format!("{op:?}"), &download(dev, &y, &ym)?, &want.to_f32_vec())
    };
    let att = Op::Attention { heads: 3, scale: 0.4 };
    run(&att, &[meta(&[2, 4, 12]), meta(&[2, 5, 12]), meta(&[2, 5, 12])], None, 60)?;
    let lin = Op::Linear { transpose_w: true, activation: None };
    run(&lin, &[meta(&[12, 16]), meta(&[8, 16])], Some(3..9), 70)
}

fn all_checks(dev: &CudaDevice) -> Result<(), String> {
    gemm_checks(dev)?;
    fused_checks(dev)?;
    lane_checks(dev)?;
    staging_checks(dev)
}

#[test]
fn every_planted_backend_bug_is_caught() {
    if std::env::var("SLUICE_FAKE_CUDA").as_deref() != Ok("1") || crate::probe::libraries().check().is_err() {
        skip::skip("CUDA mutation check", "runs on the fake CUDA device only (cargo xtask test-cuda-fake)");
        return;
    }
    let opts = CudaOptions { reserved_sms: 16, ..Default::default() };
    let dev = CudaDevice::open(opts).expect("the fake device opens");
    assert!(dev.partition().is_active(), "the lane mutants need a partition: {}", dev.partition());
    all_checks(&dev).expect("the unmodified backend passes every check");
    let mut missed = Vec::new();
    for m in Mutant::ALL {
        let planted = plant(m);
        let outcome = all_checks(&dev);
        drop(planted);
        // Whatever the mutant left queued runs now, and the device is still usable.
        dev.synchronize().expect("a mutant leaves no sticky error");
        match outcome {
            Err(why) => println!("caught {m:?}: {why}"),
            Ok(()) => missed.push(m),
        }
    }
    assert!(missed.is_empty(), "planted bugs not caught: {missed:?}");
    all_checks(&dev).expect("the backend passes again with no mutant planted");
}
