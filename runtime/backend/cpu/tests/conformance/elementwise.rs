//! Conformance of the elementwise ops: broadcasting binary ops on floats and integers
//! (with wrapping and division edge cases), unary activations and affine.

use super::*;

const BINARY_SHAPES: &[(&[usize], &[usize])] = &[
    (&[2, 3], &[3]),
    (&[2, 1, 4], &[3, 1]),
    (&[], &[5]),
    (&[5], &[]),
    (&[], &[]),
    (&[0, 1], &[1, 7]),
    (&[2, 0, 3], &[3]),
    (&[1], &[3, 1, 1]),
    (&[3, 4, 5], &[3, 4, 5]),
    (&[4, 1, 6], &[1, 5, 1]),
    (&[2, 3, 1, 2], &[3, 4, 1]),
    (&[300, 257], &[257]),
    (&[257, 1], &[257, 300]),
];

#[test]
fn binary_float_broadcasting() {
    let mut rng = StdRng::seed_from_u64(1);
    let ops: [(BinaryOp, Fn2); 6] = [
        (BinaryOp::Add, |a, b| a + b),
        (BinaryOp::Sub, |a, b| a - b),
        (BinaryOp::Mul, |a, b| a * b),
        (BinaryOp::Div, |a, b| a / b),
        (BinaryOp::Maximum, f64::max),
        (BinaryOp::Minimum, f64::min),
    ];
    for dtype in FLOATS {
        for &(ash, bsh) in BINARY_SHAPES {
            let a = random(&mut rng, dtype, ash, -2.0, 2.0);
            let sign: Vec<f64> = (0..r::numel(bsh)).map(|_| if rng.random::<bool>() { 1.0 } else { -1.0 }).collect();
            let b = random(&mut rng, dtype, bsh, 0.25, 2.0);
            let b = input(dtype, bsh, b.vals.iter().zip(&sign).map(|(v, s)| v * s).collect());
            for (op, f) in ops {
                let want = r::binary(&a.vals, ash, &b.vals, bsh, f);
                let got = run(&Op::Binary(op), &[&a, &b], &r::broadcast(ash, bsh));
                check(&format!("{op:?} {dtype} {ash:?} {bsh:?}"), &values(&got), &want, None, tol(dtype), 1e-6);
            }
        }
    }
}

#[test]
fn binary_integers_wrap_and_truncate() {
    let mut rng = StdRng::seed_from_u64(2);
    let ops: [(BinaryOp, IntFn2); 6] = [
        (BinaryOp::Add, |a, b| a + b),
        (BinaryOp::Sub, |a, b| a - b),
        (BinaryOp::Mul, |a, b| a * b),
        (BinaryOp::Div, |a, b| a / b), // i128 division truncates toward zero
        (BinaryOp::Maximum, |a, b| a.max(b)),
        (BinaryOp::Minimum, |a, b| a.min(b)),
    ];
    for dtype in INTS {
        let (lo, hi) = int_range(dtype);
        for &(ash, bsh) in BINARY_SHAPES {
            let a = random(&mut rng, dtype, ash, lo, hi);
            let mut b = random(&mut rng, dtype, bsh, lo, hi);
            if let Some(first) = b.vals.first_mut() {
                *first = if dtype == DType::U8 { 255.0 } else { -1.0 }; // MIN / -1, overflow
            }
            let bv: Vec<f64> = b.vals.iter().map(|&v| if v == 0.0 { 3.0 } else { v }).collect();
            let b = input(dtype, bsh, bv);
            let (ai, bi) = (ints(&a.buf), ints(&b.buf));
            for (op, f) in ops {
                let out_shape = r::broadcast(ash, bsh);
                let want: Vec<i128> = (0..r::numel(&out_shape))
                    .map(|i| {
                        let idx = r::unravel(i, &out_shape);
                        wrap(f(ai[r::broadcast_index(&idx, ash)], bi[r::broadcast_index(&idx, bsh)]), dtype)
                    })
                    .collect();
                let got = run(&Op::Binary(op), &[&a, &b], &out_shape);
                assert_eq!(ints(&got), want, "{op:?} {dtype} {ash:?} {bsh:?}");
            }
        }
        let lo = match dtype {
            DType::I32 => i32::MIN as f64,
            DType::I64 => i64::MIN as f64,
            _ => 0.0,
        };
        let min = input(dtype, &[2], vec![lo, 7.0]);
        let neg1 = input(dtype, &[1], vec![if dtype == DType::U8 { 2.0 } else { -1.0 }]);
        let got = run(&Op::Binary(BinaryOp::Div), &[&min, &neg1], &[2]);
        let want: Vec<i128> = if dtype == DType::U8 { vec![0, 3] } else { vec![lo as i128, -7] };
        assert_eq!(ints(&got), want, "{dtype} division edge");
    }
}

