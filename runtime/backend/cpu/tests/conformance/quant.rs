//! Conformance of the block-quantized weights (Q4_1, Q8_0): the transposed linear with
//! f32 activations (both of its paths: the per-row dot products for few rows, the
//! dequantized panels through gemm for more, over odd shapes, bias and activation, and
//! row blocks), the embedding gather from a quantized table and the cast to f32, each
//! against dequantize-then-f64 from the format's definition (`reference::dequantize`),
//! the linear's activations rounded to Q8 blocks as the definition says
//! (`reference::q8_activations`).

use super::*;

/// A `[rows, cols]` tensor of random blocks: scales and minima of either sign, every
/// nibble and byte value possible.
fn quantized(rng: &mut StdRng, dtype: DType, shape: &[usize]) -> Input {
    let blocks = r::numel(shape) / 32;
    let mut bytes = Vec::with_capacity(blocks * dtype.block_bytes());
    for _ in 0..blocks {
        bytes.extend(f16::from_f32(rng.random_range(-0.05..0.05)).to_le_bytes());
        let rest = dtype.block_bytes() - 2;
        if dtype == DType::Q4_1 {
            bytes.extend(f16::from_f32(rng.random_range(-0.4..0.4)).to_le_bytes());
            bytes.extend((0..rest - 2).map(|_| rng.random::<u8>()));
        } else {
            bytes.extend((0..rest).map(|_| rng.random::<u8>()));
        }
    }
    let buf = CpuBuffer::from_le_bytes(dtype, &bytes);
    let vals = values(&buf);
    Input { buf, meta: meta(dtype, shape), vals }
}

#[test]
fn quantized_linears_match_dequantize_then_f64() {
    let mut rng = StdRng::seed_from_u64(41);
    // (m, k, n): one row and few rows take the dot path, more rows the gemm panels
    // (n over 256 spans several panels); odd n everywhere.
    let shapes = [(1, 32, 1), (1, 64, 7), (2, 96, 5), (4, 576, 37), (5, 64, 300), (17, 160, 513), (1, 576, 1537)];
    for dtype in DType::QUANTIZED {
        for &(m, k, n) in &shapes {
            let x = random(&mut rng, DType::F32, &[m, k], -2.0, 2.0);
            let w = quantized(&mut rng, dtype, &[n, k]);
            let b = random(&mut rng, DType::F32, &[n], -1.0, 1.0);
            let (_, want, mags) = r::matmul(&r::q8_activations(&x.vals), &[m, k], &w.vals, &[n, k], false, true);
            let ctx = format!("{dtype} linear m={m} k={k} n={n}");
            let op = Op::Linear { transpose_w: true, activation: None };
            let got = values(&run(&op, &[&x, &w], &[m, n]));
            check(&ctx, &got, &want, Some(&mags), 1e-5, 1e-6);
            // With a bias and an activation.
            let op = Op::Linear { transpose_w: true, activation: Some(UnaryOp::Relu) };
            let want_b: Vec<f64> = want.iter().enumerate().map(|(i, v)| (v + b.vals[i % n]).max(0.0)).collect();
            let mags_b: Vec<f64> = mags.iter().enumerate().map(|(i, v)| v + b.vals[i % n].abs()).collect();
            let got = values(&run(&op, &[&x, &w, &b], &[m, n]));
            check(&format!("{ctx} +bias relu"), &got, &want_b, Some(&mags_b), 1e-5, 1e-6);
        }
        // Leading axes of x are rows.
        let x = random(&mut rng, DType::F32, &[2, 3, 64], -1.0, 1.0);
        let w = quantized(&mut rng, dtype, &[9, 64]);
        let (_, want, mags) = r::matmul(&r::q8_activations(&x.vals), &[6, 64], &w.vals, &[9, 64], false, true);
        let got = values(&run(&Op::Linear { transpose_w: true, activation: None }, &[&x, &w], &[2, 3, 9]));
        check(&format!("{dtype} rank-3 linear"), &got, &want, Some(&mags), 1e-5, 1e-6);
    }
}

