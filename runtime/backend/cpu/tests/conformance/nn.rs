//! Conformance of the compute-heavy ops: matmul (transposes, batch broadcast, row
//! blocks), softmax with masks, layer norm, embedding, conv2d and pool2d.

use super::*;

#[test]
fn matmul_transposes_and_batch_broadcast() {
    let mut rng = StdRng::seed_from_u64(6);
    #[rustfmt::skip]
    let cases: &[(&[usize], &[usize], bool, bool)] = &[
        (&[3, 4], &[4, 5], false, false),
        (&[4, 3], &[4, 5], true, false),
        (&[3, 4], &[5, 4], false, true),
        (&[4, 3], &[5, 4], true, true),
        (&[2, 1, 3, 4], &[5, 4, 6], false, false),
        (&[3, 1, 4, 3], &[2, 6, 4], true, true),
        (&[1, 2], &[2, 1], false, false),
        (&[7, 1], &[1, 9], false, false),
        (&[3, 0], &[0, 4], false, false),
        (&[0, 4], &[4, 3], false, false),
        (&[2, 3, 4], &[4, 0], false, false),
        (&[0, 3, 4], &[4, 2], false, false),
        (&[6, 33, 17], &[6, 17, 29], false, false),
        (&[64, 96], &[80, 96], false, true),
        (&[16, 64, 64], &[64, 64], false, false),
        (&[300, 256], &[300, 200], true, false),
    ];
    for dtype in FLOATS {
        for &(ash, bsh, ta, tb) in cases {
            if dtype != DType::F32 && ash.iter().product::<usize>() > 20_000 {
                continue;
            }
            let a = random(&mut rng, dtype, ash, -1.0, 1.0);
            let b = random(&mut rng, dtype, bsh, -1.0, 1.0);
            let (shape, want, mags) = r::matmul(&a.vals, ash, &b.vals, bsh, ta, tb);
            let op = Op::Matmul(MatmulArgs { transpose_a: ta, transpose_b: tb });
            let got = run(&op, &[&a, &b], &shape);
            check(
                &format!("matmul {dtype} {ash:?}{ta} {bsh:?}{tb}"),
                &values(&got),
                &want,
                Some(&mags),
                tol(dtype),
                0.0,
            );
        }
    }
}

#[test]
fn matmul_row_blocks_partition_the_product() {
    let mut rng = StdRng::seed_from_u64(7);
    for (ta, ash) in [(false, [2, 3, 10, 7]), (true, [2, 3, 7, 10])] {
        let a = random(&mut rng, DType::F32, &ash, -1.0, 1.0);
        let b = random(&mut rng, DType::F32, &[7, 5], -1.0, 1.0);
        let args = MatmulArgs { transpose_a: ta, transpose_b: false };
        let out = infer(&Op::Matmul(args), &[&a.meta, &b.meta]).unwrap();
        let (_, want, mags) = r::matmul(&a.vals, &ash, &b.vals, &[7, 5], ta, false);
        let blocks: Vec<Vec<f64>> = [0..4, 4..4, 4..9, 9..10]
            .into_iter()
            .map(|rows| values(&matmul_rows(&args, (&a.buf, &a.meta), (&b.buf, &b.meta), &out, rows).unwrap()))
            .collect();
        // Reassemble along M: batch-major, then each block's rows.
        let mut got = vec![];
        for batch in 0..6 {
            for (blk, len) in blocks.iter().zip([4, 0, 5, 1]) {
                got.extend_from_slice(&blk[batch * len * 5..(batch + 1) * len * 5]);
            }
        }
        check(&format!("matmul_rows ta={ta}"), &got, &want, Some(&mags), 1e-5, 0.0);
        assert!(matmul_rows(&args, (&a.buf, &a.meta), (&b.buf, &b.meta), &out, 3..11).is_err());
    }
}

