//! Deliberately naive reference implementations of the op catalog for the conformance
//! tests: `f64` values, plain nested loops over explicit multi-indices, no shared code
//! with the backend. Each function returns the expected output values in row-major
//! order; the ones that sum terms also return, per element, the sum of the absolute
//! values of those terms, against which rounding error is measured.

#![allow(dead_code, clippy::too_many_arguments)]

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Multi-index of row-major flat index `i`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

/// Row-major flat index of a multi-index.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    let mut flat = 0;
    for a in 0..shape.len() {
        flat = flat * shape[a] + idx[a];
    }
    flat
}

/// NumPy broadcast of two shapes.
pub fn broadcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
            if da == 1 { db } else { da }
        })
        .collect()
}

/// Flat index into `shape` of the element that broadcasts to output index `out_idx`.
pub fn broadcast_index(out_idx: &[usize], shape: &[usize]) -> usize {
    let off = out_idx.len() - shape.len();
    let idx: Vec<usize> = (0..shape.len()).map(|a| if shape[a] == 1 { 0 } else { out_idx[off + a] }).collect();
    ravel(&idx, shape)
}

/// Elementwise `f` over broadcast operands.
pub fn binary(a: &[f64], ash: &[usize], b: &[f64], bsh: &[usize], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let out = broadcast(ash, bsh);
    (0..numel(&out))
        .map(|i| {
            let idx = unravel(i, &out);
            f(a[broadcast_index(&idx, ash)], b[broadcast_index(&idx, bsh)])
        })
        .collect()
}

/// Standard normal CDF by Simpson's rule on the density (relative accuracy ~1e-10).
pub fn normal_cdf(x: f64) -> f64 {
    if x > 0.0 {
        return 1.0 - normal_cdf(-x);
    }
    let density = |t: f64| (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let (lo, n) = (x - 16.0, 16384usize);
    let h = (x - lo) / n as f64;
    let mut s = density(lo) + density(x);
    for i in 1..n {
        s += density(lo + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    s * h / 3.0
}

/// Batched matrix product; returns (shape, values, |terms| sums).
pub fn matmul(
    a: &[f64],
    ash: &[usize],
    b: &[f64],
    bsh: &[usize],
    ta: bool,
    tb: bool,
) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let (ar, br) = (ash.len(), bsh.len());
    let (m, k) = if ta { (ash[ar - 1], ash[ar - 2]) } else { (ash[ar - 2], ash[ar - 1]) };
    let n = if tb { bsh[br - 2] } else { bsh[br - 1] };
    let batch = broadcast(&ash[..ar - 2], &bsh[..br - 2]);
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let (mut vals, mut mags) = (vec![], vec![]);
    for bi in 0..numel(&batch) {
        let bidx = unravel(bi, &batch);
        let a0 = broadcast_index(&bidx, &ash[..ar - 2]) * ash[ar - 2] * ash[ar - 1];
        let b0 = broadcast_index(&bidx, &bsh[..br - 2]) * bsh[br - 2] * bsh[br - 1];
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut mag) = (0.0, 0.0);
                for p in 0..k {
                    let x = if ta { a[a0 + p * m + i] } else { a[a0 + i * k + p] };
                    let y = if tb { b[b0 + j * k + p] } else { b[b0 + p * n + j] };
                    s += x * y;
                    mag += (x * y).abs();
                }
                vals.push(s);
                mags.push(mag);
            }
        }
    }
    (shape, vals, mags)
}

/// Softmax over the last axis of `x * scale + mask`; fully masked rows are zeros.
pub fn softmax(x: &[f64], shape: &[usize], scale: f64, mask: Option<(&[f64], &[usize])>) -> Vec<f64> {
    let z: Vec<f64> = match mask {
        Some((m, msh)) => binary(x, shape, m, msh, |x, m| x * scale + m),
        None => x.iter().map(|v| v * scale).collect(),
    };
    let d = shape[shape.len() - 1];
    let mut out = vec![0.0; z.len()];
    for r in 0..z.len() / d.max(1) {
        let row = &z[r * d..(r + 1) * d];
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            continue;
        }
        let total: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for c in 0..d {
            out[r * d + c] = (row[c] - max).exp() / total;
        }
    }
    out
}

