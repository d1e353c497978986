//! Scratch memory is charged end to end (issue 11, defect 5): what an op takes besides
//! its output while it runs (attention scores, a broadcast copy, an im2col buffer, as
//! the device estimates it: `Device::scratch`) is reserved with the output in the
//! invocation's account, the tenant's and the device's, so an op whose output and
//! scratch pass the quota fails with `quota_exceeded`, and the scratch comes back once
//! the op has run. Before, only the output was charged: the same ops ran past the quota.
//! (`runtime/tests/isolation.rs` checks the reservation is held until the kernel ran.)

mod common;

use std::sync::Arc;

use sluice_host_api::{Code, DType, ErrorCode, Op, TensorMeta};
use sluice_runtime::device::CpuDevice;
use sluice_runtime::device::sim::SimDevice;
use sluice_runtime::engine::{FunctionLimits, InvocationContext, InvokeError, IoData, IoTensor};
use sluice_runtime::scheduler::{Clock, DeviceQueue, MemoryAccount, Reservation, SchedulerConfig, TensorLease};

#[test]
fn an_attention_whose_scores_pass_the_remaining_quota_is_refused() {
    let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(1)));
    let x = TensorMeta::new(DType::F32, vec![1, 256, 32]).unwrap();
    let op = Op::Attention { heads: 1, scale: 0.125 };
    let out = sluice_host_api::infer(&op, &[&x, &x, &x]).unwrap();
    // One thread: at most one 256 × 256 block of f32 scores, for a 32 KiB output.
    let scratch = queue.scratch_bytes(&op, &[&x, &x, &x], &out);
    assert_eq!(scratch, 256 << 10);
    // q, k and v are held; 48 KiB remain: room for the output, not for its scores.
    let account = MemoryAccount::new("tenant \"a\"", Some(3 * (32 << 10) + (48 << 10)), None);
    let inputs: Vec<TensorLease> = (0..3).map(|_| TensorLease::reserve(&queue, &account, &x).unwrap()).collect();
    let output = TensorLease::reserve(&queue, &account, &out).expect("the output alone fits, as before");
    let used = account.used();
    let e = Reservation::new(&account, queue.memory(), scratch).expect_err("the scores do not fit");
    assert_eq!(e.code, ErrorCode::QuotaExceeded);
    assert!(e.message.contains("tenant \"a\""), "{}", e.message);
    assert_eq!((account.used(), queue.memory().used()), (used, used), "a refusal changes nothing");
    drop((inputs, output));
    assert_eq!((account.used(), queue.memory().used()), (0, 0));
}

/// The mlp on a simulated device whose matmuls each take 1 MiB of scratch.
fn mlp_on_scratch_hungry_device(quota: Option<u64>) -> (Result<Vec<IoTensor>, InvokeError>, Arc<MemoryAccount>) {
    let clock = Clock::simulated();
    let device = SimDevice::builder(clock.clone())
        .scratch(|op, _, _, _| if matches!(op, Op::Matmul(_)) { 1 << 20 } else { 0 })
        .build();
    let queue = DeviceQueue::start_with(Box::new(device), SchedulerConfig { clock, ..Default::default() });
    let tenant = MemoryAccount::new("tenant \"a\"", quota, None);
    let ctx = InvocationContext {
        queue,
        account: MemoryAccount::new("invocation", None, Some(tenant.clone())),
        scheduling: common::scheduling(),
        timeout: None,
        caller: Default::default(),
        serving: None,
    };
    let image = common::prepare("mlp", FunctionLimits::default());
    let input = [IoTensor { name: "input".into(), shape: vec![4, 16], data: IoData::F32(vec![0.5; 64]) }];
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    (rt.block_on(common::host().engine.invoke(&image, ctx, &input)).map(|o| o.outputs), tenant)
}

#[test]
fn an_invocation_whose_ops_scratch_passes_its_quota_fails_with_quota_exceeded() {
    // 256 KiB: far more than the mlp's tensors (a few KiB), less than one matmul's scratch.
    let (result, tenant) = mlp_on_scratch_hungry_device(Some(256 << 10));
    let err = result.expect_err("before, the scratch was not charged and the mlp ran");
    let InvokeError::QuotaExceeded { message, .. } = &err else { panic!("{err}") };
    assert!(message.contains("scratch memory of matmul") && message.contains("tenant \"a\""), "{message}");
    assert_eq!(err.code(), Code::QuotaExceeded);
    assert_eq!(tenant.used(), 0, "everything returned");
    // With room for it, the scratch is charged while each matmul runs, then returned.
    let (result, tenant) = mlp_on_scratch_hungry_device(None);
    assert_eq!(result.expect("fits").first().map(|t| t.shape.clone()), Some(vec![4, 10]));
    assert!(tenant.peak() >= 1 << 20, "peak {}", tenant.peak());
    assert_eq!(tenant.used(), 0);
}
