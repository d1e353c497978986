//! GEMM planning checked against a CPU evaluation of what cuBLAS computes.

use super::*;

fn t(shape: &[u32]) -> TensorMeta {
    TensorMeta::new(DType::F32, shape.to_vec()).unwrap()
}

/// Evaluates a GemmCall on the CPU exactly as cuBLAS defines it (column-major).
fn cublas_reference(c: &GemmCall, a: &[f64], b: &[f64], out: &mut [f64]) {
    for bi in 0..c.batch as usize {
        let (a, b) = (&a[bi * c.stride_a as usize..], &b[bi * c.stride_b as usize..]);
        let o = &mut out[bi * c.stride_c as usize..];
        for j in 0..c.n as usize {
            for i in 0..c.m as usize {
                let mut s = 0.0;
                for p in 0..c.k as usize {
                    let av = if c.trans_a { a[p + i * c.lda as usize] } else { a[i + p * c.lda as usize] };
                    let bv = if c.trans_b { b[j + p * c.ldb as usize] } else { b[p + j * c.ldb as usize] };
                    s += av * bv;
                }
                o[i + j * c.ldc as usize] = s;
            }
        }
    }
}

/// Row-major reference with batch broadcasting and transposes.
fn row_major_reference(
    args: &MatmulArgs,
    am: &TensorMeta,
    a: &[f64],
    bm: &TensorMeta,
    b: &[f64],
    out: &TensorMeta,
) -> Vec<f64> {
    let (m, n) = (out.shape[out.rank() - 2] as usize, out.shape[out.rank() - 1] as usize);
    let k = dims2(&am.shape[am.rank() - 2..], args.transpose_a).1 as usize;
    let obatch = &out.shape[..out.rank() - 2];
    let batch: usize = obatch.iter().map(|&d| d as usize).product();
    let index = |meta: &TensorMeta, ob: usize| -> usize {
        let own = &meta.shape[..meta.rank() - 2];
        let strides = crate::layout::broadcast_strides(own, obatch);
        let mut rem = ob;
        let mut off = 0;
        for d in (0..obatch.len()).rev() {
            off += (rem % obatch[d] as usize) * strides[d] as usize;
            rem /= obatch[d] as usize;
        }
        off
    };
    let mut r = vec![0.0; batch * m * n];
    for ob in 0..batch {
        let (ao, bo) = (index(am, ob) * m * k, index(bm, ob) * k * n);
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..k {
                    let av = if args.transpose_a { a[ao + p * m + i] } else { a[ao + i * k + p] };
                    let bv = if args.transpose_b { b[bo + j * k + p] } else { b[bo + p * n + j] };
                    s += av * bv;
                }
                r[ob * m * n + i * n + j] = s;
            }
        }
    }
    r
}

#[test]
fn column_major_calls_compute_the_row_major_product() {
    let cases: &[(&[u32], &[u32])] = &[
        (&[3, 4], &[4, 5]),
        (&[2, 3, 4], &[4, 5]),
        (&[2, 3, 4], &[2, 4, 5]),
        (&[3, 4], &[2, 4, 5]),
        (&[1, 3, 4], &[2, 4, 5]),
    ];
    for &(ash, bsh) in cases {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let args = MatmulArgs { transpose_a: ta, transpose_b: tb };
            let swap = |s: &[u32], t: bool| {
                let mut v = s.to_vec();
                let r = v.len();
                if t {
                    v.swap(r - 1, r - 2);
                }
                v
            };
            let (am, bm) = (t(&swap(ash, ta)), t(&swap(bsh, tb)));
            let out = sluice_host_api::infer(&sluice_host_api::Op::Matmul(args), &[&am, &bm]).unwrap();
            let plan = MatmulPlan::new(&args, &am, &bm);
            assert!(!matches!(plan.a, Operand::Materialize(_)) && !matches!(plan.b, Operand::Materialize(_)));
            let a: Vec<f64> = (0..am.numel()).map(|i| (i as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..bm.numel()).map(|i| (i as f64 * 0.11).cos()).collect();
            let mut got = vec![0.0; out.numel()];
            cublas_reference(&plan.call(&args), &b, &a, &mut got);
            let want = row_major_reference(&args, &am, &a, &bm, &b, &out);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-9, "{ash:?}{ta} x {bsh:?}{tb}: {got:?} vs {want:?}");
            }
        }
    }
}