/// Layer norm over the last axis; returns values and |x̂·γ| + |β| magnitudes.
pub fn layer_norm(x: &[f64], d: usize, g: &[f64], b: &[f64], eps: f64) -> (Vec<f64>, Vec<f64>) {
    let (mut vals, mut mags) = (vec![], vec![]);
    for row in x.chunks(d) {
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
        for c in 0..d {
            let xhat = (row[c] - mean) / (var + eps).sqrt();
            vals.push(xhat * g[c] + b[c]);
            mags.push((xhat * g[c]).abs() + b[c].abs());
        }
    }
    (vals, mags)
}

/// Reduction of `axis`: "sum" | "mean" | "max" | "min"; returns (shape, values, |x| sums).
pub fn reduce(x: &[f64], shape: &[usize], axis: usize, op: &str, keep: bool) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let mut out_shape = shape.to_vec();
    out_shape[axis] = 1;
    let (mut vals, mut mags) = (vec![], vec![]);
    for o in 0..numel(&out_shape) {
        let mut idx = unravel(o, &out_shape);
        let mut items = vec![];
        for j in 0..shape[axis] {
            idx[axis] = j;
            items.push(x[ravel(&idx, shape)]);
        }
        let n = items.len() as f64;
        vals.push(match op {
            "sum" => items.iter().sum(),
            "mean" => items.iter().sum::<f64>() / n,
            "max" => items.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            "min" => items.iter().cloned().fold(f64::INFINITY, f64::min),
            _ => unreachable!(),
        });
        let mag: f64 = items.iter().map(|v| v.abs()).sum();
        mags.push(if op == "mean" { mag / n } else { mag });
    }
    if !keep {
        out_shape.remove(axis);
    }
    (out_shape, vals, mags)
}

/// Output axis `i` is input axis `perm[i]`.
pub fn permute<T: Copy>(x: &[T], shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<T>) {
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let vals = (0..numel(&out_shape))
        .map(|i| {
            let oidx = unravel(i, &out_shape);
            let mut iidx = vec![0; shape.len()];
            for (a, &p) in perm.iter().enumerate() {
                iidx[p] = oidx[a];
            }
            x[ravel(&iidx, shape)]
        })
        .collect();
    (out_shape, vals)
}

/// Concatenation along `axis` of `(values, shape)` parts.
pub fn concat<T: Copy>(parts: &[(Vec<T>, Vec<usize>)], axis: usize) -> (Vec<usize>, Vec<T>) {
    let mut shape = parts[0].1.clone();
    shape[axis] = parts.iter().map(|p| p.1[axis]).sum();
    let vals = (0..numel(&shape))
        .map(|i| {
            let mut idx = unravel(i, &shape);
            let mut part = 0;
            while idx[axis] >= parts[part].1[axis] {
                idx[axis] -= parts[part].1[axis];
                part += 1;
            }
            parts[part].0[ravel(&idx, &parts[part].1)]
        })
        .collect();
    (shape, vals)
}

/// NCHW cross-correlation; returns (shape, values, |terms| sums).
pub fn conv2d(
    x: &[f64],
    xsh: [usize; 4],
    w: &[f64],
    wsh: [usize; 4],
    bias: Option<&[f64]>,
    stride: (usize, usize),
    pad: (usize, usize),
    dil: (usize, usize),
    groups: usize,
) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let [n, c, h, wd] = xsh;
    let [o, cg, kh, kw] = wsh;
    let oh = (h + 2 * pad.0 - dil.0 * (kh - 1) - 1) / stride.0 + 1;
    let ow = (wd + 2 * pad.1 - dil.1 * (kw - 1) - 1) / stride.1 + 1;
    let og = o / groups;
    let (mut vals, mut mags) = (vec![], vec![]);
    for ni in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for y in 0..oh {
                for xo in 0..ow {
                    let b = bias.map_or(0.0, |b| b[oc]);
                    let (mut s, mut mag) = (b, b.abs());
                    for ci in 0..cg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (y * stride.0 + i * dil.0) as isize - pad.0 as isize;
                                let ix = (xo * stride.1 + j * dil.1) as isize - pad.1 as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let xv = x[ravel(&[ni, g * cg + ci, iy as usize, ix as usize], &[n, c, h, wd])];
                                let wv = w[ravel(&[oc, ci, i, j], &[o, cg, kh, kw])];
                                s += xv * wv;
                                mag += (xv * wv).abs();
                            }
                        }
                    }
                    vals.push(s);
                    mags.push(mag);
                }
            }
        }
    }
    (vec![n, o, oh, ow], vals, mags)
}

