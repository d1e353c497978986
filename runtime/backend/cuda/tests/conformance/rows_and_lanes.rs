//! Row blocks and lanes on CUDA: `matmul_rows` and linear row blocks against the full
//! product and the CPU backend, and a device partitioned with green contexts (16 reserved
//! SMs): ops on the Reserved and Remainder lanes reading buffers produced on other
//! lanes, and buffers dropped while another lane still reads them.

use std::sync::{Mutex, MutexGuard, OnceLock};

use sluice_backend_cpu::CpuBuffer;
use sluice_backend_cuda::{CudaBuffer, CudaDevice, CudaOptions, Lane, PartitionState};
use sluice_host_api::{BinaryOp, DType, MatmulArgs, Op, TensorMeta, UnaryOp, infer};

use super::{Gen, Rng, compare, device, values};

/// A second device on GPU 0 with 16 SMs reserved, behind a lock: the lane is device-wide
/// state, so the tests that switch lanes must not interleave.
fn partitioned() -> Option<MutexGuard<'static, CudaDevice>> {
    static DEV: OnceLock<Result<Mutex<CudaDevice>, String>> = OnceLock::new();
    device()?;
    let dev = DEV.get_or_init(|| {
        let opts = CudaOptions {
            kernel_cache_dir: std::env::var_os("SLUICE_KERNEL_CACHE_DIR").map(Into::into),
            reserved_sms: 16,
            ..Default::default()
        };
        CudaDevice::open(opts).map(Mutex::new).map_err(|e| e.to_string())
    });
    match dev {
        Ok(d) => {
            let d = d.lock().unwrap_or_else(|p| p.into_inner());
            println!("partition: {}", d.partition());
            if std::env::var("SLUICE_REQUIRE_CUDA").as_deref() == Ok("1") {
                assert!(d.partition().is_active(), "green-context partition expected: {}", d.partition());
            }
            d.set_lane(Lane::Whole);
            Some(d)
        }
        Err(e) => panic!("the device opened once but not with a partition request: {e}"),
    }
}

fn meta(d: DType, shape: &[u32]) -> TensorMeta {
    TensorMeta::new(d, shape.to_vec()).unwrap()
}

/// |got - want| ≤ tol · max(1, max |want|) for every element (a norm-relative check, for
/// chains whose results have elements near zero).
fn close(got: &CpuBuffer, want: &CpuBuffer, tol: f32) -> Result<(), String> {
    let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
    if g.len() != w.len() {
        return Err(format!("{} elements vs {}", g.len(), w.len()));
    }
    let scale = w.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        // NaN fails too.
        if (a - b).abs().partial_cmp(&(tol * scale)).is_none_or(|o| o.is_gt()) {
            return Err(format!("element {i}: {a} vs {b} (scale {scale})"));
        }
    }
    Ok(())
}

fn fetch(dev: &CudaDevice, buf: &CudaBuffer, m: &TensorMeta) -> CpuBuffer {
    CpuBuffer::from_le_bytes(m.dtype, &dev.download(buf, m).unwrap())
}

fn cpu(op: &Op, inputs: &[(&CpuBuffer, &TensorMeta)]) -> (CpuBuffer, TensorMeta) {
    let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| *m).collect();
    let out = infer(op, &metas).unwrap();
    (sluice_backend_cpu::launch(op, inputs, &out).unwrap(), out)
}

/// Rows `rows` of every batch of a `[..batch, m, n]` tensor.
fn rows_of(full: &CpuBuffer, shape: &[u32], rows: std::ops::Range<usize>) -> Vec<f32> {
    let r = shape.len();
    let (m, n) = (shape[r - 2] as usize, shape[r - 1] as usize);
    let v = full.to_f32_vec();
    v.chunks(m * n).flat_map(|b| b[rows.start * n..rows.end * n].to_vec()).collect()
}