#[test]
fn linear_row_blocks_partition_the_output() {
    let mut rng = StdRng::seed_from_u64(8);
    for (dtype, transpose_w, bias) in [(DType::F32, true, true), (DType::F16, false, true), (DType::BF16, true, false)]
    {
        let x = random(&mut rng, dtype, &[2, 5, 6], -1.0, 1.0);
        let w = random(&mut rng, dtype, if transpose_w { &[4, 6] } else { &[6, 4] }, -1.0, 1.0);
        let b = random(&mut rng, dtype, &[4], -1.0, 1.0);
        let op = Op::Linear { transpose_w, activation: Some(sluice_host_api::UnaryOp::Tanh) };
        let mut inputs = vec![(&x.buf, &x.meta), (&w.buf, &w.meta)];
        if bias {
            inputs.push((&b.buf, &b.meta));
        }
        let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| *m).collect();
        let out = infer(&op, &metas).unwrap();
        let whole = values(&launch(&op, &inputs, &out).unwrap());
        let mut got = vec![];
        for rows in [0..3, 3..3, 3..9, 9..10] {
            let block = launch_rows(&op, &inputs, &out, rows.clone()).unwrap();
            assert_eq!(block.len(), rows.len() * 4, "{dtype} rows {rows:?}");
            got.extend(values(&block));
        }
        check(&format!("linear rows {dtype} transpose_w={transpose_w}"), &got, &whole, None, tol(dtype), 0.0);
        assert!(launch_rows(&op, &inputs, &out, 8..11).is_err(), "rows past the end");
    }
    let x = random(&mut rng, DType::F32, &[4, 4], -1.0, 1.0);
    let op = Op::Unary(sluice_host_api::UnaryOp::Exp);
    let err = launch_rows(&op, &[(&x.buf, &x.meta)], &x.meta, 0..2).unwrap_err();
    assert!(err.0.contains("cannot be computed in row blocks"), "{err}");
}

#[test]
fn softmax_with_scale_and_mask() {
    let mut rng = StdRng::seed_from_u64(8);
    let cases: &[(&[usize], Option<&[usize]>)] = &[
        (&[2, 3, 5], None),
        (&[2, 3, 5], Some(&[5])),
        (&[2, 3, 5], Some(&[3, 1])),
        (&[2, 3, 5], Some(&[3, 5])),
        (&[2, 3, 5], Some(&[1, 3, 5])),
        (&[1], None),
        (&[4, 1], Some(&[4, 1])),
        (&[0, 5], None),
        (&[64, 1100], Some(&[1100])),
    ];
    for dtype in FLOATS {
        for &(shape, mask_shape) in cases {
            let x = random(&mut rng, dtype, shape, -4.0, 4.0);
            let mask = mask_shape.map(|ms| {
                let mut m = random(&mut rng, dtype, ms, -2.0, 0.0).vals;
                for v in m.iter_mut() {
                    if rng.random_range(0..4) == 0 {
                        *v = f64::NEG_INFINITY;
                    }
                }
                if ms == [3, 5] {
                    m[5..10].fill(f64::NEG_INFINITY); // a fully masked row
                }
                input(dtype, ms, m)
            });
            let scale = 0.37f32;
            let want = r::softmax(
                &x.vals,
                shape,
                scale as f64,
                mask.as_ref().zip(mask_shape).map(|(m, ms)| (&m.vals[..], ms)),
            );
            let inputs: Vec<&Input> = std::iter::once(&x).chain(mask.as_ref()).collect();
            let got = run(&Op::Softmax { scale }, &inputs, shape);
            check(&format!("softmax {dtype} {shape:?} {mask_shape:?}"), &values(&got), &want, None, tol(dtype), 1e-3);
            if mask_shape == Some(&[3, 5]) {
                assert!(values(&got)[5..10].iter().all(|&v| v == 0.0), "fully masked row is zeros");
            }
        }
    }
}

#[test]
fn layer_norm() {
    let mut rng = StdRng::seed_from_u64(9);
    for dtype in FLOATS {
        for shape in [&[4, 16][..], &[1], &[3, 2, 7], &[0, 8], &[200, 384]] {
            let d = *shape.last().unwrap();
            let x = random(&mut rng, dtype, shape, -3.0, 5.0);
            let g = random(&mut rng, dtype, &[d], 0.5, 1.5);
            let b = random(&mut rng, dtype, &[d], -1.0, 1.0);
            let eps = 1e-5f32;
            let (want, mags) = r::layer_norm(&x.vals, d, &g.vals, &b.vals, eps as f64);
            let got = run(&Op::LayerNorm { eps }, &[&x, &g, &b], shape);
            check(&format!("layer-norm {dtype} {shape:?}"), &values(&got), &want, Some(&mags), tol(dtype), 0.0);
        }
    }
}

