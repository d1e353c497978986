//! Scratch memory is charged (issue 11, defect 5): what an op takes besides its output
//! while it runs (attention scores, a broadcast copy, an im2col buffer) is reserved in
//! the invocation's account, the tenant's and the device's with the output, so an op
//! whose output and scratch pass the quota fails at once with `quota_exceeded`, and the
//! scratch comes back once the op has run. Before, only the output was charged: the
//! same ops succeeded past the quota.

mod common;

use std::sync::Arc;

use sluice_host_api::{Code, DType, ErrorCode, Op, TensorMeta};
use sluice_runtime::device::CpuDevice;
use sluice_runtime::device::sim::SimDevice;
use sluice_runtime::engine::{FunctionLimits, InvocationContext, InvokeError, IoData, IoTensor};
use sluice_runtime::scheduler::{Clock, DeviceQueue, MemoryAccount, SchedulerConfig, ScratchCharge, TensorLease};

fn meta(shape: &[u32]) -> TensorMeta {
    TensorMeta::new(DType::F32, shape.to_vec()).unwrap()
}

#[test]
fn an_attention_whose_scores_pass_the_remaining_quota_is_refused() {
    // One thread: one 64-row tile of scores over 256 keys, 64 KiB, for a 32 KiB output.
    let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(1)));
    let (x, op) = (meta(&[1, 256, 32]), Op::Attention { heads: 1, scale: 0.125 });
    let out = sluice_host_api::infer(&op, &[&x, &x, &x]).unwrap();
    assert_eq!(queue.scratch_bytes(&op, &[&x, &x, &x], &out), 64 << 10);
    // q, k and v are held; 48 KiB remain: room for the output, not for its scores.
    let account = MemoryAccount::new("tenant \"a\"", Some(3 * 32 * 1024 + (48 << 10)), None);
    let inputs: Vec<TensorLease> = (0..3).map(|_| TensorLease::reserve(&queue, &account, &x).unwrap()).collect();
    let output = TensorLease::reserve(&queue, &account, &out).expect("the output alone fits, as before");
    let used = account.used();
    let e = ScratchCharge::reserve(&queue, &account, &op, &[&x, &x, &x], &out).err().expect("the scores do not fit");
    assert_eq!(e.code, ErrorCode::QuotaExceeded);
    assert!(e.message.contains("tenant \"a\"") && e.message.contains("scratch"), "{}", e.message);
    assert_eq!(account.used(), used, "a refusal changes nothing");
    drop((inputs, output));
    assert_eq!((account.used(), queue.memory().used()), (0, 0));
}

#[test]
fn scratch_is_held_while_the_op_is_queued_and_returned_once_it_ran() {
    let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(1)));
    let (x, op) = (meta(&[1, 256, 32]), Op::Attention { heads: 1, scale: 0.125 });
    let out = sluice_host_api::infer(&op, &[&x, &x, &x]).unwrap();
    let account = MemoryAccount::new("invocation", None, None);
    let inv = queue.begin(common::scheduling());
    let input = TensorLease::reserve(&queue, &account, &x).unwrap();
    queue.upload(inv.id(), input.id(), x.clone(), vec![0; x.byte_len()]);
    let output = TensorLease::reserve(&queue, &account, &out).unwrap();
    let scratch = ScratchCharge::reserve(&queue, &account, &op, &[&x, &x, &x], &out).unwrap().expect("scores");
    assert_eq!(scratch.bytes(), 64 << 10);
    assert_eq!(queue.memory().used(), (32 << 10) * 2 + (64 << 10), "the device's account holds it too");
    let inputs = vec![(input.id(), x.clone()); 3];
    queue.launch_charged(inv.id(), output.id(), op, inputs, out.clone(), Some(scratch));
    let got = queue.read_blocking(output.id(), out).unwrap();
    assert_eq!(got.len(), 32 << 10);
    assert_eq!(account.used(), (32 << 10) * 2, "the scratch came back once the op ran");
    assert_eq!(account.peak(), (32 << 10) * 2 + (64 << 10));
}

/// The mlp on a simulated device whose matmuls each take 1 MiB of scratch.
fn mlp_on_scratch_hungry_device(quota: Option<u64>) -> (Result<Vec<IoTensor>, InvokeError>, Arc<MemoryAccount>) {
    let clock = Clock::simulated();
    let device = SimDevice::builder(clock.clone())
        .scratch(|op, _, _| if matches!(op, Op::Matmul(_)) { 1 << 20 } else { 0 })
        .build();
    let queue = DeviceQueue::start_with(Box::new(device), SchedulerConfig { clock, ..Default::default() });
    let tenant = MemoryAccount::new("tenant \"a\"", quota, None);
    let ctx = InvocationContext {
        queue,
        account: MemoryAccount::new("invocation", None, Some(tenant.clone())),
        scheduling: common::scheduling(),
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
    assert!(message.contains("scratch") && message.contains("matmul"), "{message}");
    assert_eq!(err.code(), Code::QuotaExceeded);
    assert_eq!(tenant.used(), 0, "everything returned");
    // With room for it, the scratch is charged while each matmul runs, then returned.
    let (result, tenant) = mlp_on_scratch_hungry_device(None);
    assert_eq!(result.expect("fits").first().map(|t| t.shape.clone()), Some(vec![4, 10]));
    assert!(tenant.peak() >= 1 << 20, "peak {}", tenant.peak());
    assert_eq!(tenant.used(), 0);
}