#[test]
fn matmul_rows_equal_rows_of_the_full_product() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(0xbeef);
    let mm = |ta, tb| MatmulArgs { transpose_a: ta, transpose_b: tb };
    let cases: Vec<(MatmulArgs, &[u32], &[u32])> = vec![
        (mm(false, false), &[37, 33], &[33, 20]),
        (mm(true, false), &[33, 37], &[33, 20]),
        (mm(false, true), &[37, 33], &[20, 33]),
        (mm(true, true), &[33, 37], &[20, 33]),
        (mm(false, false), &[3, 37, 17], &[17, 5]),
        (mm(false, true), &[3, 37, 17], &[3, 5, 17]),
        (mm(true, false), &[17, 37], &[4, 17, 5]),
        (mm(true, true), &[2, 17, 37], &[2, 5, 17]),
        (mm(false, false), &[2, 1, 37, 17], &[3, 17, 5]),
        (mm(false, false), &[37, 0], &[0, 5]),
    ];
    let mut checked = 0;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (args, ash, bsh) in &cases {
            let (am, bm) = (meta(dtype, ash), meta(dtype, bsh));
            let out = infer(&Op::Matmul(*args), &[&am, &bm]).unwrap();
            let (ha, hb) = (values(&mut rng, &am, Gen::Any), values(&mut rng, &bm, Gen::Any));
            let a = dev.upload(&am, &ha.to_le_bytes()).unwrap();
            let b = dev.upload(&bm, &hb.to_le_bytes()).unwrap();
            let full = dev.launch(&Op::Matmul(*args), &[(&a, &am), (&b, &bm)], &out).unwrap();
            let full = fetch(dev, &full, &out);
            let m = out.shape[out.rank() - 2] as usize;
            let k = if args.transpose_a { ash[ash.len() - 2] } else { ash[ash.len() - 1] } as u64;
            for rows in [0..m, 0..1, 5..18, m - 1..m, 10..10, 0..m - 1] {
                let got = dev.matmul_rows(args, (&a, &am), (&b, &bm), &out, rows.clone()).unwrap();
                let mut shape = out.shape.clone();
                let r = shape.len();
                shape[r - 2] = rows.len() as u32;
                let gm = meta(dtype, &shape);
                assert_eq!(got.byte_len(), gm.byte_len(), "{args:?} {ash:?} x {bsh:?} rows {rows:?}");
                let got = fetch(dev, &got, &gm);
                let want = CpuBuffer::from_f32_as(dtype, &rows_of(&full, &out.shape, rows.clone()));
                let what = format!("{dtype} {args:?} {ash:?} x {bsh:?} rows {rows:?}");
                compare(dtype, k, &got, &want).unwrap_or_else(|e| panic!("{what}: vs full GPU product: {e}"));
                let cpu_rows =
                    sluice_backend_cpu::matmul_rows(args, (&ha, &am), (&hb, &bm), &out, rows.clone()).unwrap();
                compare(dtype, k, &got, &cpu_rows).unwrap_or_else(|e| panic!("{what}: vs CPU matmul_rows: {e}"));
                checked += 1;
            }
        }
    }
    // Rows beyond M are refused.
    let m22 = meta(DType::F32, &[2, 2]);
    let z = dev.upload(&m22, &[0; 16]).unwrap();
    let err = dev.matmul_rows(&mm(false, false), (&z, &m22), (&z, &m22), &m22, 1..3).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    println!("{checked} row blocks checked");
}

