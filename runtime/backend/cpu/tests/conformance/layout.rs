//! Conformance of reductions and of the layout ops: reshape, permute, slice, concat and
//! cast between every pair of dtypes.

use super::*;

#[test]
fn reductions() {
    let mut rng = StdRng::seed_from_u64(11);
    let ops = [(ReduceOp::Sum, "sum"), (ReduceOp::Mean, "mean"), (ReduceOp::Max, "max"), (ReduceOp::Min, "min")];
    let shapes: &[&[usize]] = &[&[2, 3, 4], &[5], &[1, 6], &[0, 3], &[3, 0], &[300, 300]];
    for dtype in FLOATS.into_iter().chain(INTS) {
        for &shape in shapes {
            let x = if dtype.is_float() {
                random(&mut rng, dtype, shape, -2.0, 2.0)
            } else {
                let (lo, hi) = int_range(dtype);
                random(&mut rng, dtype, shape, lo, hi)
            };
            for axis in 0..shape.len() {
                for (op, name) in ops {
                    if (shape[axis] == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min))
                        || (!dtype.is_float() && op == ReduceOp::Mean)
                    {
                        continue;
                    }
                    for keep_dim in [false, true] {
                        let ctx = format!("{name} {dtype} {shape:?} axis {axis} keep {keep_dim}");
                        let reduce = Op::Reduce(ReduceArgs { op, axis: axis as u32, keep_dim });
                        let (out_shape, want, mags) = r::reduce(&x.vals, shape, axis, name, keep_dim);
                        let got = run(&reduce, &[&x], &out_shape);
                        if dtype.is_float() {
                            check(&ctx, &values(&got), &want, Some(&mags), tol(dtype), 1e-6);
                        } else {
                            // Integer sums wrap; recompute them exactly.
                            let xi = ints(&x.buf);
                            let want: Vec<i128> = if op == ReduceOp::Sum {
                                let mut full = shape.to_vec();
                                full[axis] = 1;
                                (0..r::numel(&full))
                                    .map(|o| {
                                        let mut ix = r::unravel(o, &full);
                                        wrap(
                                            (0..shape[axis])
                                                .map(|j| {
                                                    ix[axis] = j;
                                                    xi[r::ravel(&ix, shape)]
                                                })
                                                .sum(),
                                            dtype,
                                        )
                                    })
                                    .collect()
                            } else {
                                want.iter().map(|&v| v as i128).collect()
                            };
                            assert_eq!(ints(&got), want, "{ctx}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn reshape_and_permute() {
    let mut rng = StdRng::seed_from_u64(12);
    let shapes: &[&[usize]] =
        &[&[], &[5], &[2, 3], &[2, 1, 3], &[3, 0, 2], &[2, 3, 4, 5], &[1, 2, 1, 3, 2], &[64, 40, 30]];
    for dtype in DType::ALL {
        for &shape in shapes {
            let x = small_ints(&mut rng, dtype, shape);
            let flat = Op::Reshape(vec![r::numel(shape) as u32]);
            assert_eq!(values(&run(&flat, &[&x], &[r::numel(shape)])), x.vals, "reshape {dtype} {shape:?}");
            for _ in 0..4 {
                let mut perm: Vec<usize> = (0..shape.len()).collect();
                for i in (1..perm.len()).rev() {
                    perm.swap(i, rng.random_range(0..=i));
                }
                let (out_shape, want) = r::permute(&x.vals, shape, &perm);
                let op = Op::Permute(perm.iter().map(|&p| p as u32).collect());
                assert_eq!(values(&run(&op, &[&x], &out_shape)), want, "permute {dtype} {shape:?} {perm:?}");
            }
        }
    }
}

#[test]
fn slice_and_concat() {
    let mut rng = StdRng::seed_from_u64(13);
    for dtype in DType::ALL {
        let x = small_ints(&mut rng, dtype, &[4, 5, 6]);
        for (axis, start, end) in [(0, 1, 3), (1, 0, 5), (1, 2, 2), (2, 5, 6), (2, 0, 3), (0, 0, 4)] {
            let mut out_shape = vec![4, 5, 6];
            out_shape[axis] = end - start;
            let want: Vec<f64> = (0..r::numel(&out_shape))
                .map(|i| {
                    let mut idx = r::unravel(i, &out_shape);
                    idx[axis] += start;
                    x.vals[r::ravel(&idx, &[4, 5, 6])]
                })
                .collect();
            let op = Op::Slice(SliceArgs { axis: axis as u32, start: start as u32, end: end as u32 });
            assert_eq!(values(&run(&op, &[&x], &out_shape)), want, "slice {dtype} {axis} {start}..{end}");
        }
        let cases: &[(usize, &[&[usize]])] = &[
            (1, &[&[2, 3], &[2, 0], &[2, 4]]),
            (0, &[&[1, 3], &[2, 3]]),
            (0, &[&[7]]),
            (2, &[&[2, 2, 1], &[2, 2, 3], &[2, 2, 2]]),
            (0, &[&[0, 3], &[0, 3]]),
        ];
        for &(axis, shapes) in cases {
            let parts: Vec<Input> = shapes.iter().map(|s| small_ints(&mut rng, dtype, s)).collect();
            let (out_shape, want) = r::concat(
                &parts
                    .iter()
                    .map(|p| (p.vals.clone(), p.meta.shape.iter().map(|&d| d as usize).collect()))
                    .collect::<Vec<_>>(),
                axis,
            );
            let got = run(&Op::Concat { axis: axis as u32 }, &parts.iter().collect::<Vec<_>>(), &out_shape);
            assert_eq!(values(&got), want, "concat {dtype} {axis} {shapes:?}");
        }
    }
}

#[test]
fn cast_between_every_pair() {
    let float_vals = [
        0.0,
        -0.0,
        0.1,
        1.5,
        -1.5,
        2.7,
        -2.7,
        127.9,
        255.5,
        300.7,
        -300.7,
        65504.0,
        70000.0,
        3.0e9,
        -3.0e9,
        1.0e19,
        -1.0e19,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let int_vals = |d: DType| -> Vec<f64> {
        match d {
            DType::U8 => vec![0.0, 1.0, 127.0, 128.0, 255.0],
            DType::I32 => {
                vec![0.0, 1.0, -1.0, 255.0, 256.0, -129.0, 65519.0, 16_777_217.0, i32::MIN as f64, i32::MAX as f64]
            }
            _ => vec![0.0, -1.0, 256.0, -129.0, 16_777_217.0, 1099511627775.0, -4294967297.0, i64::MIN as f64],
        }
    };
    for from in DType::ALL {
        let vals = if from.is_float() { float_vals.to_vec() } else { int_vals(from) };
        let x = input(from, &[vals.len()], vals);
        let src_ints = (!from.is_float()).then(|| ints(&x.buf));
        for to in DType::ALL {
            let got = run(&Op::Cast(to), &[&x], &[x.vals.len()]);
            let want: Vec<f64> = x
                .vals
                .iter()
                .enumerate()
                .map(|(i, &v)| match (to, &src_ints) {
                    (DType::F32, Some(si)) => si[i] as f32 as f64,
                    (DType::F32, None) => v as f32 as f64,
                    (DType::F16, _) => f16::from_f64(v).to_f64(),
                    (DType::BF16, _) => bf16::from_f64(v).to_f64(),
                    (_, Some(si)) => wrap(si[i], to) as f64,
                    (_, None) => {
                        let (lo, hi) = match to {
                            DType::I32 => (i32::MIN as f64, i32::MAX as f64),
                            DType::I64 => (i64::MIN as f64, i64::MAX as f64),
                            _ => (0.0, 255.0),
                        };
                        if v.is_nan() { 0.0 } else { v.trunc().clamp(lo, hi) }
                    }
                })
                .collect();
            let got = values(&got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(g == w || (g.is_nan() && w.is_nan()), "cast {from}→{to} of {}: got {g}, want {w}", x.vals[i]);
            }
        }
    }
}

/// `write_rows` writes rows in place: every clone (a reshape) of the destination shows
/// them, the other rows keep their values, a write of the destination's own rows back
/// into it works, and a write past the end or of another dtype is an error.
#[test]
fn write_rows_in_place() {
    use sluice_backend_cpu::write_rows;
    let mut rng = StdRng::seed_from_u64(29);
    for dtype in FLOATS.into_iter().chain(INTS) {
        let (lo, hi) = if dtype.is_float() { (-2.0, 2.0) } else { int_range(dtype) };
        let dst = random(&mut rng, dtype, &[6, 2, 3], lo, hi);
        let view = launch(&Op::Reshape(vec![36]), &[(&dst.buf, &dst.meta)], &meta(dtype, &[36])).unwrap();
        let src = random(&mut rng, dtype, &[2, 2, 3], lo, hi);
        let out = meta(DType::U8, &[0]);
        // SAFETY: nothing else uses the buffers meanwhile.
        let done = unsafe { write_rows(3, (&dst.buf, &dst.meta), (&src.buf, &src.meta), &out) }.unwrap();
        assert!(done.is_empty());
        let mut want = dst.vals.clone();
        want[18..30].copy_from_slice(&src.vals);
        assert_eq!(values(&dst.buf), want, "{dtype}: rows 3..5 written, the rest kept");
        assert_eq!(values(&view), want, "{dtype}: a reshape taken before shows the write");
        // The view written back over its own storage: the same allocation.
        let rows = meta(dtype, &[6, 2, 3]);
        // SAFETY: as above.
        unsafe { write_rows(0, (&dst.buf, &dst.meta), (&view, &rows), &out) }.unwrap();
        assert_eq!(values(&dst.buf), want, "{dtype}: writing a buffer over itself changes nothing");
        // Past the end, another dtype: checked before anything is written.
        // SAFETY: as above.
        let past = unsafe { write_rows(5, (&dst.buf, &dst.meta), (&src.buf, &src.meta), &out) };
        assert!(past.is_err(), "{dtype}: rows 5..7 of 6");
        let other = input(if dtype == DType::F32 { DType::I32 } else { DType::F32 }, &[1, 2, 3], vec![1.0; 6]);
        // SAFETY: as above.
        let other_dtype = unsafe { write_rows(0, (&dst.buf, &dst.meta), (&other.buf, &other.meta), &out) };
        assert!(other_dtype.is_err(), "{dtype}: another dtype");
        assert_eq!(values(&dst.buf), want, "{dtype}: refused writes change nothing");
    }
    // Through `launch` the op is refused: it changes an input.
    let x = input(DType::F32, &[2, 2], vec![0.0; 4]);
    let err = launch(&Op::WriteRows { offset: 0 }, &[(&x.buf, &x.meta), (&x.buf, &x.meta)], &meta(DType::U8, &[0]));
    assert!(err.is_err());
}
