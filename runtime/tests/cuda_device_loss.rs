//! A lost GPU end to end (issue 11, defect 8), on the fake CUDA device: `cargo xtask
//! test-cuda-fake` runs this test alone in its process with
//! `SLUICE_FAKE_CUDA_FAIL_LAUNCH=3`, so the process's third kernel launch fails with an
//! illegal address, a sticky error that loses the device. The `mlp` invocation that
//! hits it fails with `device-failure`; the scheduler resets the GPU, and the next
//! invocations run on it and give the right answer; the GPU's scratch estimate is what
//! the queue charges. Skipped (and counted) elsewhere.

mod common;

#[path = "../../tests/src/skip.rs"]
mod skip;

use sluice_host_api::{Code, DType, Op, TensorMeta};
use sluice_runtime::device::cuda::CudaDevice;
use sluice_runtime::engine::{FunctionLimits, InvocationContext, IoData, IoTensor};
use sluice_runtime::scheduler::{DeviceHealth, DeviceQueue, MemoryAccount};

#[test]
fn an_invocation_that_loses_the_gpu_fails_and_the_next_ones_run() {
    if std::env::var("SLUICE_FAKE_CUDA").as_deref() != Ok("1")
        || std::env::var("SLUICE_FAKE_CUDA_FAIL_LAUNCH").as_deref() != Ok("3")
    {
        skip::skip("CUDA device loss", "runs on the fake CUDA device, alone (cargo xtask test-cuda-fake)");
        return;
    }
    let gpu = CudaDevice::open(sluice_backend_cuda::CudaOptions::default()).expect("the fake device opens");
    let queue = DeviceQueue::start(Box::new(gpu));
    let image = common::prepare("mlp", FunctionLimits::default());
    let input = [IoTensor { name: "input".into(), shape: vec![4, 16], data: IoData::F32(vec![0.5; 64]) }];
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let invoke = || {
        let ctx = InvocationContext {
            queue: queue.clone(),
            account: MemoryAccount::new("invocation", None, None),
            scheduling: common::scheduling(),
            timeout: None,
            caller: Default::default(),
            serving: None,
        };
        rt.block_on(common::host().engine.invoke(&image, ctx, &input))
    };
    // The reference: the same invocation on the CPU device.
    let want = {
        let (ctx, _) = common::context();
        rt.block_on(common::host().engine.invoke(&image, ctx, &input)).expect("on the CPU").outputs
    };

    // The guest gets the host's `device-failure` error and fails with it.
    let err = invoke().expect_err("the third launch loses the GPU");
    assert_eq!(err.code(), Code::FunctionFailed, "{err}");
    let message = err.to_string();
    assert!(message.contains("device lost") || message.contains("was reset"), "{message}");
    for _ in 0..2 {
        let got = invoke().expect("the GPU was reset and serves again").outputs;
        let (IoData::F32(got), IoData::F32(want)) = (&got[0].data, &want[0].data) else { panic!("f32 outputs") };
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-5), "{got:?} vs {want:?}");
    }
    // The GPU's exact scratch reaches the quota path: the queue charges attention's
    // scores and probabilities with its output.
    let q = TensorMeta::new(DType::F32, vec![1, 64, 32]).unwrap();
    let attention = Op::Attention { heads: 2, scale: 0.25 };
    let out = sluice_host_api::infer(&attention, &[&q, &q, &q]).unwrap();
    let scratch = queue.scratch_bytes(&attention, &[&q, &q, &q], &out);
    assert!(scratch >= 2 * 2 * 64 * 64 * 4, "{scratch}");
    assert_eq!(scratch, sluice_backend_cuda::scratch_bytes(&attention, &[&q, &q, &q], &out));
    let status = queue.status_blocking();
    assert_eq!((status.resets, status.health), (1, DeviceHealth::Healthy));
    assert!(status.last_reset.is_some_and(|r| r.contains("ILLEGAL_ADDRESS")));
}