#[test]
fn plans() {
    let args = MatmulArgs::default();
    let p = MatmulPlan::new(&args, &t(&[2, 3, 4]), &t(&[4, 5]));
    assert!(p.fold && p.batch == 2 && p.call(&args).batch == 1 && p.call(&args).n == 6);
    let p = MatmulPlan::new(&args, &t(&[2, 1, 3, 4]), &t(&[5, 4, 6]));
    assert_eq!(p.batch, 10);
    assert_eq!(p.a, Operand::Materialize(vec![2, 5, 3, 4]));
    assert_eq!(p.b, Operand::Materialize(vec![2, 5, 4, 6]));
    let p = MatmulPlan::new(&args, &t(&[3, 4]), &t(&[7, 4, 6]));
    assert_eq!((p.a.clone(), p.b.clone(), p.fold), (Operand::Shared, Operand::Dense, false));
    assert_eq!(p.call(&args).stride_b, 0);
    let p = MatmulPlan::new(&MatmulArgs { transpose_a: true, transpose_b: false }, &t(&[2, 4, 3]), &t(&[4, 5]));
    assert!(!p.fold, "a transposed per batch cannot fold into m");
}

#[test]
fn row_calls_compute_row_blocks_of_the_product() {
    let cases: &[(&[u32], &[u32])] = &[
        (&[7, 4], &[4, 5]),
        (&[2, 7, 4], &[4, 5]),
        (&[2, 7, 4], &[2, 4, 5]),
        (&[7, 4], &[3, 4, 5]),
        (&[1, 7, 4], &[2, 4, 5]),
    ];
    let mut checked = 0;
    for &(ash, bsh) in cases {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let args = MatmulArgs { transpose_a: ta, transpose_b: tb };
            let swap = |s: &[u32], t: bool| {
                let mut v = s.to_vec();
                let r = v.len();
                if t {
                    v.swap(r - 1, r - 2);
                }
                v
            };
            let (am, bm) = (t(&swap(ash, ta)), t(&swap(bsh, tb)));
            let out = sluice_host_api::infer(&sluice_host_api::Op::Matmul(args), &[&am, &bm]).unwrap();
            let plan = MatmulPlan::new(&args, &am, &bm);
            let a: Vec<f64> = (0..am.numel()).map(|i| (i as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..bm.numel()).map(|i| (i as f64 * 0.11).cos()).collect();
            let want = row_major_reference(&args, &am, &a, &bm, &b, &out);
            let (m, n) = (plan.m as usize, plan.n as usize);
            for rows in [0..m, 0..1, 2..5, m - 1..m, 1..m] {
                let (call, offset) = plan.rows_call(&args, rows.start as u64..rows.end as u64);
                let r = rows.len();
                assert_eq!((call.stride_c, call.batch), ((r * n) as u64, plan.batch));
                let mut got = vec![0.0; plan.batch as usize * r * n];
                cublas_reference(&call, &b, &a[offset as usize..], &mut got);
                let want_rows: Vec<f64> =
                    want.chunks(m * n).flat_map(|blk| blk[rows.start * n..rows.end * n].to_vec()).collect();
                for (g, w) in got.iter().zip(&want_rows) {
                    assert!((g - w).abs() < 1e-9, "{ash:?}{ta} x {bsh:?}{tb} rows {rows:?}: {got:?} vs {want_rows:?}");
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 5 * 4 * 5);
}
