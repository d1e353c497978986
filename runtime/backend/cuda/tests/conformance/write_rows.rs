//! The in-place row write (`Op::WriteRows`) as a KV cache uses it: rows written step by
//! step into one buffer, in stream order with the kernels that read it (a gqa-attention
//! launched after a write sees its rows, one launched before does not), a reshape taken
//! before the writes shows them, the other rows keep their values; the same on a lane
//! other than the one that made the buffer. On the fake the streams are lazy, so a
//! missing order gives the allocator's fill (NaN) or stale rows, never a lucky pass.

use sluice_backend_cpu::CpuBuffer;
use sluice_backend_cuda::{CudaBuffer, CudaDevice, CudaOptions, Lane};
use sluice_host_api::{DType, Op, TensorMeta, infer};

use super::device;

fn meta(shape: &[u32]) -> TensorMeta {
    TensorMeta::new(DType::F32, shape.to_vec()).unwrap()
}

fn upload(dev: &CudaDevice, shape: &[u32], v: &[f32]) -> CudaBuffer {
    dev.upload(&meta(shape), &CpuBuffer::from_f32_as(DType::F32, v).to_le_bytes()).unwrap()
}

fn read(dev: &CudaDevice, b: &CudaBuffer, shape: &[u32]) -> Vec<f32> {
    CpuBuffer::from_le_bytes(DType::F32, &dev.download(b, &meta(shape)).unwrap()).to_f32_vec()
}

fn run(dev: &CudaDevice, op: &Op, inputs: &[(&CudaBuffer, &TensorMeta)]) -> (CudaBuffer, TensorMeta) {
    let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| *m).collect();
    let out = infer(op, &metas).unwrap();
    (dev.launch(op, inputs, &out).unwrap(), out)
}

/// Writes 4 positions of a `[6, 2, 4]` cache one step at a time and reads it with
/// gqa-attention after each step; returns the cache, the attention outputs and the view.
fn steps(dev: &CudaDevice) -> (Vec<f32>, Vec<Vec<f32>>, Vec<f32>) {
    let (ctx, heads, d) = (6u32, 2u32, 4u32);
    let cm = meta(&[ctx, heads, d]);
    let k = upload(dev, &[ctx, heads, d], &vec![0.0; (ctx * heads * d) as usize]);
    let (view, vm) = run(dev, &Op::Reshape(vec![ctx * heads * d]), &[(&k, &cm)]);
    let q = upload(dev, &[1, heads, d], &[0.5; 8]);
    let qm = meta(&[1, heads, d]);
    let mut outs = Vec::new();
    for step in 0..4u32 {
        let row: Vec<f32> = (0..heads * d).map(|i| (step * 10 + i) as f32).collect();
        let src = upload(dev, &[1, heads, d], &row);
        let (done, _) = run(dev, &Op::WriteRows { offset: step }, &[(&k, &cm), (&src, &qm)]);
        assert_eq!(done.byte_len(), 0);
        drop(src);
        let op = Op::GqaAttention { kv_len: step + 1, scale: 0.5 };
        let (att, am) = run(dev, &op, &[(&q, &qm), (&k, &cm), (&k, &cm)]);
        outs.push(read(dev, &att, &am.shape));
    }
    (read(dev, &k, &cm.shape), outs, read(dev, &view, &vm.shape))
}

#[test]
fn rows_written_in_place_are_seen_by_later_kernels_and_views() {
    let Some(dev) = device() else { return };
    let (cache, outs, view) = steps(dev);
    let mut want = vec![0.0; 48];
    for step in 0..4 {
        for i in 0..8 {
            want[step * 8 + i] = (step * 10 + i) as f32;
        }
    }
    assert_eq!(cache, want, "rows 0..4 written, rows 4..6 still zero");
    assert_eq!(view, want, "a reshape taken before the writes shows them");
    // Attention over one position returns that position's values (v = k here).
    assert_eq!(outs[0], want[..8].to_vec());
    // Later steps attend to more positions: their outputs differ from the first.
    for (i, o) in outs.iter().enumerate().skip(1) {
        assert_ne!(o, &outs[0], "step {i} sees its new rows");
        assert!(o.iter().all(|x| x.is_finite()));
    }
}

#[test]
fn a_write_on_another_lane_is_seen_everywhere() {
    let Some(_) = device() else { return };
    let dev = CudaDevice::open(CudaOptions { reserved_sms: 16, ..Default::default() }).expect("a second handle");
    let cm = meta(&[4, 8]);
    dev.set_lane(Lane::Whole);
    let k = upload(&dev, &[4, 8], &[1.0; 32]);
    dev.set_lane(Lane::Reserved);
    let src = upload(&dev, &[2, 8], &[7.0; 16]);
    let sm = meta(&[2, 8]);
    run(&dev, &Op::WriteRows { offset: 1 }, &[(&k, &cm), (&src, &sm)]);
    dev.set_lane(Lane::Remainder);
    let (neg, _) = run(&dev, &Op::Unary(sluice_host_api::UnaryOp::Neg), &[(&k, &cm)]);
    let mut want = vec![-1.0; 32];
    want[8..24].fill(-7.0);
    assert_eq!(read(&dev, &neg, &[4, 8]), want, "a kernel on a third lane");
    dev.set_lane(Lane::Whole);
    assert_eq!(read(&dev, &k, &[4, 8]), want.iter().map(|x| -x).collect::<Vec<_>>(), "a download on the producer's");
}