#[test]
fn integer_division_by_zero_is_an_error() {
    for dtype in INTS {
        let a = input(dtype, &[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = input(dtype, &[3], vec![1.0, 0.0, 2.0]);
        let err = try_run(&Op::Binary(BinaryOp::Div), &[&a, &b]).unwrap_err();
        assert!(err.0.contains("division by zero"), "{err}");
        // A zero divisor that no output element uses is fine.
        let empty = input(dtype, &[0], vec![]);
        let zero = input(dtype, &[1], vec![0.0]);
        assert!(try_run(&Op::Binary(BinaryOp::Div), &[&empty, &zero]).unwrap().0.is_empty());
    }
    let a = input(DType::F32, &[2], vec![1.0, -1.0]);
    let z = input(DType::F32, &[], vec![0.0]);
    let got = run(&Op::Binary(BinaryOp::Div), &[&a, &z], &[2]);
    assert_eq!(values(&got), vec![f64::INFINITY, f64::NEG_INFINITY]);
}

#[test]
fn unary_float() {
    let mut rng = StdRng::seed_from_u64(3);
    let ops: [(UnaryOp, Fn1, f64, f64); 12] = [
        (UnaryOp::Relu, |x| x.max(0.0), -3.0, 3.0),
        (UnaryOp::Gelu, |x| x * r::normal_cdf(x), -5.0, 5.0),
        (
            UnaryOp::GeluTanh,
            |x| 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
            -5.0,
            5.0,
        ),
        (UnaryOp::Tanh, f64::tanh, -4.0, 4.0),
        (UnaryOp::Sigmoid, |x| 1.0 / (1.0 + (-x).exp()), -12.0, 12.0),
        (UnaryOp::Exp, f64::exp, -10.0, 10.0),
        (UnaryOp::Log, f64::ln, 0.01, 100.0),
        (UnaryOp::Sqrt, f64::sqrt, 0.0, 100.0),
        (UnaryOp::Rsqrt, |x| 1.0 / x.sqrt(), 0.01, 100.0),
        (UnaryOp::Neg, |x| -x, -3.0, 3.0),
        (UnaryOp::Abs, f64::abs, -3.0, 3.0),
        (UnaryOp::Silu, |x| x / (1.0 + (-x).exp()), -12.0, 12.0),
    ];
    for dtype in FLOATS {
        for (op, f, lo, hi) in ops {
            let big = !matches!(op, UnaryOp::Gelu);
            for shape in [&[][..], &[0], &[3, 5], &[2, 1, 40]].into_iter().chain(big.then_some(&[70_000][..])) {
                let x = random(&mut rng, dtype, shape, lo, hi);
                let want: Vec<f64> = x.vals.iter().map(|&v| f(v)).collect();
                let got = run(&Op::Unary(op), &[&x], shape);
                check(&format!("{op:?} {dtype} {shape:?}"), &values(&got), &want, None, tol(dtype), 1e-3);
            }
        }
    }
    let x = input(DType::F32, &[4], vec![f64::NAN, -0.0, f64::INFINITY, f64::NEG_INFINITY]);
    let got = values(&run(&Op::Unary(UnaryOp::Gelu), &[&x], &[4]));
    assert!(got[0].is_nan() && got[1] == 0.0 && got[2] == f64::INFINITY && got[3] == 0.0, "{got:?}");
}

#[test]
fn unary_integers() {
    let mut rng = StdRng::seed_from_u64(4);
    let ops: [(UnaryOp, IntFn1); 3] =
        [(UnaryOp::Relu, |x| x.max(0)), (UnaryOp::Neg, |x| -x), (UnaryOp::Abs, i128::abs)];
    for dtype in INTS {
        let (lo, hi) = int_range(dtype);
        let mut x = random(&mut rng, dtype, &[3, 7], lo, hi);
        x.vals[0] = lo;
        x.vals[1] = hi;
        let x = input(dtype, &[3, 7], x.vals);
        for (op, f) in ops {
            let want: Vec<i128> = ints(&x.buf).into_iter().map(|v| wrap(f(v), dtype)).collect();
            assert_eq!(ints(&run(&Op::Unary(op), &[&x], &[3, 7])), want, "{op:?} {dtype}");
        }
    }
}

#[test]
fn affine() {
    let mut rng = StdRng::seed_from_u64(5);
    for dtype in FLOATS {
        for shape in [&[][..], &[0, 2], &[4, 9], &[70_000]] {
            let x = random(&mut rng, dtype, shape, -3.0, 3.0);
            let (scale, bias) = (0.7f32, -1.25f32);
            let want: Vec<f64> = x.vals.iter().map(|v| v * scale as f64 + bias as f64).collect();
            let mags: Vec<f64> = x.vals.iter().map(|v| (v * scale as f64).abs() + bias.abs() as f64).collect();
            let got = run(&Op::Affine { scale, bias }, &[&x], shape);
            check(&format!("affine {dtype} {shape:?}"), &values(&got), &want, Some(&mags), tol(dtype), 0.0);
        }
    }
}
