//! Conformance of the fused ops: linear, add-layer-norm and attention, each against the
//! chain of catalog ops it replaces (run on this backend) and against a naive `f64`
//! reference, in every floating dtype. Linear and add-layer-norm must equal their chain
//! bit for bit (they round where it rounds); attention reads heads in place rather than
//! from permuted copies, so it equals its chain within the dtype's tolerance.

use super::*;

/// Runs `op` and wraps its output as a test input for the next op of a chain.
fn step(op: &Op, inputs: &[&Input]) -> Input {
    let (buf, meta) = try_run(op, inputs).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    let vals = values(&buf);
    Input { buf, meta, vals }
}

fn shape_u32(shape: &[usize]) -> Vec<u32> {
    shape.iter().map(|&d| d as u32).collect()
}

/// The activations a linear accepts: none, then every unary op.
fn activations() -> impl Iterator<Item = Option<UnaryOp>> {
    std::iter::once(None).chain(UnaryOp::ALL.map(Some))
}

/// The f64 function of an activation (the definitions of `elementwise.rs`'s test).
fn act_f64(a: Option<UnaryOp>) -> Fn1 {
    match a {
        None => |x| x,
        Some(UnaryOp::Relu) => |x| x.max(0.0),
        Some(UnaryOp::Gelu) => |x| x * r::normal_cdf(x),
        Some(UnaryOp::GeluTanh) => {
            |x| 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }
        Some(UnaryOp::Tanh) => f64::tanh,
        Some(UnaryOp::Sigmoid) => |x| 1.0 / (1.0 + (-x).exp()),
        Some(UnaryOp::Exp) => f64::exp,
        Some(UnaryOp::Log) => f64::ln,
        Some(UnaryOp::Sqrt) => f64::sqrt,
        Some(UnaryOp::Rsqrt) => |x| 1.0 / x.sqrt(),
        Some(UnaryOp::Neg) => |x| -x,
        Some(UnaryOp::Abs) => f64::abs,
        Some(UnaryOp::Silu) => |x| x / (1.0 + (-x).exp()),
    }
}

/// A bound of |f'| on `[z - near, z + near]`: a pre-activation off by a little may sit
/// across a kink (relu, abs) or further up an exponential.
fn max_slope(act: Option<UnaryOp>, z: f64, near: f64) -> f64 {
    let lo = z - near;
    match act {
        None | Some(UnaryOp::Relu | UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Tanh | UnaryOp::Sigmoid) => 1.0,
        // GELU's slope peaks at about 1.13 (x ≈ 1.4), the tanh form's at about 1.13 too.
        // SiLU's slope peaks at about 1.1 (x ≈ 2.4).
        Some(UnaryOp::Gelu | UnaryOp::GeluTanh | UnaryOp::Silu) => 1.2,
        Some(UnaryOp::Exp) => (z + near).exp(),
        Some(UnaryOp::Log) => 1.0 / lo,
        Some(UnaryOp::Sqrt) => 0.5 / lo.sqrt(),
        Some(UnaryOp::Rsqrt) => 0.5 / (lo * lo.sqrt()),
    }
}

/// `activation(x · W + b)` in f64 with per-element error magnitudes: the product's
/// `Σ|terms| + |b|`, scaled by the activation's slope there (so an error in the
/// pre-activation value is measured against what the activation makes of it).
fn linear_reference(
    x: &Input,
    w: &Input,
    b: Option<&Input>,
    transpose_w: bool,
    act: Option<UnaryOp>,
) -> (Vec<f64>, Vec<f64>) {
    let (lead, k) = x.meta.shape.split_at(x.meta.rank() - 1);
    let (m, k) = (lead.iter().map(|&d| d as usize).product::<usize>(), k[0] as usize);
    let wsh: Vec<usize> = w.meta.shape.iter().map(|&d| d as usize).collect();
    let (_, z, zmag) = r::matmul(&x.vals, &[m, k], &w.vals, &wsh, false, transpose_w);
    let n = if transpose_w { wsh[0] } else { wsh[1] };
    let f = act_f64(act);
    let (mut vals, mut mags) = (vec![], vec![]);
    for (i, (&z, &zm)) in z.iter().zip(&zmag).enumerate() {
        let bias = b.map_or(0.0, |b| b.vals[i % n]);
        let (z, zm) = (z + bias, zm + bias.abs());
        vals.push(f(z));
        let slope = max_slope(act, z, 0.01 * zm.max(z.abs()));
        mags.push(2.0 * slope * zm.max(z.abs()));
    }
    (vals, mags)
}