#[test]
fn embedding_gathers_rows_and_rejects_bad_ids() {
    let mut rng = StdRng::seed_from_u64(10);
    for dtype in FLOATS {
        let table = random(&mut rng, dtype, &[10, 4], -1.0, 1.0);
        for id_dtype in [DType::I32, DType::I64] {
            for (shape, ids) in [(&[2, 3][..], vec![0.0, 9.0, 3.0, 3.0, 7.0, 1.0]), (&[], vec![5.0]), (&[0], vec![])] {
                let ids = input(id_dtype, shape, ids);
                let mut out_shape = shape.to_vec();
                out_shape.push(4);
                let want: Vec<f64> =
                    ids.vals.iter().flat_map(|&i| table.vals[i as usize * 4..][..4].to_vec()).collect();
                assert_eq!(
                    values(&run(&Op::Embedding, &[&table, &ids], &out_shape)),
                    want,
                    "{dtype} {id_dtype} {shape:?}"
                );
            }
            for bad in [10.0, -1.0] {
                let ids = input(id_dtype, &[3], vec![1.0, bad, 2.0]);
                let err = try_run(&Op::Embedding, &[&table, &ids]).unwrap_err();
                assert!(err.0.contains("embedding id") && err.0.contains("0..10"), "{err}");
            }
        }
    }
}

#[test]
fn conv2d_stride_padding_dilation_groups() {
    let mut rng = StdRng::seed_from_u64(14);
    type Case = ([usize; 4], [usize; 4], (usize, usize), (usize, usize), (usize, usize), usize, bool);
    #[rustfmt::skip]
    let cases: &[Case] = &[
        ([1, 1, 5, 5], [1, 1, 3, 3], (1, 1), (0, 0), (1, 1), 1, false),
        ([2, 4, 7, 6], [6, 2, 3, 2], (2, 1), (1, 0), (1, 2), 2, true),
        ([1, 3, 8, 8], [4, 3, 1, 1], (1, 1), (0, 0), (1, 1), 1, true),
        ([1, 3, 8, 8], [4, 3, 1, 1], (2, 2), (0, 0), (1, 1), 1, false),
        ([2, 6, 9, 9], [6, 1, 3, 3], (1, 1), (1, 1), (1, 1), 6, true),
        ([1, 2, 5, 5], [3, 2, 5, 5], (1, 1), (2, 2), (1, 1), 1, false),
        ([1, 2, 7, 9], [4, 2, 2, 3], (3, 2), (1, 2), (2, 3), 1, true),
        ([0, 2, 5, 5], [2, 2, 3, 3], (1, 1), (0, 0), (1, 1), 1, true),
        ([4, 16, 20, 20], [32, 16, 3, 3], (1, 1), (1, 1), (1, 1), 1, true),
        ([1, 16, 32, 32], [32, 8, 3, 3], (1, 1), (1, 1), (1, 1), 2, false),
    ];
    for dtype in FLOATS {
        for &(xsh, wsh, stride, pad, dil, groups, with_bias) in cases {
            if dtype != DType::F32 && xsh[1] > 8 {
                continue;
            }
            let x = random(&mut rng, dtype, &xsh, -1.0, 1.0);
            let w = random(&mut rng, dtype, &wsh, -1.0, 1.0);
            let b = random(&mut rng, dtype, &[wsh[0]], -1.0, 1.0);
            let (shape, want, mags) =
                r::conv2d(&x.vals, xsh, &w.vals, wsh, with_bias.then_some(&b.vals[..]), stride, pad, dil, groups);
            let u = |p: (usize, usize)| (p.0 as u32, p.1 as u32);
            let op =
                Op::Conv2d(Conv2dArgs { stride: u(stride), padding: u(pad), dilation: u(dil), groups: groups as u32 });
            let inputs: Vec<&Input> = [&x, &w].into_iter().chain(with_bias.then_some(&b)).collect();
            let got = run(&op, &inputs, &shape);
            let ctx = format!("conv2d {dtype} x{xsh:?} w{wsh:?} s{stride:?} p{pad:?} d{dil:?} g{groups}");
            check(&ctx, &values(&got), &want, Some(&mags), tol(dtype), 0.0);
        }
    }
}

