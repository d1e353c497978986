//! A naive, obviously-correct f32 CPU implementation of [`Tensor`] and [`Device`], for
//! native tests only: it runs the same `model.rs` code as the function so the forward
//! pass is checked against the reference embeddings without a host. Weights come from
//! the real `model.safetensors` (header parsed by hand). Casts are no-ops: only the f32
//! path is checked here. The fused ops are spelled out as the chains of plain ops they
//! stand for (matmul, add, GELU, layer norm, split heads, softmax), so the model's use
//! of them is checked against their definition.

use std::collections::HashMap;

use crate::backend::{Device, Precision, Tensor};

/// A row-major f32 tensor.
#[derive(Clone, Debug)]
pub struct Cpu {
    shape: Vec<usize>,
    data: Vec<f32>,
}

type R = Result<Cpu, String>;

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let x = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            let y = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
            match (x, y) {
                _ if x == y => Ok(x),
                (1, _) => Ok(y),
                (_, 1) => Ok(x),
                _ => Err(format!("cannot broadcast {a:?} with {b:?}")),
            }
        })
        .collect()
}

/// Strides of a tensor of `shape` seen through a broadcast to rank `rank` (0 on
/// broadcast axes), so an output multi-index maps to a flat source index by a dot product.
fn broadcast_strides(shape: &[usize], rank: usize) -> Vec<usize> {
    let st = strides(shape);
    let off = rank - shape.len();
    (0..rank).map(|i| if i < off || shape[i - off] == 1 { 0 } else { st[i - off] }).collect()
}

fn dot(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

fn unravel(mut flat: usize, shape: &[usize], out: &mut [usize]) {
    for i in (0..shape.len()).rev() {
        out[i] = flat % shape[i].max(1);
        flat /= shape[i].max(1);
    }
}

/// A `rows × cols` matrix, transposed into a fresh buffer when `transpose`.
fn materialise(m: &[f32], rows: usize, cols: usize, transpose: bool) -> Vec<f32> {
    if !transpose {
        return m.to_vec();
    }
    let mut t = vec![0f32; m.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = m[r * cols + c];
        }
    }
    t
}