/// The chain a linear replaces: reshape to `[m, k]`, matmul, add the bias, the
/// activation, reshape back.
fn linear_chain(x: &Input, w: &Input, b: Option<&Input>, transpose_w: bool, act: Option<UnaryOp>) -> Input {
    let (lead, k) = x.meta.shape.split_at(x.meta.rank() - 1);
    let (m, k) = (lead.iter().product::<u32>(), k[0]);
    let x2 = step(&Op::Reshape(vec![m, k]), &[x]);
    let mut y = step(&Op::Matmul(MatmulArgs { transpose_a: false, transpose_b: transpose_w }), &[&x2, w]);
    if let Some(b) = b {
        y = step(&Op::Binary(BinaryOp::Add), &[&y, b]);
    }
    if let Some(a) = act {
        y = step(&Op::Unary(a), &[&y]);
    }
    let mut shape = x.meta.shape.clone();
    *shape.last_mut().unwrap() = *y.meta.shape.last().unwrap();
    step(&Op::Reshape(shape), &[&y])
}

#[test]
fn linear_equals_matmul_add_activation() {
    let mut rng = StdRng::seed_from_u64(21);
    // (x shape, n): one row (rank 1 and rank 2), batches of rows, empty inputs, k = 0,
    // and a MiniLM feed-forward layer.
    #[rustfmt::skip]
    let shapes: &[(&[usize], usize)] = &[
        (&[8], 5), (&[1, 8], 5), (&[3, 17], 9), (&[2, 3, 17], 9), (&[2, 1, 3, 4], 6),
        (&[0, 8], 5), (&[4, 0], 3), (&[3, 4], 0), (&[64, 96], 80), (&[40, 384], 1536),
    ];
    let mut checked = 0;
    for dtype in FLOATS {
        for &(xsh, n) in shapes {
            let k = *xsh.last().unwrap();
            let macs = xsh.iter().product::<usize>() * n;
            if dtype != DType::F32 && macs > 200_000 {
                continue;
            }
            // Every activation on the small shapes; the big ones (slow f64 references in
            // a debug build, and the reference GELU integrates numerically) with none and
            // with relu.
            for act in activations().filter(|a| macs <= 20_000 || matches!(a, None | Some(UnaryOp::Relu))) {
                // Log, sqrt and rsqrt see positive pre-activations (≥ 0.5 with the bias).
                let positive = matches!(act, Some(UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt));
                let (lo, hi) = if positive { (0.0, 1.0) } else { (-1.0, 1.0) };
                // A well-scaled product keeps exp and the like in range.
                let s = 1.0 / (k.max(1) as f64).sqrt();
                let x = random(&mut rng, dtype, xsh, lo, hi);
                let b = random(&mut rng, dtype, &[n], if positive { 0.5 } else { -1.0 }, 1.0);
                for transpose_w in [false, true] {
                    let wsh = if transpose_w { [n, k] } else { [k, n] };
                    let w = random(&mut rng, dtype, &wsh, lo * s, hi * s);
                    for bias in [None, Some(&b)] {
                        if positive && bias.is_none() {
                            continue;
                        }
                        let op = Op::Linear { transpose_w, activation: act };
                        let inputs: Vec<&Input> = [&x, &w].into_iter().chain(bias).collect();
                        let mut out_shape = xsh.to_vec();
                        *out_shape.last_mut().unwrap() = n;
                        let got = run(&op, &inputs, &out_shape);
                        let ctx =
                            format!("linear {dtype} x{xsh:?} n={n} tw={transpose_w} bias={} {act:?}", bias.is_some());
                        let chain = linear_chain(&x, &w, bias, transpose_w, act);
                        assert_eq!(chain.meta.shape, shape_u32(&out_shape), "{ctx}");
                        assert!(
                            values(&got).iter().zip(&chain.vals).all(|(g, c)| g.to_bits() == c.to_bits()),
                            "{ctx}: differs from the chain matmul + add + unary"
                        );
                        let (want, mags) = linear_reference(&x, &w, bias, transpose_w, act);
                        check(&ctx, &values(&got), &want, Some(&mags), tol(dtype), 1e-6);
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 400, "only {checked} cases");
}

#[test]
fn add_layer_norm_equals_add_then_layer_norm() {
    let mut rng = StdRng::seed_from_u64(22);
    for dtype in FLOATS {
        for shape in [&[4, 16][..], &[1], &[3, 2, 7], &[0, 8], &[1, 384], &[200, 384]] {
            let d = *shape.last().unwrap();
            let x = random(&mut rng, dtype, shape, -3.0, 5.0);
            let res = random(&mut rng, dtype, shape, -2.0, 2.0);
            let g = random(&mut rng, dtype, &[d], 0.5, 1.5);
            let b = random(&mut rng, dtype, &[d], -1.0, 1.0);
            for eps in [1e-12f32, 1e-5] {
                let ctx = format!("add-layer-norm {dtype} {shape:?} eps={eps}");
                let got = run(&Op::AddLayerNorm { eps }, &[&x, &res, &g, &b], shape);
                let sum = step(&Op::Binary(BinaryOp::Add), &[&x, &res]);
                let chain = step(&Op::LayerNorm { eps }, &[&sum, &g, &b]);
                assert_eq!(values(&got).len(), chain.vals.len(), "{ctx}");
                assert!(
                    values(&got).iter().zip(&chain.vals).all(|(g, c)| g.to_bits() == c.to_bits()),
                    "{ctx}: differs from add then layer-norm"
                );
                // The exact sum, normalised in f64. The sum is rounded to the dtype first,
                // an error of up to tol · |x + r| that normalisation divides by the row's
                // standard deviation: part of the magnitude.
                let exact: Vec<f64> = x.vals.iter().zip(&res.vals).map(|(a, r)| a + r).collect();
                let (want, mut mags) = r::layer_norm(&exact, d, &g.vals, &b.vals, eps as f64);
                for (row, mrow) in exact.chunks(d).zip(mags.chunks_mut(d)) {
                    let mean = row.iter().sum::<f64>() / d as f64;
                    let std = (row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64 + eps as f64).sqrt();
                    let big = row.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                    for (c, mag) in mrow.iter_mut().enumerate() {
                        *mag += g.vals[c].abs() * 2.0 * big / std;
                    }
                }
                check(&ctx, &values(&got), &want, Some(&mags), tol(dtype), 0.0);
            }
        }
    }
}

/// One attention case: batch, query and key lengths, heads, head size, mask shape.
type AttnCase = (usize, usize, usize, usize, usize, Option<&'static [usize]>);

/// `softmax(q_h · k_hᵀ · scale + mask) · v_h` per batch element and head, in f64, with
/// magnitudes `Σ_j p_j |v_j| · (1 + max_j scale · Σ_c |q_c k_c|)`: an error in a score
/// moves the probabilities by about that much relatively.
fn attention_reference(
    q: &Input,
    k: &Input,
    v: &Input,
    mask: Option<&Input>,
    (b, sq, sk, h, d): (usize, usize, usize, usize, usize),
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let e = h * d;
    let (mut vals, mut mags) = (vec![0.0; b * sq * e], vec![0.0; b * sq * e]);
    let msh: Vec<usize> = mask.map(|m| m.meta.shape.iter().map(|&x| x as usize).collect()).unwrap_or_default();
    for bi in 0..b {
        for hi in 0..h {
            for i in 0..sq {
                let (mut logits, mut score_mag) = (vec![0.0; sk], 0.0f64);
                for (j, logit) in logits.iter_mut().enumerate() {
                    let (mut s, mut sm) = (0.0, 0.0);
                    for c in 0..d {
                        let (qv, kv) = (q.vals[(bi * sq + i) * e + hi * d + c], k.vals[(bi * sk + j) * e + hi * d + c]);
                        s += qv * kv;
                        sm += (qv * kv).abs();
                    }
                    let m = mask.map_or(0.0, |m| m.vals[r::broadcast_index(&[bi, hi, i, j], &msh)]);
                    *logit = s * scale + m;
                    score_mag = score_mag.max(sm * scale);
                }
                let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = if max == f64::NEG_INFINITY {
                    vec![0.0; sk]
                } else {
                    let total: f64 = logits.iter().map(|l| (l - max).exp()).sum();
                    logits.iter().map(|l| (l - max).exp() / total).collect()
                };
                for c in 0..d {
                    let at = (bi * sq + i) * e + hi * d + c;
                    let col = |j: usize| v.vals[(bi * sk + j) * e + hi * d + c];
                    vals[at] = (0..sk).map(|j| p[j] * col(j)).sum();
                    mags[at] = (0..sk).map(|j| p[j] * col(j).abs()).sum::<f64>() * (1.0 + score_mag);
                }
            }
        }
    }
    (vals, mags)
}

/// The chain an attention replaces: split the heads with reshape + permute, q·kᵀ,
/// softmax with scale and mask, ·v, merge the heads back.
fn attention_chain(q: &Input, k: &Input, v: &Input, mask: Option<&Input>, heads: u32, scale: f32) -> Input {
    let split = |t: &Input| {
        let (b, s, e) = (t.meta.shape[0], t.meta.shape[1], t.meta.shape[2]);
        let r = step(&Op::Reshape(vec![b, s, heads, e / heads]), &[t]);
        step(&Op::Permute(vec![0, 2, 1, 3]), &[&r])
    };
    let (qh, kh, vh) = (split(q), split(k), split(v));
    let scores = step(&Op::Matmul(MatmulArgs { transpose_a: false, transpose_b: true }), &[&qh, &kh]);
    let inputs: Vec<&Input> = std::iter::once(&scores).chain(mask).collect();
    let p = step(&Op::Softmax { scale }, &inputs);
    let ctx = step(&Op::Matmul(MatmulArgs::default()), &[&p, &vh]);
    let merged = step(&Op::Permute(vec![0, 2, 1, 3]), &[&ctx]);
    step(&Op::Reshape(q.meta.shape.clone()), &[&merged])
}

#[test]
fn attention_equals_split_heads_matmul_softmax_matmul() {
    let mut rng = StdRng::seed_from_u64(23);
    #[rustfmt::skip]
    let cases: &[AttnCase] = &[
        (1, 1, 1, 1, 4, None),
        (1, 5, 5, 1, 8, None),
        (1, 1, 6, 2, 3, Some(&[6])),
        (2, 3, 7, 3, 4, Some(&[2, 1, 1, 7])),
        (2, 4, 6, 2, 5, Some(&[4, 6])),
        (3, 2, 5, 4, 3, Some(&[3, 4, 2, 5])),
        (2, 3, 4, 2, 2, Some(&[1, 2, 3, 1])),
        (2, 9, 9, 12, 32, Some(&[2, 1, 1, 9])),
        (1, 40, 40, 12, 32, Some(&[1, 1, 1, 40])),
        // longer than one query tile (64 rows), a partial last tile, a full 4-d mask
        (1, 150, 150, 2, 8, Some(&[1, 1, 1, 150])),
        (2, 70, 33, 3, 4, Some(&[2, 3, 70, 33])),
        (2, 0, 4, 2, 3, None),
        (1, 3, 0, 2, 2, None),
        (2, 3, 4, 2, 0, Some(&[2, 1, 1, 4])),
    ];
    for dtype in FLOATS {
        for &(b, sq, sk, h, d, mask_shape) in cases {
            let e = h * d;
            let q = random(&mut rng, dtype, &[b, sq, e], -1.0, 1.0);
            let k = random(&mut rng, dtype, &[b, sk, e], -1.0, 1.0);
            let v = random(&mut rng, dtype, &[b, sk, e], -1.0, 1.0);
            let mask = mask_shape.map(|ms| {
                let mut m = random(&mut rng, dtype, ms, -2.0, 0.0).vals;
                for x in m.iter_mut() {
                    if rng.random_range(0..5) == 0 {
                        *x = f64::NEG_INFINITY;
                    }
                }
                if ms == [2, 1, 1, 9] {
                    m[9..].fill(f64::NEG_INFINITY); // a fully masked batch element: zeros
                    m[0] = 0.0; // and the first one keeps a key
                }
                input(dtype, ms, m)
            });
            let scale = 1.0 / (d.max(1) as f32).sqrt();
            let op = Op::Attention { heads: h as u32, scale };
            let inputs: Vec<&Input> = [&q, &k, &v].into_iter().chain(mask.as_ref()).collect();
            let got = values(&run(&op, &inputs, &[b, sq, e]));
            let ctx = format!("attention {dtype} b={b} sq={sq} sk={sk} heads={h} d={d} mask={mask_shape:?}");
            let chain = attention_chain(&q, &k, &v, mask.as_ref(), h as u32, scale);
            let (want, mags) = attention_reference(&q, &k, &v, mask.as_ref(), (b, sq, sk, h, d), scale as f64);
            check(&format!("{ctx} vs chain"), &got, &chain.vals, Some(&mags), tol(dtype), 1e-6);
            check(&format!("{ctx} vs f64"), &got, &want, Some(&mags), tol(dtype), 1e-6);
            if mask_shape == Some(&[2, 1, 1, 9]) {
                assert!(got[sq * e..].iter().all(|&x| x == 0.0), "{ctx}: a fully masked row attends to nothing");
            }
        }
    }
}

#[test]
fn fused_ops_with_the_wrong_arity_are_errors() {
    let x = input(DType::F32, &[2, 4], vec![0.0; 8]);
    let out = meta(DType::F32, &[2, 4]);
    let lin = Op::Linear { transpose_w: false, activation: None };
    assert!(launch(&lin, &[(&x.buf, &x.meta)], &out).unwrap_err().0.contains("linear"));
    let aln = Op::AddLayerNorm { eps: 1e-5 };
    assert!(launch(&aln, &[(&x.buf, &x.meta), (&x.buf, &x.meta)], &out).unwrap_err().0.contains("add-layer-norm"));
    let att = Op::Attention { heads: 1, scale: 1.0 };
    assert!(launch(&att, &[(&x.buf, &x.meta)], &out).unwrap_err().0.contains("attention"));
}

/// Same inputs, same thread count: the same bits, for the kernels that split work
/// across threads (a big linear with GELU, attention, add-layer-norm, softmax).
#[test]
fn parallel_kernels_are_deterministic() {
    let mut rng = StdRng::seed_from_u64(29);
    let (m, k, n) = (300, 96, 520);
    let x = random(&mut rng, DType::F32, &[m, k], -1.0, 1.0);
    let w = random(&mut rng, DType::F32, &[n, k], -1.0, 1.0);
    let b = random(&mut rng, DType::F32, &[n], -1.0, 1.0);
    let (s, e) = (200, 64);
    let q = random(&mut rng, DType::F32, &[2, s, e], -1.0, 1.0);
    let mask = random(&mut rng, DType::F32, &[2, 1, 1, s], -2.0, 0.0);
    let r = random(&mut rng, DType::F32, &[2, s, e], -1.0, 1.0);
    let g = random(&mut rng, DType::F32, &[e], 0.5, 1.5);
    let be = random(&mut rng, DType::F32, &[e], -0.5, 0.5);
    let ops: [(Op, Vec<&Input>); 4] = [
        (Op::Linear { transpose_w: true, activation: Some(UnaryOp::Gelu) }, vec![&x, &w, &b]),
        (Op::Attention { heads: 4, scale: 0.25 }, vec![&q, &r, &q, &mask]),
        (Op::AddLayerNorm { eps: 1e-12 }, vec![&q, &r, &g, &be]),
        (Op::Softmax { scale: 0.5 }, vec![&x]),
    ];
    for (op, inputs) in &ops {
        let bits = |_| -> Vec<u64> { values(&try_run(op, inputs).unwrap().0).iter().map(|v| v.to_bits()).collect() };
        let first = bits(0);
        for i in 1..4 {
            assert!(bits(i) == first, "{op:?}: run {i} differs from run 0");
        }
    }
}

/// f16 attention whose raw scores q·k pass f16's range (65504) while the scaled scores
/// are moderate: the scale is applied before the scores are rounded to f16 (as the CUDA
/// backend passes it as the GEMM's alpha), so the result is finite and matches the f64
/// reference instead of turning into NaN.
#[test]
fn f16_attention_scales_before_rounding_the_scores() {
    let (b, sq, sk, h, d) = (1usize, 2usize, 3usize, 2usize, 4usize);
    let e = h * d;
    let scale = 1.0 / 16000.0;
    let q_vals: Vec<f64> =
        (0..b * sq * e).map(|i| if (i / e) % 2 == 0 { 200.0 } else { -200.0 } + (i % d) as f64).collect();
    let k_vals: Vec<f64> = (0..b * sk * e).map(|i| 100.0 + 10.0 * ((i / e) % sk) as f64 + (i % e / d) as f64).collect();
    let v_vals: Vec<f64> = (0..b * sk * e).map(|i| ((i * 7) % 11) as f64 * 0.25 - 1.0).collect();
    let q = input(DType::F16, &[b, sq, e], q_vals);
    let k = input(DType::F16, &[b, sk, e], k_vals);
    let v = input(DType::F16, &[b, sk, e], v_vals);
    assert!(q.vals[0] * k.vals[0] * d as f64 > 65504.0, "the raw scores pass f16's range");
    let op = Op::Attention { heads: h as u32, scale: scale as f32 };
    let got = values(&run(&op, &[&q, &k, &v], &[b, sq, e]));
    let (want, mags) = attention_reference(&q, &k, &v, None, (b, sq, sk, h, d), scale);
    check("f16 attention, raw scores past f16", &got, &want, Some(&mags), tol(DType::F16), 1.0);
}

/// RMS norm in f64: `s / sqrt(mean(s²) + eps) * w` over rows of `d`.
fn rms_norm_f64(s: &[f64], d: usize, w: &[f64], eps: f64) -> Vec<f64> {
    s.chunks(d)
        .flat_map(|row| {
            let scale = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / d as f64 + eps).sqrt();
            row.iter().zip(w).map(move |(v, g)| v * scale * g)
        })
        .collect()
}

#[test]
fn rms_norm_with_and_without_a_residual() {
    let mut rng = StdRng::seed_from_u64(61);
    for dtype in FLOATS {
        for shape in [&[1, 576][..], &[3, 37], &[2, 2, 64], &[5, 1]] {
            let d = *shape.last().unwrap();
            let x = random(&mut rng, dtype, shape, -3.0, 3.0);
            let res = random(&mut rng, dtype, shape, -3.0, 3.0);
            let w = random(&mut rng, dtype, &[d], 0.5, 1.5);
            let eps = 1e-5;
            let got = values(&run(&Op::RmsNorm { eps: eps as f32 }, &[&x, &w], shape));
            let want = rms_norm_f64(&x.vals, d, &w.vals, eps);
            check(&format!("rms-norm {dtype} {shape:?}"), &got, &want, None, tol(dtype), 1e-6);
            // The residual sum rounds to the dtype first, like the add op.
            let sum = step(&Op::Binary(BinaryOp::Add), &[&x, &res]);
            let got = values(&run(&Op::RmsNorm { eps: eps as f32 }, &[&x, &res, &w], shape));
            let want = rms_norm_f64(&sum.vals, d, &w.vals, eps);
            check(&format!("add-rms-norm {dtype} {shape:?}"), &got, &want, None, tol(dtype), 1e-6);
            // Equal to the unfused chain within the dtype's rounding.
            let chain = values(&run(&Op::RmsNorm { eps: eps as f32 }, &[&sum, &w], shape));
            check(&format!("add-rms-norm vs chain {dtype} {shape:?}"), &got, &chain, None, tol(dtype), 1e-6);
        }
    }
}

/// Causal GQA attention in f64 from its definition (see the WIT `gqa-attention-args`).
#[allow(clippy::too_many_arguments)]
fn gqa_f64(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    s: usize,
    heads: usize,
    kv_heads: usize,
    d: usize,
    n: usize,
    scale: f64,
) -> Vec<f64> {
    let mut out = vec![0.0; s * heads * d];
    for i in 0..s {
        for h in 0..heads {
            let g = h / (heads / kv_heads);
            let qr = &q[(i * heads + h) * d..][..d];
            let at = |j: usize| (j * kv_heads + g) * d;
            let scores: Vec<f64> = (0..=n - s + i)
                .map(|j| qr.iter().zip(&k[at(j)..][..d]).map(|(a, b)| a * b).sum::<f64>() * scale)
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = scores.iter().map(|x| (x - max).exp()).sum();
            for (j, sc) in scores.iter().enumerate() {
                let w = (sc - max).exp() / sum;
                for c in 0..d {
                    out[(i * heads + h) * d + c] += w * v[at(j) + c];
                }
            }
        }
    }
    out
}

#[test]
fn gqa_attention_over_a_cache_is_causal_and_reads_only_kv_len_positions() {
    let mut rng = StdRng::seed_from_u64(91);
    // (s, heads, kv_heads, d, ctx, kv_len): a prompt into an empty cache, decode steps,
    // a chunk in the middle, plain multi-head (kv_heads = heads).
    let cases =
        [(7, 9, 3, 64, 48, 7), (1, 9, 3, 64, 48, 41), (1, 9, 3, 64, 48, 48), (3, 4, 2, 6, 10, 8), (2, 2, 2, 4, 3, 2)];
    for dtype in FLOATS {
        for (s, heads, kv_heads, d, ctx, n) in cases {
            let q = random(&mut rng, dtype, &[s, heads, d], -1.0, 1.0);
            let k = random(&mut rng, dtype, &[ctx, kv_heads, d], -1.0, 1.0);
            let v = random(&mut rng, dtype, &[ctx, kv_heads, d], -1.0, 1.0);
            let scale = 1.0 / (d as f64).sqrt();
            let op = Op::GqaAttention { kv_len: n as u32, scale: scale as f32 };
            let got = values(&run(&op, &[&q, &k, &v], &[s, heads, d]));
            let want = gqa_f64(&q.vals, &k.vals, &v.vals, s, heads, kv_heads, d, n, scale as f32 as f64);
            let ctx_ = format!("gqa {dtype} s={s} heads={heads}/{kv_heads} d={d} n={n}");
            // Outputs are averages of values in [-1, 1]: an absolute bound at that scale.
            check(&ctx_, &got, &want, None, tol(dtype), 1.0);
            // Positions past kv_len are never read: garbage there changes nothing.
            let mut kv_noise = k.vals.clone();
            kv_noise[n * kv_heads * d..].iter_mut().for_each(|x| *x = 1e4);
            let k2 = input(dtype, &[ctx, kv_heads, d], kv_noise);
            assert_eq!(values(&run(&op, &[&q, &k2, &v], &[s, heads, d])), got, "{ctx_}: read past kv_len");
        }
    }
}