#[test]
fn linear_rows_equal_the_cpu_backend() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(0x11ea);
    let mut checked = 0;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (transpose_w, bias, activation) in [(true, true, Some(UnaryOp::Gelu)), (false, false, None)] {
            let op = Op::Linear { transpose_w, activation };
            let xm = meta(dtype, &[3, 13, 24]);
            let wm = meta(dtype, if transpose_w { &[20, 24] } else { &[24, 20] });
            let bm = meta(dtype, &[20]);
            let (hx, hw, hb) =
                (values(&mut rng, &xm, Gen::Any), values(&mut rng, &wm, Gen::Any), values(&mut rng, &bm, Gen::Any));
            let (x, w, b) = (
                dev.upload(&xm, &hx.to_le_bytes()).unwrap(),
                dev.upload(&wm, &hw.to_le_bytes()).unwrap(),
                dev.upload(&bm, &hb.to_le_bytes()).unwrap(),
            );
            let mut gpu_in = vec![(&x, &xm), (&w, &wm)];
            let mut cpu_in = vec![(&hx, &xm), (&hw, &wm)];
            if bias {
                gpu_in.push((&b, &bm));
                cpu_in.push((&hb, &bm));
            }
            let out = infer(&op, &cpu_in.iter().map(|(_, m)| *m).collect::<Vec<_>>()).unwrap();
            for rows in [0..39, 0..1, 7..30, 38..39, 5..5] {
                let got = dev.launch_rows(&op, &gpu_in, &out, rows.clone()).unwrap();
                let gm = meta(dtype, &[rows.len() as u32, 20]);
                let got = fetch(dev, &got, &gm);
                let want = sluice_backend_cpu::launch_rows(&op, &cpu_in, &out, rows.clone()).unwrap();
                compare(dtype, 24, &got, &want)
                    .unwrap_or_else(|e| panic!("{dtype} transpose_w={transpose_w} rows {rows:?}: {e}"));
                checked += 1;
            }
            assert!(dev.launch_rows(&op, &gpu_in, &out, 30..40).is_err(), "rows past the end");
        }
    }
    println!("{checked} linear row blocks checked");
}

#[test]
fn lanes_without_a_partition_are_the_one_stream() {
    let Some(dev) = device() else { return };
    assert_eq!(*dev.partition(), PartitionState::NotRequested);
    for lane in Lane::ALL {
        assert_eq!(dev.lane_sm_count(lane), dev.sm_count());
    }
    // Switching lanes changes nothing without a partition (other tests may run
    // concurrently on this device: every lane is the same stream).
    let m = meta(DType::F32, &[3, 5]);
    let mut rng = Rng(3);
    let hx = values(&mut rng, &m, Gen::Any);
    let x = dev.upload(&m, &hx.to_le_bytes()).unwrap();
    let relu = Op::Unary(UnaryOp::Relu);
    let (want, _) = cpu(&relu, &[(&hx, &m)]);
    dev.set_lane(Lane::Reserved);
    assert_eq!(dev.lane(), Lane::Reserved);
    let y = dev.launch(&relu, &[(&x, &m)], &m).unwrap();
    dev.set_lane(Lane::Remainder);
    dev.synchronize_lane(Lane::Remainder).unwrap();
    let got = fetch(dev, &y, &m);
    dev.set_lane(Lane::Whole);
    compare(DType::F32, 1, &got, &want).unwrap();
}

