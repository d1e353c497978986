//! Large uploads through the stager (issue 11, defect 2): [`CudaDevice::upload_owned`]
//! returns before its copy is made (the stager is held, and the caller's thread goes on
//! running other work meanwhile), and every reader, on the same lane, on another lane
//! and by download, waits for the copy; a staged buffer dropped unread does not give its
//! memory to a later upload before its copy ran. On the fake the copy stream is lazy, so
//! a reader that did not wait would read the allocator's fill (NaN), never a lucky copy.

use sluice_backend_cpu::CpuBuffer;
use sluice_backend_cuda::staging::{CHUNK, STAGED_MIN};
use sluice_backend_cuda::{CudaDevice, CudaOptions, Lane};
use sluice_host_api::{DType, Op, TensorMeta, UnaryOp};

use super::device;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    CpuBuffer::from_f32_as(DType::F32, v).to_le_bytes()
}

/// Panics naming the first differing element (the vectors are long).
fn same(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!("{what}: element {i} is {}, want {}", got[i], want[i]);
    }
}

fn read(dev: &CudaDevice, b: &sluice_backend_cuda::CudaBuffer, m: &TensorMeta) -> Vec<f32> {
    CpuBuffer::from_le_bytes(DType::F32, &dev.download(b, m).unwrap()).to_f32_vec()
}

#[test]
fn large_uploads_return_before_their_copy_and_every_reader_waits_for_it() {
    let Some(_) = device() else { return };
    // A device of its own: holding its stager must not stall other tests.
    let dev = CudaDevice::open(CudaOptions { reserved_sms: 16, ..Default::default() }).expect("a second handle");
    let n = (2 * CHUNK + STAGED_MIN) / 4 + 5; // two full pinned chunks and a part of a third
    let m = TensorMeta::new(DType::F32, vec![n as u32]).unwrap();
    let h: Vec<f32> = (0..n).map(|i| (i % 1001) as f32 - 500.0).collect();

    let hold = dev.hold_staging().unwrap();
    let big = dev.upload_owned(&m, f32_bytes(&h)).unwrap();
    assert_eq!(dev.staging_stats().uploads, 0, "the upload returned with its copy not made");
    assert!(big.staging_pending(), "a reader would wait for the held copy: the buffer says so");
    // Meanwhile the caller's thread runs other work: a small upload and a kernel.
    let sm = TensorMeta::new(DType::F32, vec![4]).unwrap();
    let small = dev.upload_owned(&sm, f32_bytes(&[-1.0, 2.0, -3.0, 4.0])).unwrap();
    let y = dev.launch(&Op::Unary(UnaryOp::Relu), &[(&small, &sm)], &sm).unwrap();
    assert_eq!(read(&dev, &y, &sm), [0.0, 2.0, 0.0, 4.0]);
    assert_eq!(dev.staging_stats().uploads, 0, "small uploads are copied at once");
    assert!(!small.staging_pending(), "a small upload is never pending");
    drop(hold);

    // A reader on another lane, one on the uploading lane, and a download.
    let relu: Vec<f32> = h.iter().map(|v| v.max(0.0)).collect();
    dev.set_lane(Lane::Reserved);
    let y = dev.launch(&Op::Unary(UnaryOp::Relu), &[(&big, &m)], &m).unwrap();
    same(&read(&dev, &y, &m), &relu, "a kernel on another lane");
    assert!(!big.staging_pending(), "the copy was queued before its first reader launched");
    dev.set_lane(Lane::Whole);
    let y = dev.launch(&Op::Unary(UnaryOp::Relu), &[(&big, &m)], &m).unwrap();
    same(&read(&dev, &y, &m), &relu, "a kernel on the uploading lane");
    same(&read(&dev, &big, &m), &h, "the download");
    let stats = dev.staging_stats();
    assert_eq!((stats.uploads, stats.bytes), (1, m.byte_len() as u64));

    // Dropped unread, then the same size again with other values.
    let first = dev.upload_owned(&m, f32_bytes(&h)).unwrap();
    drop(first);
    let other: Vec<f32> = h.iter().map(|v| -v).collect();
    let second = dev.upload_owned(&m, f32_bytes(&other)).unwrap();
    same(&read(&dev, &second, &m), &other, "an upload into a block freed while its copy was pending");
    assert_eq!(dev.staging_stats().uploads, 3);
}

/// Weights loaded as another dtype (the server's `load_tensor(.., as_dtype)`): each a
/// staged upload cast on the device and dropped at once, all queued before any result is
/// read. Every upload after the first reuses the block of the one before, whose cast
/// has not run yet: its copy must wait for that cast (on the fake the stream runs only
/// when waited on, so a copy that did not wait overwrites the cast's input).
#[test]
fn staged_uploads_into_reused_blocks_wait_for_earlier_readers() {
    let Some(_) = device() else { return };
    let dev = CudaDevice::open(CudaOptions::default()).expect("a second handle");
    let n = STAGED_MIN / 4 * 3 + 7;
    let m = TensorMeta::new(DType::F32, vec![n as u32]).unwrap();
    let layers: Vec<Vec<f32>> =
        (0..4).map(|l| (0..n).map(|i| ((i + 13 * l) % 97) as f32 * 0.25 - 12.0).collect()).collect();
    for to in [DType::F16, DType::BF16, DType::F32] {
        let out = TensorMeta::new(to, vec![n as u32]).unwrap();
        let cast: Vec<_> = layers
            .iter()
            .map(|h| {
                let x = dev.upload_owned(&m, f32_bytes(h)).unwrap();
                dev.launch(&Op::Cast(to), &[(&x, &m)], &out).unwrap()
            })
            .collect();
        for (l, (y, h)) in cast.iter().zip(&layers).enumerate() {
            let got = CpuBuffer::from_le_bytes(to, &dev.download(y, &out).unwrap()).to_f32_vec();
            same(&got, h, &format!("layer {l} cast to {to}"));
        }
    }
}