impl Cpu {
    fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        assert_eq!(shape.iter().product::<usize>(), data.len());
        Cpu { shape, data }
    }

    fn binary(&self, rhs: &Cpu, f: impl Fn(f32, f32) -> f32) -> R {
        let shape = broadcast(&self.shape, &rhs.shape)?;
        let total = shape.iter().product();
        let sa = broadcast_strides(&self.shape, shape.len());
        let sb = broadcast_strides(&rhs.shape, shape.len());
        let mut idx = vec![0; shape.len()];
        let data = (0..total)
            .map(|i| {
                unravel(i, &shape, &mut idx);
                f(self.data[dot(&idx, &sa)], rhs.data[dot(&idx, &sb)])
            })
            .collect();
        Ok(Cpu::new(shape, data))
    }

    fn unary(&self, f: impl Fn(f32) -> f32) -> R {
        Ok(Cpu::new(self.shape.clone(), self.data.iter().map(|&x| f(x)).collect()))
    }

    /// Applies `f` to every contiguous row of the last axis.
    fn rows(&self, mut f: impl FnMut(usize, &mut [f32])) -> R {
        let mut out = self.clone();
        let w = *self.shape.last().ok_or("rank 0")?;
        for (i, row) in out.data.chunks_mut(w).enumerate() {
            f(i, row);
        }
        Ok(out)
    }

    /// `self @ rhs` over the last two axes (optionally transposed), batched over the rest.
    fn matmul(&self, rhs: &Self, ta: bool, tb: bool) -> R {
        let (ar, br) = (self.shape.len(), rhs.shape.len());
        let (am, ak) = (self.shape[ar - 2], self.shape[ar - 1]);
        let (bk, bn) = (rhs.shape[br - 2], rhs.shape[br - 1]);
        let (m, k) = if ta { (ak, am) } else { (am, ak) };
        let (k2, n) = if tb { (bn, bk) } else { (bk, bn) };
        if k != k2 {
            return Err(format!("matmul {:?} x {:?}", self.shape, rhs.shape));
        }
        let batch = broadcast(&self.shape[..ar - 2], &rhs.shape[..br - 2])?;
        let nb: usize = batch.iter().product();
        let mut idx = vec![0; batch.len()];
        let mut data = vec![0f32; nb * m * n];
        for bi in 0..nb {
            unravel(bi, &batch, &mut idx);
            let a0 = dot(&idx, &broadcast_strides(&self.shape[..ar - 2], batch.len())) * am * ak;
            let b0 = dot(&idx, &broadcast_strides(&rhs.shape[..br - 2], batch.len())) * bk * bn;
            // Materialise both operands untransposed, then an i-p-j loop over rows.
            let a = materialise(&self.data[a0..a0 + am * ak], am, ak, ta);
            let b = materialise(&rhs.data[b0..b0 + bk * bn], bk, bn, tb);
            let out = &mut data[bi * m * n..(bi + 1) * m * n];
            for i in 0..m {
                let row = &mut out[i * n..(i + 1) * n];
                for p in 0..k {
                    let x = a[i * k + p];
                    for (o, &y) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                        *o += x * y;
                    }
                }
            }
        }
        let mut shape = batch;
        shape.extend([m, n]);
        Ok(Cpu::new(shape, data))
    }

    /// Exact (erf) GELU.
    fn gelu(&self) -> R {
        self.unary(|x| (0.5 * f64::from(x) * (1.0 + libm::erf(f64::from(x) / std::f64::consts::SQRT_2))) as f32)
    }

    /// Softmax over the last axis of `self * scale + mask` (mask broadcasts).
    fn softmax(&self, scale: f32, mask: &Self) -> R {
        let x = self.binary(mask, |x, m| x * scale + m)?;
        x.rows(|_, row| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = row
                .iter_mut()
                .map(|v| {
                    *v = (*v - max).exp();
                    *v
                })
                .sum();
            row.iter_mut().for_each(|v| *v /= sum);
        })
    }

    /// Same elements, new shape.
    fn reshape(&self, shape: &[u32]) -> R {
        Ok(Cpu::new(shape.iter().map(|&d| d as usize).collect(), self.data.clone()))
    }

    /// Output axis i is input axis `perm[i]`.
    fn permute(&self, perm: &[u32]) -> R {
        let shape: Vec<usize> = perm.iter().map(|&p| self.shape[p as usize]).collect();
        let st = strides(&self.shape);
        let mut idx = vec![0; shape.len()];
        let data = (0..self.data.len())
            .map(|i| {
                unravel(i, &shape, &mut idx);
                self.data[idx.iter().zip(perm).map(|(&x, &p)| x * st[p as usize]).sum::<usize>()]
            })
            .collect();
        Ok(Cpu::new(shape, data))
    }
}

impl Tensor for Cpu {
    type Error = String;

    fn linear(&self, weight: &Self, bias: &Self, gelu: bool) -> R {
        let y = self.matmul(weight, false, true)?.add(bias)?;
        if gelu { y.gelu() } else { Ok(y) }
    }

    fn add_layer_norm(&self, residual: &Self, gamma: &Self, beta: &Self, eps: f32) -> R {
        self.add(residual)?.layer_norm(gamma, beta, eps)
    }

    /// Splits the heads out of the last axis, `softmax(q·kᵀ · scale + mask) · v` per
    /// head, and merges them back.
    fn attention(q: &Self, k: &Self, v: &Self, mask: &Self, heads: u32, scale: f32) -> R {
        let split = |t: &Cpu| -> R {
            let (n, s, e) = (t.shape[0] as u32, t.shape[1] as u32, t.shape[2] as u32);
            t.reshape(&[n, s, heads, e / heads])?.permute(&[0, 2, 1, 3])
        };
        let (qh, kh, vh) = (split(q)?, split(k)?, split(v)?);
        let probs = qh.matmul(&kh, false, true)?.softmax(scale, mask)?;
        let ctx = probs.matmul(&vh, false, false)?.permute(&[0, 2, 1, 3])?;
        ctx.reshape(&q.shape.iter().map(|&d| d as u32).collect::<Vec<_>>())
    }