/// NCHW pooling; avg divides by the full window, max ignores padding.
pub fn pool2d(
    x: &[f64],
    xsh: [usize; 4],
    max: bool,
    k: (usize, usize),
    stride: (usize, usize),
    pad: (usize, usize),
) -> (Vec<usize>, Vec<f64>) {
    let [n, c, h, w] = xsh;
    let oh = (h + 2 * pad.0 - k.0) / stride.0 + 1;
    let ow = (w + 2 * pad.1 - k.1) / stride.1 + 1;
    let mut vals = vec![];
    for p in 0..n * c {
        for y in 0..oh {
            for xo in 0..ow {
                let mut acc = if max { f64::NEG_INFINITY } else { 0.0 };
                for i in 0..k.0 {
                    for j in 0..k.1 {
                        let iy = (y * stride.0 + i) as isize - pad.0 as isize;
                        let ix = (xo * stride.1 + j) as isize - pad.1 as isize;
                        if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                            continue;
                        }
                        let v = x[(p * h + iy as usize) * w + ix as usize];
                        acc = if max { acc.max(v) } else { acc + v };
                    }
                }
                vals.push(if max { acc } else { acc / (k.0 * k.1) as f64 });
            }
        }
    }
    (vec![n, c, oh, ow], vals)
}

/// The elements of ggml Q4_1 or Q8_0 blocks, decoded from the format's definition
/// (Q4_1: f16 d, f16 m, 16 bytes whose low nibbles are elements 0..16 and high nibbles
/// 16..32, element = d·q + m; Q8_0: f16 d, 32 signed bytes, element = d·q).
pub fn dequantize(dtype: sluice_host_api::DType, bytes: &[u8]) -> Vec<f64> {
    let f16 = |b: &[u8]| half::f16::from_bits(u16::from(b[0]) | (u16::from(b[1]) << 8)).to_f64();
    let mut out = Vec::new();
    match dtype {
        sluice_host_api::DType::Q4_1 => {
            for block in bytes.chunks_exact(20) {
                let (d, m) = (f16(&block[0..2]), f16(&block[2..4]));
                let q = &block[4..20];
                out.extend(q.iter().map(|&b| d * f64::from(b & 0x0f) + m));
                out.extend(q.iter().map(|&b| d * f64::from(b >> 4) + m));
            }
        }
        sluice_host_api::DType::Q8_0 => {
            for block in bytes.chunks_exact(34) {
                let d = f16(&block[0..2]);
                out.extend(block[2..34].iter().map(|&b| d * f64::from(b as i8)));
            }
        }
        other => panic!("{other} is not a block format"),
    }
    out
}

/// Activations as the quantized linear multiplies them, from the definition: per block
/// of 32, `d = max|x| / 127` and `q = round(x · (1 / d))` to the nearest integer, ties to
/// even, both in f32 (so the bytes are the backend's), `d = NaN` for a block with a NaN
/// or an infinity; the values `d · q` in f64.
pub fn q8_activations(x: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for block in x.chunks(32) {
        let block: Vec<f32> = block.iter().map(|&v| v as f32).collect();
        let finite = block.iter().all(|v| v.is_finite());
        let amax = block.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = if finite { amax / 127.0 } else { f32::NAN };
        let inverse = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend(block.iter().map(|&v| f64::from(d) * f64::from((v * inverse).round_ties_even())));
    }
    out
}
