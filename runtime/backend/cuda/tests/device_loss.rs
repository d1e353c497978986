//! A device lost to a sticky error, and its recovery (issue 11, defect 8), on the fake
//! CUDA device: the n-th launch from now fails with an illegal address
//! (`sluice_fake_fail_launch`), which poisons the device as on a GPU.
//!
//! Its own test binary: the poisoned device is process-wide state, so nothing else may
//! run in this process meanwhile (one test only). Runs only on the fake
//! (`SLUICE_FAKE_CUDA=1`, as `cargo xtask test-cuda-fake` sets up); anywhere else it
//! records a skip and passes.

use sluice_backend_cpu::CpuBuffer;
use sluice_backend_cuda::{CudaBuffer, CudaDevice, CudaOptions, Lane};
use sluice_host_api::{DType, Op, TensorMeta, UnaryOp};

#[path = "../../../../tests/src/skip.rs"]
mod skip;

/// Makes the `n`-th kernel launch from now fail with an illegal address (fake hook).
fn fail_launch(n: u64) {
    // SAFETY: the fake libcuda exports this hook with this signature; the driver is loaded.
    unsafe {
        let f = cudarc::driver::sys::culib()
            .get::<unsafe extern "C" fn(u64)>(b"sluice_fake_fail_launch")
            .expect("the fake libcuda has sluice_fake_fail_launch");
        f(n);
    }
}

fn upload(dev: &CudaDevice, m: &TensorMeta, v: &[f32]) -> CudaBuffer {
    dev.upload(m, &CpuBuffer::from_f32_as(DType::F32, v).to_le_bytes()).expect("upload")
}

/// relu(x) on the device, read back.
fn relu(dev: &CudaDevice, x: &CudaBuffer, m: &TensorMeta) -> Result<Vec<f32>, sluice_backend_cuda::CudaError> {
    let y = dev.launch(&Op::Unary(UnaryOp::Relu), &[(x, m)], m)?;
    let bytes = dev.download(&y, m)?;
    Ok(CpuBuffer::from_le_bytes(DType::F32, &bytes).to_f32_vec())
}

#[test]
fn a_sticky_error_is_reported_as_a_lost_device_which_recovers() {
    if std::env::var("SLUICE_FAKE_CUDA").as_deref() != Ok("1")
        || sluice_backend_cuda::probe::libraries().check().is_err()
    {
        skip::skip("CUDA device loss", "runs on the fake CUDA device only (cargo xtask test-cuda-fake)");
        return;
    }
    let opts = CudaOptions { reserved_sms: 16, ..Default::default() };
    let dev = CudaDevice::open(opts).expect("the fake device opens");
    let m = TensorMeta::new(DType::F32, vec![4, 8]).unwrap();
    let h: Vec<f32> = (0..32).map(|i| i as f32 - 15.5).collect();
    let want: Vec<f32> = h.iter().map(|v| v.max(0.0)).collect();
    let resident = upload(&dev, &m, &h);
    assert_eq!(relu(&dev, &resident, &m).unwrap(), want, "before the fault");
    // A large upload through the stager thread, held across the loss.
    let big_meta =
        TensorMeta::new(DType::F32, vec![(sluice_backend_cuda::staging::STAGED_MIN / 4 + 1) as u32]).unwrap();
    let staged = dev.upload_owned(&big_meta, vec![0u8; big_meta.byte_len()]).expect("a staged upload");
    assert!(dev.lost().is_none());

    // The fault: reported as a lost device, with the driver's reason.
    fail_launch(1);
    let err = relu(&dev, &resident, &m).expect_err("the poisoned launch fails");
    let err = dev.classify(err);
    assert!(err.is_lost(), "{err}");
    assert!(err.to_string().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{err}");
    // Every later call fails the same way, on every lane: the context is poisoned.
    assert!(dev.lost().is_some_and(|e| e.is_lost()));
    dev.set_lane(Lane::Reserved);
    let later = relu(&dev, &resident, &m).map(|_| ()).map_err(|e| dev.classify(e));
    assert!(later.as_ref().is_err_and(|e| e.is_lost()), "{later:?}");

    // Recovery: a fresh device (partition included); the old one stays lost.
    let new = dev.recover().expect("the device recovers");
    assert!(new.lost().is_none() && dev.lost().is_some());
    assert!(new.partition().is_active(), "{}", new.partition());
    // A buffer of the lost device is refused with a clear error, never read.
    let stale = new.launch(&Op::Unary(UnaryOp::Relu), &[(&resident, &m)], &m).expect_err("a lost buffer");
    assert!(stale.to_string().contains("another device"), "{stale}");
    // Resident data uploaded again serves as before, on every lane.
    let resident_again = upload(&new, &m, &h);
    for lane in Lane::ALL {
        new.set_lane(lane);
        assert_eq!(relu(&new, &resident_again, &m).unwrap(), want, "after the reset, lane {lane:?}");
    }
    new.set_lane(Lane::Whole);
    // Dropping the lost device and its buffers hands no dead handle to the driver: the
    // new device's memory and streams are untouched.
    let kept = upload(&new, &m, &h);
    drop((resident, staged, dev));
    assert_eq!(relu(&new, &kept, &m).unwrap(), want, "after the lost device was dropped");
    new.synchronize().unwrap();
}