#[test]
fn a_quantized_linears_activation_gives_the_bits_of_the_unary_op_after_it() {
    // Without a bias the activation is applied inside the linear's tasks (each to the
    // outputs it made): the same bits as the linear followed by the unary op, on the
    // serial and the parallel split, on both paths.
    let mut rng = StdRng::seed_from_u64(45);
    for dtype in DType::QUANTIZED {
        for (m, k, n) in [(1, 64, 7), (3, 96, 40), (4, 576, 37), (17, 160, 513), (1, 576, 1537)] {
            let x = random(&mut rng, DType::F32, &[m, k], -2.0, 2.0);
            let w = quantized(&mut rng, dtype, &[n, k]);
            let plain = run(&Op::Linear { transpose_w: true, activation: None }, &[&x, &w], &[m, n]);
            let plain = Input { vals: values(&plain), buf: plain, meta: meta(DType::F32, &[m, n]) };
            for act in [UnaryOp::Silu, UnaryOp::Exp, UnaryOp::Gelu, UnaryOp::Tanh] {
                let fused = run(&Op::Linear { transpose_w: true, activation: Some(act) }, &[&x, &w], &[m, n]);
                let after = run(&Op::Unary(act), &[&plain], &[m, n]);
                let bits = |b: &CpuBuffer| values(b).iter().map(|v| (*v as f32).to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fused), bits(&after), "{dtype} {act:?} m={m} k={k} n={n}");
            }
        }
    }
}

#[test]
fn quantized_linears_in_row_blocks_concatenate_to_the_whole() {
    let mut rng = StdRng::seed_from_u64(42);
    for dtype in DType::QUANTIZED {
        let x = random(&mut rng, DType::F32, &[9, 128], -1.0, 1.0);
        let w = quantized(&mut rng, dtype, &[33, 128]);
        let op = Op::Linear { transpose_w: true, activation: None };
        let (whole, out) = try_run(&op, &[&x, &w]).unwrap();
        let pairs = [(&x.buf, &x.meta), (&w.buf, &w.meta)];
        let mut parts = Vec::new();
        for rows in [0..1, 1..6, 6..9] {
            parts.extend(values(&launch_rows(&op, &pairs, &out, rows).unwrap()));
        }
        let (_, want, mags) = r::matmul(&r::q8_activations(&x.vals), &[9, 128], &w.vals, &[33, 128], false, true);
        check(&format!("{dtype} row blocks"), &parts, &want, Some(&mags), 1e-5, 1e-6);
        check(&format!("{dtype} whole"), &values(&whole), &want, Some(&mags), 1e-5, 1e-6);
    }
}

#[test]
fn quantized_tables_gather_dequantized_rows_and_cast_to_f32() {
    let mut rng = StdRng::seed_from_u64(43);
    for dtype in DType::QUANTIZED {
        let table = quantized(&mut rng, dtype, &[11, 96]);
        for id_type in [DType::I32, DType::I64] {
            let ids = input(id_type, &[2, 3], vec![0.0, 10.0, 4.0, 4.0, 7.0, 1.0]);
            let got = run(&Op::Embedding, &[&table, &ids], &[2, 3, 96]);
            assert_eq!(got.dtype(), DType::F32);
            let want: Vec<f64> =
                ids.vals.iter().flat_map(|&id| table.vals[id as usize * 96..][..96].to_vec()).collect();
            assert_eq!(values(&got), want, "{dtype} embedding (dequantization is exact in f32)");
        }
        let bad = input(DType::I32, &[1], vec![11.0]);
        let pairs = [(&table.buf, &table.meta), (&bad.buf, &bad.meta)];
        let out = infer(&Op::Embedding, &[&table.meta, &bad.meta]).unwrap();
        assert!(launch(&Op::Embedding, &pairs, &out).unwrap_err().0.contains("not in 0..11"));
        let got = run(&Op::Cast(DType::F32), &[&table], &[11, 96]);
        assert_eq!(values(&got), table.vals, "{dtype} cast");
    }
}

#[test]
fn block_buffers_round_trip_their_bytes() {
    let mut rng = StdRng::seed_from_u64(44);
    for dtype in DType::QUANTIZED {
        let bytes: Vec<u8> = (0..3 * dtype.block_bytes()).map(|_| rng.random()).collect();
        let buf = CpuBuffer::from_le_bytes(dtype, &bytes);
        assert_eq!((buf.dtype(), buf.len(), buf.byte_len()), (dtype, 96, bytes.len()));
        assert_eq!(buf.to_le_bytes(), bytes, "{dtype}");
        assert_eq!(meta(dtype, &[3, 32]).byte_len(), bytes.len());
    }
}
