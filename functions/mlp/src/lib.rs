//! `mlp`: a small, deterministic classifier used to test the host end to end.
//!
//! - Input `input`: FP32, shape `[n, 16]` with `n ≥ 1`. Anything else (missing,
//!   another datatype, another shape) is an `invalid-input` error.
//! - Output `probabilities`: FP32, shape `[n, 10]`, each row sums to 1.
//!
//! The network (row-vector convention, `W` stored `[fan_in, fan_out]` row-major):
//!
//! ```text
//! h1 = relu(x  @ W1 + b1)      W1 [16, 64]  b1 [64]
//! h2 = gelu(h1 @ W2 + b2)      W2 [64, 64]  b2 [64]   (exact, erf-based GELU)
//! p  = softmax(h2 @ W3 + b3)   W3 [64, 10]  b3 [10]   (over the last axis, scale 1)
//! ```
//!
//! Weights are generated inside the function, so a test can recompute them:
//! one splitmix64 generator with state `42` draws, in this order, every element of
//! W1 (row-major), b1, W2, b2, W3, b3. splitmix64's step is
//!
//! ```text
//! state = state + 0x9E3779B97F4A7C15            (wrapping)
//! z = state
//! z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9      (wrapping)
//! z = (z ^ (z >> 27)) * 0x94D049BB133111EB      (wrapping)
//! return z ^ (z >> 31)
//! ```
//!
//! and each weight of a layer with fan-in `f` (16, 64, 64 for the three layers,
//! biases included) is, computed in f64 and then rounded to f32,
//! `u = (next() >> 11) as f64 * 2^-53` (uniform in `[0, 1)`),
//! `w = ((2u - 1) / sqrt(f)) as f32` — uniform in `[-1/sqrt(f), 1/sqrt(f))`.

use sluice_guest::{Error, Function, Inputs, IoTensor, Result, Tensor};

/// Width of the input rows.
const INPUT: u32 = 16;
/// Width of both hidden layers.
const HIDDEN: u32 = 64;
/// Number of classes.
const CLASSES: u32 = 10;
/// Seed of the weight generator.
const SEED: u64 = 42;

/// The splitmix64 generator (Steele, Lea and Flood, 2014).
struct SplitMix64(u64);

impl SplitMix64 {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `count` values uniform in `[-1/sqrt(fan_in), 1/sqrt(fan_in))`.
    fn uniform(&mut self, count: u32, fan_in: u32) -> Vec<f32> {
        let bound = 1.0 / f64::from(fan_in).sqrt();
        (0..count)
            .map(|_| {
                let u = (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                ((2.0 * u - 1.0) * bound) as f32
            })
            .collect()
    }
}

/// One dense layer on the device.
struct Dense {
    /// Weights `[fan_in, fan_out]`.
    w: Tensor,
    /// Bias `[fan_out]`.
    b: Tensor,
}

impl Dense {
    /// Draws the layer's weights then its bias from `rng` and uploads them.
    fn generate(rng: &mut SplitMix64, fan_in: u32, fan_out: u32) -> Result<Dense> {
        let w = rng.uniform(fan_in * fan_out, fan_in);
        let b = rng.uniform(fan_out, fan_in);
        Ok(Dense { w: Tensor::from_f32(&[fan_in, fan_out], &w)?, b: Tensor::from_f32(&[fan_out], &b)? })
    }

    /// `x @ W + b`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.matmul(&self.w)?.add(&self.b)
    }
}

/// The exported function.
struct Mlp;

impl Function for Mlp {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let input = inputs.get("input")?;
        input.as_f32()?;
        input.expect_shape(&[None, Some(u64::from(INPUT))])?;
        if input.shape[0] == 0 {
            return Err(Error::invalid_input("tensor `input`: needs at least one row"));
        }
        let x = input.to_tensor()?;

        let mut rng = SplitMix64(SEED);
        let l1 = Dense::generate(&mut rng, INPUT, HIDDEN)?;
        let l2 = Dense::generate(&mut rng, HIDDEN, HIDDEN)?;
        let l3 = Dense::generate(&mut rng, HIDDEN, CLASSES)?;

        let h1 = l1.forward(&x)?.relu()?;
        let h2 = l2.forward(&h1)?.gelu()?;
        let probabilities = l3.forward(&h2)?.softmax(1.0, None)?;
        Ok(vec![probabilities.to_io("probabilities")?])
    }
}

sluice_guest::export!(Mlp);
