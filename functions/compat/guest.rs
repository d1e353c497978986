// The body of every compatibility fixture (`functions/compat/*`), included by each after
// its `wit_bindgen::generate!` of one frozen host API version: the same calls, so each
// fixture shows that a component built against that version runs on today's host.
//
// `run` takes `x` (f32 `[2, 3]`) and returns `buf` (f32 `[4, 2]`: zeros with rows 1..3
// written from `2 * (x @ w)`, `w = [[1, 2], [3, 4], [5, 6]]`) and `sum` (f32 `[4]`, the
// row sums of `buf`), plus whatever the fixture's `extra_outputs` adds (a host error
// there fails the invocation with its message, like one in the common body). It uses types,
// tensors (uploads, `zeros`, `write-rows`, `read`), ops and io: every interface
// a plain function needs. (`IoTensor` and `RunError` come from the world's
// `use io.{…}`, generated at the crate root.)

use sluice::gpu::io::IoData;
use sluice::gpu::ops::{self, BinaryOp, MatmulArgs, Op, ReduceArgs, ReduceOp};
use sluice::gpu::tensors::Tensor;
use sluice::gpu::types::{Dtype, Error};

struct Compat;

impl Guest for Compat {
    fn run(inputs: Vec<IoTensor>) -> Result<Vec<IoTensor>, RunError> {
        let x = match inputs.iter().find(|t| t.name == "x") {
            Some(IoTensor { shape, data: IoData::F32(v), .. }) if shape == &[2, 3] => v.clone(),
            _ => return Err(RunError::InvalidInput("expected `x`: FP32 [2, 3]".into())),
        };
        let mut outputs = compute(&x).map_err(|e| RunError::Failed(e.message))?;
        outputs.extend(extra_outputs().map_err(|e| RunError::Failed(e.message))?);
        Ok(outputs)
    }
}

fn compute(x: &[f32]) -> Result<Vec<IoTensor>, Error> {
    let x = Tensor::from_f32(&[2, 3], x)?;
    let w = Tensor::from_f32(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    let y = ops::launch(&Op::Matmul(MatmulArgs { transpose_a: false, transpose_b: false }), &[&x, &w])?;
    let y2 = ops::launch(&Op::Binary(BinaryOp::Add), &[&y, &y])?;
    let buf = Tensor::zeros(Dtype::F32, &[4, 2])?;
    buf.write_rows(1, &y2)?;
    let sum = ops::launch(&Op::Reduce(ReduceArgs { op: ReduceOp::Sum, axis: 1, keep_dim: false }), &[&buf])?;
    Ok(vec![f32_output("buf", &buf)?, f32_output("sum", &sum)?])
}

fn f32_output(name: &str, t: &Tensor) -> Result<IoTensor, Error> {
    let bytes = t.read()?;
    let data = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    Ok(IoTensor { name: name.into(), shape: t.shape().into_iter().map(u64::from).collect(), data: IoData::F32(data) })
}

export!(Compat);