    fn add(&self, rhs: &Self) -> R {
        self.binary(rhs, |a, b| a + b)
    }
    fn mul(&self, rhs: &Self) -> R {
        self.binary(rhs, |a, b| a * b)
    }
    fn div(&self, rhs: &Self) -> R {
        self.binary(rhs, |a, b| a / b)
    }
    fn maximum(&self, rhs: &Self) -> R {
        self.binary(rhs, f32::max)
    }
    fn sqrt(&self) -> R {
        self.unary(f32::sqrt)
    }

    fn layer_norm(&self, gamma: &Self, beta: &Self, eps: f32) -> R {
        self.rows(|_, row| {
            let w = row.len() as f64;
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / w;
            let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / w;
            let inv = 1.0 / (var + f64::from(eps)).sqrt();
            for (j, v) in row.iter_mut().enumerate() {
                *v = ((f64::from(*v) - mean) * inv) as f32 * gamma.data[j] + beta.data[j];
            }
        })
    }

    fn sum(&self, axis: u32, keep_dim: bool) -> R {
        let a = axis as usize;
        let outer: usize = self.shape[..a].iter().product();
        let len = self.shape[a];
        let inner: usize = self.shape[a + 1..].iter().product();
        let mut data = vec![0f32; outer * inner];
        for o in 0..outer {
            for i in 0..inner {
                data[o * inner + i] = (0..len).map(|j| self.data[(o * len + j) * inner + i]).sum();
            }
        }
        let mut shape = self.shape.clone();
        if keep_dim {
            shape[a] = 1
        } else {
            shape.remove(a);
        }
        Ok(Cpu::new(shape, data))
    }

    fn slice(&self, axis: u32, start: u32, end: u32) -> R {
        let a = axis as usize;
        let outer: usize = self.shape[..a].iter().product();
        let inner: usize = self.shape[a + 1..].iter().product();
        let (s, e, len) = (start as usize, end as usize, self.shape[a]);
        let mut data = Vec::with_capacity(outer * (e - s) * inner);
        for o in 0..outer {
            data.extend_from_slice(&self.data[(o * len + s) * inner..(o * len + e) * inner]);
        }
        let mut shape = self.shape.clone();
        shape[a] = e - s;
        Ok(Cpu::new(shape, data))
    }

    fn cast(&self, _: Precision) -> R {
        Ok(self.clone())
    }

    fn embedding(table: &Self, ids: &Self) -> R {
        let d = table.shape[1];
        let mut data = Vec::with_capacity(ids.data.len() * d);
        for &id in &ids.data {
            let r = id as usize;
            data.extend_from_slice(&table.data[r * d..(r + 1) * d]);
        }
        let mut shape = ids.shape.clone();
        shape.push(d);
        Ok(Cpu::new(shape, data))
    }
}

/// Weights of a safetensors file (f32 only), by name.
pub struct CpuDevice {
    weights: HashMap<String, Cpu>,
}

impl CpuDevice {
    /// Parses an f32 safetensors file.
    pub fn from_safetensors(bytes: &[u8]) -> Result<Self, String> {
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).map_err(|e| e.to_string())?;
        let body = &bytes[8 + n..];
        let mut weights = HashMap::new();
        for (name, info) in header.as_object().ok_or("header")? {
            if name == "__metadata__" || info["dtype"] != "F32" {
                continue;
            }
            let shape: Vec<usize> =
                info["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
            let off = &info["data_offsets"];
            let (s, e) = (off[0].as_u64().unwrap() as usize, off[1].as_u64().unwrap() as usize);
            let data = body[s..e].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            weights.insert(name.clone(), Cpu::new(shape, data));
        }
        Ok(CpuDevice { weights })
    }
}

impl Device for CpuDevice {
    type Tensor = Cpu;
    type Error = String;

    fn load(&self, name: &str, _: Precision) -> R {
        self.weights.get(name).cloned().ok_or_else(|| format!("no tensor {name}"))
    }
    fn upload_f32(&self, shape: &[u32], data: &[f32]) -> R {
        Ok(Cpu::new(shape.iter().map(|&d| d as usize).collect(), data.to_vec()))
    }
    fn upload_i32(&self, shape: &[u32], data: &[i32]) -> R {
        Ok(Cpu::new(shape.iter().map(|&d| d as usize).collect(), data.iter().map(|&x| x as f32).collect()))
    }
    fn read_f32(&self, t: &Cpu) -> Result<Vec<f32>, String> {
        Ok(t.data.clone())
    }
}