#[test]
fn partitioned_lanes_match_the_cpu_backend() {
    let Some(dev) = partitioned() else { return };
    let dev = &*dev;
    if let PartitionState::Active { reserved_sms, remainder_sms, total_sms } = *dev.partition() {
        assert!(reserved_sms >= 16 && reserved_sms + remainder_sms <= total_sms, "{}", dev.partition());
        assert_eq!(dev.lane_sm_count(Lane::Reserved), reserved_sms);
        assert_eq!(dev.lane_sm_count(Lane::Remainder), remainder_sms);
        assert_eq!(dev.lane_sm_count(Lane::Whole), total_sms);
    }
    let mut rng = Rng(0x1a7e);
    let (xm, wm) = (meta(DType::F32, &[64, 48]), meta(DType::F32, &[48, 48]));
    let (hx, hw) = (values(&mut rng, &xm, Gen::Any), values(&mut rng, &wm, Gen::Any));
    let mmul = Op::Matmul(MatmulArgs::default());
    for round in 0..3 {
        // Uploads on Whole.
        dev.set_lane(Lane::Whole);
        let x = dev.upload(&xm, &hx.to_le_bytes()).unwrap();
        let w = dev.upload(&wm, &hw.to_le_bytes()).unwrap();
        // Remainder reads the uploads.
        dev.set_lane(Lane::Remainder);
        let y1 = dev.launch(&mmul, &[(&x, &xm), (&w, &wm)], &xm).unwrap();
        let (c1, _) = cpu(&mmul, &[(&hx, &xm), (&hw, &wm)]);
        // Reserved reads a kernel output of Remainder.
        dev.set_lane(Lane::Reserved);
        let y2 = dev.launch(&Op::Unary(UnaryOp::Gelu), &[(&y1, &xm)], &xm).unwrap();
        let (c2, _) = cpu(&Op::Unary(UnaryOp::Gelu), &[(&c1, &xm)]);
        // Whole reads outputs of Reserved and its own upload.
        dev.set_lane(Lane::Whole);
        let y3 = dev.launch(&Op::Binary(BinaryOp::Add), &[(&y2, &xm), (&x, &xm)], &xm).unwrap();
        let (c3, _) = cpu(&Op::Binary(BinaryOp::Add), &[(&c2, &xm), (&hx, &xm)]);
        // Reserved: a row block of a matmul of Whole's output, then a softmax.
        dev.set_lane(Lane::Reserved);
        let rows = 16..48;
        let y4 = dev.matmul_rows(&MatmulArgs::default(), (&y3, &xm), (&w, &wm), &xm, rows.clone()).unwrap();
        let rm = meta(DType::F32, &[32, 48]);
        let c4 = sluice_backend_cpu::matmul_rows(&MatmulArgs::default(), (&c3, &xm), (&hw, &wm), &xm, rows).unwrap();
        let soft = Op::Softmax { scale: 0.01 };
        let y5 = dev.launch(&soft, &[(&y4, &rm)], &rm).unwrap();
        let (c5, _) = cpu(&soft, &[(&c4, &rm)]);
        // Downloads from other lanes than the producers'.
        dev.set_lane(Lane::Remainder);
        for (what, y, c, m) in [("y5", &y5, &c5, &rm), ("y3", &y3, &c3, &xm), ("y2", &y2, &c2, &xm)] {
            close(&fetch(dev, y, m), c, 1e-5).unwrap_or_else(|e| panic!("round {round} {what}: {e}"));
        }
        dev.set_lane(Lane::Whole);
        close(&fetch(dev, &y1, &xm), &c1, 1e-5).unwrap_or_else(|e| panic!("round {round} y1: {e}"));
    }
    dev.synchronize().unwrap();
    println!("{:?}", dev.memory_stats());
}