#[test]
fn pool2d_max_and_avg() {
    let mut rng = StdRng::seed_from_u64(15);
    type Case = ([usize; 4], (usize, usize), (usize, usize), (usize, usize));
    let cases: &[Case] = &[
        ([1, 2, 5, 5], (2, 2), (2, 2), (0, 0)),
        ([2, 3, 6, 7], (3, 3), (1, 2), (1, 1)),
        ([1, 1, 4, 5], (3, 2), (2, 1), (2, 1)),
        ([1, 1, 1, 1], (1, 1), (1, 1), (0, 0)),
        ([2, 8, 64, 64], (3, 3), (1, 1), (1, 1)),
    ];
    for dtype in FLOATS {
        for &(xsh, k, stride, pad) in cases {
            let x = random(&mut rng, dtype, &xsh, -3.0, 3.0);
            for (kind, max) in [(PoolKind::Max, true), (PoolKind::Avg, false)] {
                let (shape, want) = r::pool2d(&x.vals, xsh, max, k, stride, pad);
                let u = |p: (usize, usize)| (p.0 as u32, p.1 as u32);
                let op = Op::Pool2d(Pool2dArgs { kind, kernel: u(k), stride: u(stride), padding: u(pad) });
                let got = run(&op, &[&x], &shape);
                let ctx = format!("pool2d {kind:?} {dtype} {xsh:?} k{k:?} s{stride:?} p{pad:?}");
                check(&ctx, &values(&got), &want, None, tol(dtype), 1.0);
            }
        }
    }
}

/// RoPE in f64 from its definition: for x `[..., s, heads, d]` the pair (2i, 2i + 1) at
/// sequence index j turns by `(offset + j) · base^(-2i/d)`.
fn rope_f64(x: &[f64], shape: &[usize], base: f64, offset: u32) -> Vec<f64> {
    let r = shape.len();
    let (s, heads, d) = (shape[r - 3], shape[r - 2], shape[r - 1]);
    let mut out = x.to_vec();
    for (row, chunk) in out.chunks_mut(d).enumerate() {
        let p = offset as f64 + (row / heads % s) as f64;
        for i in 0..d / 2 {
            let theta = p * base.powf(-2.0 * i as f64 / d as f64);
            let (x0, x1) = (chunk[2 * i], chunk[2 * i + 1]);
            chunk[2 * i] = x0 * theta.cos() - x1 * theta.sin();
            chunk[2 * i + 1] = x0 * theta.sin() + x1 * theta.cos();
        }
    }
    out
}

#[test]
fn rope_rotates_adjacent_pairs_by_position() {
    let mut rng = StdRng::seed_from_u64(71);
    for dtype in FLOATS {
        for (shape, base, offset) in
            [(&[4, 9, 64][..], 1e5, 0u32), (&[1, 3, 64], 1e5, 4095), (&[2, 3, 2, 6], 1e4, 17), (&[2, 1, 2], 10.0, 8191)]
        {
            let x = random(&mut rng, dtype, shape, -2.0, 2.0);
            let got = values(&run(&Op::Rope { base: base as f32, offset }, &[&x], shape));
            let want = rope_f64(&x.vals, shape, base as f32 as f64, offset);
            // cos and sin are rounded to f32 before the products.
            let tol = if dtype == DType::F32 { 1e-6 } else { tol(dtype) };
            check(&format!("rope {dtype} {shape:?} offset {offset}"), &got, &want, None, tol, 1.0);
        }
    }
    // Offset o on sequence index 0 equals offset 0 on sequence index o.
    let x = random(&mut rng, DType::F32, &[1, 2, 8], -1.0, 1.0);
    let long = input(DType::F32, &[6, 2, 8], (0..96).map(|i| x.vals[i % 16]).collect());
    let shifted = values(&run(&Op::Rope { base: 1e4, offset: 5 }, &[&x], &[1, 2, 8]));
    let whole = values(&run(&Op::Rope { base: 1e4, offset: 0 }, &[&long], &[6, 2, 8]));
    assert_eq!(shifted, whole[5 * 16..].to_vec());
}

