//! `mnist`: a handwritten-digit classifier, the CNN of the PyPI package
//! `digit-recognizer-py` 0.1.0 (MIT) with its trained weights, which the runtime's
//! set-up converts from the package's PyTorch state dict to the safetensors artifact
//! `model` (`cargo xtask fetch-mnist`; tensor names as in the state dict).
//!
//! - Input `image`: UINT8 `[n, 28, 28]`, pixels 0–255, white digit on black, row-major.
//! - Outputs `logits` FP32 `[n, 10]` (raw scores) and `digit` INT64 `[n]` (the argmax).
//!
//! The network, NCHW, each op one kernel: `x = (p / 255 − 0.1307) / 0.3081` (on the
//! guest), three blocks conv 3×3 (padding 1) + ReLU → max-pool 2×2 at 32, 64 and 128
//! channels (28 → 14 → 7 → 3), flatten (c·9 + h·3 + w), linear 1152→256 + ReLU, linear
//! 256→10.

use sluice_guest::{Conv2d, Error, Function, Inputs, IoTensor, Pool2d, Result, Tensor, UnaryOp, artifacts};

/// The image side.
const SIDE: u64 = 28;
/// MNIST's normalisation, as the model was trained.
const MEAN: f32 = 0.1307;
const STD: f32 = 0.3081;

struct Mnist;

/// The images as normalised floats and their count.
fn pixels(image: &IoTensor) -> Result<(Vec<f32>, u64)> {
    let [n, SIDE, SIDE] = image.shape[..] else {
        return Err(Error::invalid_input(format!("`image` must be [n, 28, 28], not {:?}", image.shape)));
    };
    image.check()?;
    Ok((image.as_u8()?.iter().map(|&p| (f32::from(p) / 255.0 - MEAN) / STD).collect(), n))
}

fn weight(name: &str) -> Result<Tensor> {
    artifacts::load_tensor("model", name, None)
}

/// conv 3×3 (padding 1) + ReLU → max-pool 2×2.
fn block(x: &Tensor, layer: usize) -> Result<Tensor> {
    let (w, b) = (weight(&format!("conv_layers.{layer}.weight"))?, weight(&format!("conv_layers.{layer}.bias"))?);
    let conv = Conv2d { padding: (1, 1), ..Conv2d::default() };
    x.conv2d(&w, Some(&b), conv)?.relu()?.max_pool2d(Pool2d::square(2))
}

impl Function for Mnist {
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
        let (x, n) = pixels(inputs.get("image")?)?;
        let batch = u32::try_from(n).map_err(|_| Error::invalid_input("too many images"))?;
        let mut h = Tensor::from_f32(&[batch, 1, SIDE as u32, SIDE as u32], &x)?;
        for layer in [0, 3, 6] {
            h = block(&h, layer)?;
        }
        let flat = h.reshape(&[batch, 128 * 3 * 3])?;
        let hidden =
            flat.linear(&weight("fc_layers.0.weight")?, Some(&weight("fc_layers.0.bias")?), true, Some(UnaryOp::Relu))?;
        let logits = hidden.linear(&weight("fc_layers.2.weight")?, Some(&weight("fc_layers.2.bias")?), true, None)?;
        let out = logits.to_io("logits")?;
        let scores = out.as_f32()?;
        let digits = scores
            .chunks_exact(10)
            .map(|row| row.iter().enumerate().fold(0, |best, (i, v)| if *v > row[best] { i } else { best }) as i64)
            .collect();
        Ok(vec![out, IoTensor::i64("digit", &[n], digits)])
    }
}

sluice_guest::export!(Mnist);

sluice_guest::signature! {
    inputs: [
        "image": UINT8[-1, 28, 28],
    ],
    outputs: [
        "logits": FP32[-1, 10],
        "digit": INT64[-1],
    ],
}