#[test]
fn big_cross_lane_chains_match_the_unpartitioned_device() {
    let Some(pdev) = partitioned() else { return };
    let Some(dev) = device() else { return };
    let pdev = &*pdev;
    let mut rng = Rng(0x5157);
    let n = 1024u32;
    let m = meta(DType::F32, &[n, n]);
    let hx = values(&mut rng, &m, Gen::Any);
    let hw = values(&mut rng, &m, Gen::Any);
    let mmul = Op::Matmul(MatmulArgs::default());
    let scale = Op::Affine { scale: 1.0 / 64.0, bias: 0.0 };
    // Reference on the unpartitioned device.
    let x = dev.upload(&m, &hx.to_le_bytes()).unwrap();
    let w = dev.upload(&m, &hw.to_le_bytes()).unwrap();
    let r1 = dev.launch(&mmul, &[(&x, &m), (&w, &m)], &m).unwrap();
    let r2 = dev.launch(&scale, &[(&r1, &m)], &m).unwrap();
    let r3 = dev.launch(&mmul, &[(&r2, &m), (&w, &m)], &m).unwrap();
    let want = fetch(dev, &r3, &m);
    for round in 0..5 {
        pdev.set_lane(Lane::Whole);
        let x = pdev.upload(&m, &hx.to_le_bytes()).unwrap();
        let w = pdev.upload(&m, &hw.to_le_bytes()).unwrap();
        // A long GEMM on Remainder, consumed at once on Reserved, whose output goes back
        // to Remainder: every step must wait for the previous one on another stream.
        pdev.set_lane(Lane::Remainder);
        let y1 = pdev.launch(&mmul, &[(&x, &m), (&w, &m)], &m).unwrap();
        pdev.set_lane(Lane::Reserved);
        let y2 = pdev.launch(&scale, &[(&y1, &m)], &m).unwrap();
        pdev.set_lane(Lane::Remainder);
        let y3 = pdev.launch(&mmul, &[(&y2, &m), (&w, &m)], &m).unwrap();
        drop((x, w, y1, y2));
        pdev.set_lane(Lane::Reserved);
        close(&fetch(pdev, &y3, &m), &want, 1e-5).unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
    pdev.set_lane(Lane::Whole);
    pdev.synchronize().unwrap();
}

#[test]
fn buffers_dropped_while_another_lane_reads_them_are_not_reused_early() {
    let Some(pdev) = partitioned() else { return };
    let Some(dev) = device() else { return };
    let pdev = &*pdev;
    let mut rng = Rng(0xd50b);
    let n = 1024u32;
    let m = meta(DType::F32, &[n, n]);
    let mmul = Op::Matmul(MatmulArgs::default());
    let zeros = vec![0u8; m.byte_len()];
    let active = pdev.partition().is_active();
    for round in 0..6 {
        let hx = values(&mut rng, &m, Gen::Any);
        let hw = values(&mut rng, &m, Gen::Any);
        let want = {
            let x = dev.upload(&m, &hx.to_le_bytes()).unwrap();
            let w = dev.upload(&m, &hw.to_le_bytes()).unwrap();
            let r = dev.launch(&mmul, &[(&x, &m), (&w, &m)], &m).unwrap();
            fetch(dev, &r, &m)
        };
        pdev.set_lane(Lane::Whole);
        let x = pdev.upload(&m, &hx.to_le_bytes()).unwrap();
        let w = pdev.upload(&m, &hw.to_le_bytes()).unwrap();
        // The slow GEMM on the 16-SM partition reads blocks of Whole's free lists...
        pdev.set_lane(Lane::Reserved);
        let y = pdev.launch(&mmul, &[(&x, &m), (&w, &m)], &m).unwrap();
        // ...which are dropped at once, while it runs.
        drop((x, w));
        if active {
            let s = pdev.memory_stats();
            assert!(s.pending >= 2 * m.byte_len() as u64, "cross-lane blocks are parked: {s:?}");
        }
        // Whole allocates and writes blocks of the same size (a premature reuse would
        // overwrite the GEMM's inputs).
        pdev.set_lane(Lane::Whole);
        let z = pdev.upload(&m, &zeros).unwrap();
        let z2 = pdev.launch(&Op::Affine { scale: 0.0, bias: 7.0 }, &[(&z, &m)], &m).unwrap();
        let z3 = pdev.launch(&Op::Affine { scale: 0.0, bias: -3.0 }, &[(&z2, &m)], &m).unwrap();
        pdev.set_lane(Lane::Reserved);
        close(&fetch(pdev, &y, &m), &want, 1e-5).unwrap_or_else(|e| panic!("round {round}: {e}"));
        pdev.set_lane(Lane::Whole);
        let got = fetch(pdev, &z3, &m).to_f32_vec();
        assert!(got.iter().all(|&v| v == -3.0), "round {round}: Whole's own work is intact");
    }
    pdev.synchronize().unwrap();
    pdev.release_cached_memory().unwrap();
    let s = pdev.memory_stats();
    assert_eq!((s.pending, s.cached), (0, 0), "{s:?}");
    println!("{s:?}");
}