#[test]
fn argmax_takes_the_first_largest_and_the_first_nan() {
    let mut rng = StdRng::seed_from_u64(81);
    for dtype in FLOATS {
        for shape in [&[1, 49152][..], &[3, 17], &[2, 2, 5], &[7]] {
            let x = random(&mut rng, dtype, shape, -2.0, 2.0);
            let len = *shape.last().unwrap();
            let out_shape = &shape[..shape.len() - 1];
            let got = run(&Op::Argmax, &[&x], out_shape);
            assert_eq!(got.dtype(), DType::I32);
            let want: Vec<f64> = x
                .vals
                .chunks(len)
                .map(|row| {
                    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    row.iter().position(|&v| v == max).unwrap() as f64
                })
                .collect();
            assert_eq!(values(&got), want, "argmax {dtype} {shape:?}");
        }
    }
    let x = input(DType::F32, &[3, 4], vec![1.0, 3.0, 3.0, 2.0, 0.0, f64::NAN, 9.0, f64::NAN, -1.0, -1.0, -1.0, -1.0]);
    assert_eq!(values(&run(&Op::Argmax, &[&x], &[3])), vec![1.0, 1.0, 0.0]);
}

/// `sample`: top-k = 1 is argmax; draws follow the softmax (4000 rows of the same
/// logits, each row its own draw); top-p keeps exactly the nucleus; top-k the k largest;
/// a seed repeats, another seed differs; a lower temperature concentrates the draws.
#[test]
fn sample_draws_by_temperature_top_k_and_top_p() {
    use sluice_host_api::SampleArgs;
    let draw = |x: &Input, temperature, top_k, top_p, seed| {
        let rows = x.meta.shape[0] as usize;
        let op = Op::Sample(SampleArgs { temperature, top_k, top_p, seed });
        values(&run(&op, &[x], &[rows])).iter().map(|&v| v as usize).collect::<Vec<_>>()
    };
    let mut rng = StdRng::seed_from_u64(41);
    let x = random(&mut rng, DType::F32, &[50, 300], -4.0, 4.0);
    let greedy = values(&run(&Op::Argmax, &[&x], &[50]));
    let top1 = draw(&x, 1.0, 1, 1.0, 9);
    assert_eq!(top1.iter().map(|&t| t as f64).collect::<Vec<_>>(), greedy, "top-k 1 is argmax");

    // p = 1/10, 2/10, 3/10, 4/10 (and a NaN and -inf that are never drawn).
    let n = 4000;
    let row = [0.0, 2f64.ln(), 3f64.ln(), 4f64.ln(), f64::NAN, f64::NEG_INFINITY];
    let same = input(DType::F32, &[n, 6], row.iter().copied().cycle().take(n * 6).collect());
    let count = |tokens: &[usize]| (0..6).map(|t| tokens.iter().filter(|&&x| x == t).count()).collect::<Vec<_>>();
    let all = draw(&same, 1.0, 0, 1.0, 1);
    let c = count(&all);
    for (t, want) in [0.1, 0.2, 0.3, 0.4].iter().enumerate() {
        let got = c[t] as f64 / n as f64;
        assert!((got - want).abs() < 0.03, "token {t}: frequency {got}, probability {want} ({c:?})");
    }
    assert_eq!((c[4], c[5]), (0, 0), "NaN and -inf logits are never drawn");
    assert_eq!(all, draw(&same, 1.0, 0, 1.0, 1), "a seed repeats");
    assert_ne!(all, draw(&same, 1.0, 0, 1.0, 2), "another seed differs");
    // Top-p 0.65: the nucleus is {3, 2} (0.4 + 0.3 ≥ 0.65), drawn 4:3.
    let c = count(&draw(&same, 1.0, 0, 0.65, 3));
    assert_eq!((c[0], c[1]), (0, 0), "outside the nucleus: {c:?}");
    let share = c[3] as f64 / (c[2] + c[3]) as f64;
    assert!((share - 4.0 / 7.0).abs() < 0.03, "token 3's share of the nucleus {share}");
    // Top-k 2: the same two tokens.
    let c = count(&draw(&same, 1.0, 2, 1.0, 4));
    assert_eq!((c[0], c[1]), (0, 0), "outside the top 2: {c:?}");
    // A low temperature concentrates on the largest logit.
    let c = count(&draw(&same, 0.1, 0, 1.0, 5));
    assert!(c[3] as f64 / n as f64 > 0.9, "temperature 0.1: {c:?}");
}
