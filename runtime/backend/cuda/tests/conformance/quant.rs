//! Block-quantized weights (Q4_1, Q8_0) on the GPU against the CPU backend (itself
//! checked against dequantize-then-f64 in `runtime/backend/cpu/tests/conformance/quant.rs`):
//! the dequantizing linear with Q8 activations over odd shapes (one row, few rows,
//! many; odd n; leading axes; bias and activation; row blocks), the gather from a
//! quantized table (with the fault of an id outside it) and the cast to f32.

use sluice_backend_cpu::CpuBuffer;
use sluice_host_api::{DType, Op, TensorMeta, UnaryOp, infer};

use super::{Rng, compare, device};

fn meta(d: DType, shape: &[u32]) -> TensorMeta {
    TensorMeta::new(d, shape.to_vec()).unwrap()
}

/// `numel` random values in [-2, 2), as `dtype` (block formats quantized by the CPU backend).
fn random(rng: &mut Rng, dtype: DType, shape: &[u32]) -> (CpuBuffer, TensorMeta) {
    let m = meta(dtype, shape);
    let v: Vec<f32> = (0..m.numel()).map(|_| 4.0 * rng.unit() - 2.0).collect();
    (CpuBuffer::from_f32_as(dtype, &v), m)
}

/// Runs `op` on both backends; the GPU result and the CPU one.
fn both(op: &Op, inputs: &[(CpuBuffer, TensorMeta)]) -> Result<(CpuBuffer, CpuBuffer), String> {
    let dev = device().expect("checked by the caller");
    let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| m).collect();
    let out = infer(op, &metas).map_err(|e| e.to_string())?;
    let cpu_in: Vec<(&CpuBuffer, &TensorMeta)> = inputs.iter().map(|(b, m)| (b, m)).collect();
    let want = sluice_backend_cpu::launch(op, &cpu_in, &out).map_err(|e| e.to_string())?;
    let bufs: Vec<_> = inputs.iter().map(|(b, m)| dev.upload(m, &b.to_le_bytes()).unwrap()).collect();
    let gpu_in: Vec<_> = bufs.iter().zip(metas).collect();
    let y = dev.launch(op, &gpu_in, &out).map_err(|e| e.to_string())?;
    let got = CpuBuffer::from_le_bytes(out.dtype, &dev.download(&y, &out).map_err(|e| e.to_string())?);
    Ok((got, want))
}

#[test]
fn quantized_linears_match_the_cpu_backend() {
    if device().is_none() {
        return;
    }
    let mut rng = Rng(0x9a17_0000_0000_0016);
    let mut failures = Vec::new();
    let shapes: [&[u32]; 5] = [&[1, 32], &[1, 576], &[3, 96], &[2, 3, 64], &[9, 160]];
    for q in DType::QUANTIZED {
        for (x_shape, n) in shapes.iter().zip([1u32, 37, 5, 9, 131]) {
            let k = *x_shape.last().unwrap();
            for (activation, bias) in [(None, false), (Some(UnaryOp::Gelu), true)] {
                let op = Op::Linear { transpose_w: true, activation };
                let mut inputs = vec![random(&mut rng, DType::F32, x_shape), random(&mut rng, q, &[n, k])];
                if bias {
                    inputs.push(random(&mut rng, DType::F32, &[n]));
                }
                let what = format!("{q} linear x {x_shape:?} n {n} {activation:?} bias {bias}");
                match both(&op, &inputs).and_then(|(got, want)| compare(DType::F32, k as u64, &got, &want)) {
                    Ok(err) => println!("ok   {what}: max rel err {err:.2e}"),
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn quantized_linear_row_blocks_match_the_cpu_backend() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(0x9a17_0000_0000_0017);
    for q in DType::QUANTIZED {
        let (x, xm) = random(&mut rng, DType::F32, &[7, 64]);
        let (w, wm) = random(&mut rng, q, &[11, 64]);
        let op = Op::Linear { transpose_w: true, activation: None };
        let out = infer(&op, &[&xm, &wm]).unwrap();
        let (xg, wg) = (dev.upload(&xm, &x.to_le_bytes()).unwrap(), dev.upload(&wm, &w.to_le_bytes()).unwrap());
        for rows in [0..1, 1..5, 5..7] {
            let gpu = dev.launch_rows(&op, &[(&xg, &xm), (&wg, &wm)], &out, rows.clone()).unwrap();
            let block = meta(DType::F32, &[rows.len() as u32, 11]);
            let got = CpuBuffer::from_le_bytes(DType::F32, &dev.download(&gpu, &block).unwrap());
            let want = sluice_backend_cpu::launch_rows(&op, &[(&x, &xm), (&w, &wm)], &out, rows.clone()).unwrap();
            compare(DType::F32, 64, &got, &want).unwrap_or_else(|e| panic!("{q} rows {rows:?}: {e}"));
        }
    }
}

#[test]
fn quantized_tables_gather_and_cast_like_the_cpu_backend() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(0x9a17_0000_0000_0018);
    for q in DType::QUANTIZED {
        let table = random(&mut rng, q, &[13, 96]);
        for id_type in [DType::I32, DType::I64] {
            let ids = (CpuBuffer::from_f32_as(id_type, &[12.0, 0.0, 5.0, 5.0, 1.0]), meta(id_type, &[5]));
            let (got, want) = both(&Op::Embedding, &[table.clone(), ids]).unwrap();
            assert_eq!(got.to_le_bytes(), want.to_le_bytes(), "{q} {id_type} embedding (exact)");
        }
        let (got, want) = both(&Op::Cast(DType::F32), std::slice::from_ref(&table)).unwrap();
        assert_eq!(got.to_le_bytes(), want.to_le_bytes(), "{q} cast (exact)");
        // An id outside the table is reported when the result is read.
        let bad = (CpuBuffer::from_f32_as(DType::I32, &[13.0]), meta(DType::I32, &[1]));
        let out = infer(&Op::Embedding, &[&table.1, &bad.1]).unwrap();
        let (tg, ig) =
            (dev.upload(&table.1, &table.0.to_le_bytes()).unwrap(), dev.upload(&bad.1, &bad.0.to_le_bytes()).unwrap());
        let y = dev.launch(&Op::Embedding, &[(&tg, &table.1), (&ig, &bad.1)], &out).unwrap();
        let e = dev.download(&y, &out).unwrap_err().to_string();
        assert!(e.contains("13"), "{q}: {e}");
    }
}
