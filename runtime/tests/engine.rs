//! The engine end to end on the CPU device: real components, real wasmtime.
//!
//! Round trips of `echo` and `mlp`, one test per `misbehave` mode (each asserting the
//! error, that every tensor of the failed invocation is freed, and that the next
//! invocation succeeds), warm instances (kept after clean invocations only), batch
//! guests giving way at the epoch's ticks, and the rejection of files that are not
//! inference components.

mod common;

use std::time::Duration;

use common::{context, host, prepare};
use half::{bf16, f16};
use sluice_runtime::engine::{
    ArtifactSet, CallerLink, Cancel, ComponentError, Engine, EngineConfig, FunctionLimits, InvokeError, IoData,
    IoTensor,
};
use sluice_runtime::scheduler::PriorityClass;

fn tensor(name: &str, shape: &[u64], data: IoData) -> IoTensor {
    IoTensor { name: name.into(), shape: shape.to_vec(), data }
}

fn text(name: &str, s: &str) -> IoTensor {
    tensor(name, &[1], IoData::Bytes(vec![s.as_bytes().to_vec()]))
}

#[tokio::test]
async fn echo_round_trips_every_datatype() {
    let image = prepare("echo", FunctionLimits::default());
    let inputs = vec![
        tensor("a", &[2, 3], IoData::F32(vec![1.5, -2.0, 0.0, f32::MAX, f32::MIN_POSITIVE, 7.25])),
        tensor("b", &[2], IoData::F16(vec![f16::from_f32(0.5).to_bits(), f16::from_f32(-3.0).to_bits()])),
        tensor("c", &[1, 1], IoData::Bf16(vec![bf16::from_f32(1e10).to_bits()])),
        tensor("d", &[3], IoData::I32(vec![i32::MIN, 0, i32::MAX])),
        tensor("e", &[2], IoData::I64(vec![i64::MIN, 42])),
        tensor("f", &[0, 4], IoData::U8(vec![])),
        tensor("g", &[2], IoData::Bytes(vec![b"h\xc3\xa9".to_vec(), vec![0, 255]])),
        tensor("h", &[], IoData::F32(vec![3.0])),
    ];
    let (ctx, account) = context();
    let out = host().engine.invoke(&image, ctx, &inputs).await.expect("echo");
    assert_eq!(out.outputs, inputs);
    assert!(out.launches == 0, "echo launches no kernels, only uploads");
    assert_eq!(account.used(), 0, "all tensors freed after the invocation");
    assert!(account.peak() > 0);
}

/// The mlp's documented weights (see functions/mlp), recomputed independently.
fn mlp_weights() -> Vec<Vec<f64>> {
    let mut state: u64 = 42;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut draw = |count: usize, fan_in: f64| -> Vec<f64> {
        (0..count)
            .map(|_| {
                let u = (next() >> 11) as f64 * 2f64.powi(-53);
                ((2.0 * u - 1.0) / fan_in.sqrt()) as f32 as f64
            })
            .collect()
    };
    vec![draw(16 * 64, 16.0), draw(64, 16.0), draw(64 * 64, 64.0), draw(64, 64.0), draw(64 * 10, 64.0), draw(10, 64.0)]
}

fn dense(x: &[f64], w: &[f64], b: &[f64], fan_out: usize) -> Vec<f64> {
    (0..fan_out).map(|j| b[j] + x.iter().enumerate().map(|(i, xi)| xi * w[i * fan_out + j]).sum::<f64>()).collect()
}

fn mlp_reference(row: &[f64]) -> Vec<f64> {
    let w = mlp_weights();
    let h1: Vec<f64> = dense(row, &w[0], &w[1], 64).into_iter().map(|v| v.max(0.0)).collect();
    let h2: Vec<f64> =
        dense(&h1, &w[2], &w[3], 64).into_iter().map(|v| 0.5 * v * (1.0 + libm::erf(v / 2f64.sqrt()))).collect();
    let logits = dense(&h2, &w[4], &w[5], 10);
    let max = logits.iter().cloned().fold(f64::MIN, f64::max);
    let exps: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

#[tokio::test]
async fn mlp_matches_an_independent_reference() {
    let image = prepare("mlp", FunctionLimits::default());
    let n = 3;
    let x: Vec<f32> = (0..n * 16).map(|i| ((i * 37 % 23) as f32 - 11.0) / 4.0).collect();
    let (ctx, account) = context();
    let out =
        host().engine.invoke(&image, ctx, &[tensor("input", &[n as u64, 16], IoData::F32(x.clone()))]).await.unwrap();
    assert_eq!(out.outputs.len(), 1);
    let p = &out.outputs[0];
    assert_eq!((p.name.as_str(), p.shape.as_slice()), ("probabilities", &[n as u64, 10][..]));
    let IoData::F32(got) = &p.data else { panic!("FP32 expected, got {:?}", p.data) };
    for r in 0..n {
        let row: Vec<f64> = x[r * 16..(r + 1) * 16].iter().map(|&v| v as f64).collect();
        let want = mlp_reference(&row);
        for (g, w) in got[r * 10..(r + 1) * 10].iter().zip(&want) {
            assert!((*g as f64 - w).abs() < 1e-5, "row {r}: got {g}, want {w}");
        }
    }
    assert!(out.launches >= 9, "the mlp runs on the device ({} launches)", out.launches);
    assert_eq!(account.used(), 0);
}

#[tokio::test]
async fn mlp_rejects_a_wrong_shape_as_invalid_input() {
    let image = prepare("mlp", FunctionLimits::default());
    let (ctx, _) = context();
    let err =
        host().engine.invoke(&image, ctx, &[tensor("input", &[2, 15], IoData::F32(vec![0.0; 30]))]).await.unwrap_err();
    assert!(matches!(err, InvokeError::InvalidInput { .. }), "{err}");
}

/// Runs one misbehave mode, then checks the invocation's memory is back to zero and
/// that an `ok` invocation of the same image still succeeds.
async fn misbehave(mode: &str, limits: FunctionLimits) -> Result<Vec<IoTensor>, InvokeError> {
    let image = prepare("misbehave", limits);
    let (ctx, account) = context();
    let result = host().engine.invoke(&image, ctx, &[text("mode", mode)]).await;
    assert_eq!(account.used(), 0, "mode {mode}: every tensor of the invocation is freed");
    let (ctx, _) = context();
    let ok = host().engine.invoke(&image, ctx, &[text("mode", "ok")]).await.expect("the next invocation succeeds");
    assert_eq!(ok.outputs[0].data, IoData::Bytes(vec![b"ok".to_vec()]));
    result.map(|o| o.outputs)
}

#[tokio::test]
async fn misbehave_trap_fails_alone_with_the_panic_message() {
    let err = misbehave("trap", FunctionLimits::default()).await.unwrap_err();
    let InvokeError::Trapped { function, stderr, .. } = &err else { panic!("{err}") };
    assert_eq!(function, "misbehave");
    assert!(stderr.contains("trap requested"), "guest stderr is reported: {stderr:?}");
}

#[tokio::test]
async fn misbehave_loop_is_stopped_at_its_deadline() {
    let limits = FunctionLimits { timeout: Duration::from_millis(300), ..FunctionLimits::default() };
    let started = std::time::Instant::now();
    let err = misbehave("loop", limits).await.unwrap_err();
    assert!(matches!(err, InvokeError::Timeout { limit, .. } if limit == Duration::from_millis(300)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "stopped promptly: {:?}", started.elapsed());
    assert!(err.to_string().contains("time limit of 300 ms"), "{err}");
}

#[tokio::test]
async fn a_spinning_guest_is_stopped_when_its_caller_goes() {
    // A long time limit: only the caller's going can stop it first.
    let image = prepare("misbehave", FunctionLimits { timeout: Duration::from_secs(120), ..FunctionLimits::default() });
    let (mut ctx, account) = context();
    let cancel = Cancel::default();
    ctx.caller = CallerLink { sink: None, cancel: cancel.clone() };
    // Another thread: the guest spins on this one without yielding to the runtime.
    let raise = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        cancel.raise();
    });
    let err = host().engine.invoke(&image, ctx, &[text("mode", "loop")]).await.unwrap_err();
    raise.join().unwrap();
    assert!(matches!(err, InvokeError::Cancelled { .. }), "{err}");
    assert_eq!(err.code(), sluice_host_api::Code::Cancelled);
    assert_eq!(account.used(), 0);
}

#[tokio::test]
async fn misbehave_oom_hits_the_memory_cap() {
    let mut limits = FunctionLimits::default();
    limits.sandbox.memory_bytes = 32 << 20;
    let err = misbehave("oom", limits).await.unwrap_err();
    assert!(matches!(err, InvokeError::MemoryLimit { limit, .. } if limit == 32 << 20), "{err}");
}

#[tokio::test]
async fn misbehave_bad_shape_gets_a_typed_error_not_a_trap() {
    let err = misbehave("bad-shape", FunctionLimits::default()).await.unwrap_err();
    let InvokeError::Failed { message, .. } = &err else { panic!("{err}") };
    assert!(message.starts_with("shape-mismatch:"), "{message}");
}

#[tokio::test]
async fn misbehave_leak_frees_never_read_tensors() {
    let before = host().queue.status().await.resident_tensors;
    let out = misbehave("leak", FunctionLimits::default()).await.unwrap();
    assert_eq!(out[1].data, IoData::I64(vec![2000]));
    let after = host().queue.status().await;
    // Other tests may run concurrently on the shared device, but none keeps 2000 tensors.
    assert!(after.resident_tensors < before + 100, "{} tensors left resident", after.resident_tensors);
}

#[tokio::test]
async fn misbehave_huge_output_is_refused() {
    let mut limits = FunctionLimits::default();
    limits.sandbox.memory_bytes = 768 << 20;
    let err = misbehave("huge-output", limits).await.unwrap_err();
    assert!(matches!(err, InvokeError::TransferTooLarge { limit, .. } if limit == 65 << 20), "{err}");
    assert_eq!(err.code(), "transfer_too_large");
}

#[tokio::test]
async fn clean_invocations_reuse_a_warm_instance_and_failed_ones_are_discarded() {
    let image = prepare("misbehave", FunctionLimits::default());
    let run = |mode: &'static str| {
        let image = &image;
        async move {
            let (ctx, account) = context();
            let result = host().engine.invoke(image, ctx, &[text("mode", mode)]).await;
            assert_eq!(account.used(), 0, "mode {mode}: every tensor of the invocation is freed");
            result
        }
    };
    assert!(!run("ok").await.unwrap().warm, "the first invocation instantiates");
    assert_eq!(image.warm_instances(), 1, "a clean invocation leaves its instance warm");
    let second = run("ok").await.unwrap();
    assert!(second.warm, "the second invocation reuses it");
    assert_eq!(second.outputs[0].data, IoData::Bytes(vec![b"ok".to_vec()]));

    // A guest-reported error is a clean end: the instance stays.
    run("bad-shape").await.unwrap_err();
    assert_eq!(image.warm_instances(), 1);

    // A trap in a warm instance reports that invocation's stderr only, and the
    // instance is dropped.
    let err = run("trap").await.unwrap_err();
    let InvokeError::Trapped { stderr, .. } = &err else { panic!("{err}") };
    assert_eq!(stderr.matches("trap requested").count(), 1, "{stderr:?}");
    assert_eq!(image.warm_instances(), 0, "a trapped instance is not reused");
    assert!(!run("ok").await.unwrap().warm);

    // An instance that kept tensor handles is not reused (its store frees them).
    run("leak").await.unwrap();
    assert_eq!(image.warm_instances(), 0, "an instance holding tensors is not reused");
    assert!(!run("ok").await.unwrap().warm);
}

#[tokio::test]
async fn an_engine_without_warm_instances_instantiates_every_time() {
    let engine = Engine::new(EngineConfig { warm_instances_per_function: 0, ..EngineConfig::default() }).unwrap();
    let component = engine.compile(&common::component("misbehave")).unwrap();
    let image = engine.prepare("misbehave", &component, ArtifactSet::empty(), FunctionLimits::default()).unwrap();
    for _ in 0..3 {
        let (ctx, _) = context();
        assert!(!engine.invoke(&image, ctx, &[text("mode", "ok")]).await.unwrap().warm);
    }
    assert_eq!(image.warm_instances(), 0);
}

#[test]
fn files_that_are_not_inference_components_are_rejected() {
    let engine = &host().engine;
    let core_module = b"\0asm\x01\0\0\0";
    assert!(matches!(engine.precompile(core_module), Err(ComponentError::CoreModule)));
    assert!(matches!(engine.precompile(b"{\"not\": \"wasm\"}"), Err(ComponentError::NotWasm)));
    assert!(matches!(engine.precompile(b""), Err(ComponentError::NotWasm)));
    let truncated = &common::component("echo")[..1000];
    assert!(matches!(engine.precompile(truncated), Err(ComponentError::Invalid(_))));
    // A valid component of another world: the empty component exports no `run`.
    let empty_component = b"\0asm\x0d\0\x01\0";
    let err = engine.precompile(empty_component).unwrap_err();
    assert!(matches!(err, ComponentError::WrongWorld(_)), "{err}");
    assert!(err.to_string().contains("sluice:gpu/inference"), "{err}");
}

#[tokio::test]
async fn precompiled_components_load_without_compiling() {
    let engine = &host().engine;
    let compiled = engine.precompile(&common::component("echo")).unwrap();
    assert_eq!(compiled.host_api, Some(sluice_host_api::version::CURRENT.clone()), "the SDK builds against today's");
    let component = engine.deserialize(&compiled.bytes).unwrap();
    let image = engine
        .prepare("echo", &component, sluice_runtime::engine::ArtifactSet::empty(), FunctionLimits::default())
        .unwrap();
    let (ctx, _) = context();
    let input = tensor("x", &[1], IoData::I32(vec![5]));
    let out = engine.invoke(&image, ctx, std::slice::from_ref(&input)).await.unwrap();
    assert_eq!(out.outputs, vec![input]);
}

#[tokio::test]
async fn a_tenant_over_its_memory_quota_fails_alone() {
    use sluice_runtime::engine::InvocationContext;
    use sluice_runtime::scheduler::MemoryAccount;
    let image = prepare("mlp", FunctionLimits::default());
    let input = [tensor("input", &[4, 16], IoData::F32(vec![0.5; 64]))];
    // Tenant A may hold 8 KiB of device memory: less than the mlp's 16 KiB layer.
    let tenant_a = MemoryAccount::new("tenant \"a\"", Some(8 << 10), None);
    let tenant_b = MemoryAccount::new("tenant \"b\"", None, None);
    let ctx = |tenant: &std::sync::Arc<MemoryAccount>| InvocationContext {
        queue: host().queue.clone(),
        account: MemoryAccount::new("invocation", None, Some(tenant.clone())),
        scheduling: common::scheduling(),
        timeout: None,
        caller: Default::default(),
        serving: None,
    };
    let (a, b) = tokio::join!(
        host().engine.invoke(&image, ctx(&tenant_a), &input),
        host().engine.invoke(&image, ctx(&tenant_b), &input)
    );
    let err = a.unwrap_err();
    // Its own code (429 over HTTP), not `function_failed` (a 500) as before.
    let InvokeError::QuotaExceeded { message, .. } = &err else { panic!("{err}") };
    assert!(message.contains("quota") && message.contains("tenant \"a\""), "{message}");
    assert_eq!(err.code(), sluice_host_api::Code::QuotaExceeded);
    assert_eq!(b.expect("tenant b is unaffected").outputs[0].shape, vec![4, 10]);
    assert_eq!((tenant_a.used(), tenant_b.used()), (0, 0), "everything returned");
}

#[tokio::test]
async fn an_invocation_holding_too_many_tensor_handles_is_refused() {
    // Every tensor costs a handle, even one of zero bytes; misbehave's leak holds 2000.
    let engine = Engine::new(EngineConfig { max_live_tensors: 100, ..EngineConfig::default() }).unwrap();
    let component = engine.compile(&common::component("misbehave")).unwrap();
    let image = engine.prepare("misbehave", &component, ArtifactSet::empty(), FunctionLimits::default()).unwrap();
    let (ctx, account) = context();
    let err = engine.invoke(&image, ctx, &[text("mode", "leak")]).await.unwrap_err();
    let InvokeError::QuotaExceeded { message, .. } = &err else { panic!("{err}") };
    assert!(message.contains("100 tensor handles"), "{message}");
    assert_eq!(account.used(), 0, "everything returned");
    let (ctx, _) = context();
    engine.invoke(&image, ctx, &[text("mode", "ok")]).await.expect("the next invocation succeeds");
}

#[tokio::test]
async fn guest_cpu_time_is_measured_and_charged_to_the_tenant() {
    // `loop` computes in Wasm without host calls until its deadline.
    let limits = FunctionLimits { timeout: Duration::from_millis(200), ..FunctionLimits::default() };
    let image = prepare("misbehave", limits);
    // A first invocation leaves a warm instance, so the measured one starts computing
    // at once (its deadline counts from before instantiation).
    let (mut ctx, _) = context();
    ctx.scheduling.tenant = "cpu-burner-warm-up".into();
    host().engine.invoke(&image, ctx, &[text("mode", "ok")]).await.unwrap();
    let (mut ctx, _) = context();
    ctx.scheduling.tenant = "cpu-burner".into();
    let started = std::time::Instant::now();
    let err = host().engine.invoke(&image, ctx, &[text("mode", "loop")]).await.unwrap_err();
    let wall = started.elapsed();
    assert!(matches!(err, InvokeError::Timeout { .. }), "{err}");
    let status = host().queue.status().await;
    let burner = status.tenants.iter().find(|t| t.tenant == "cpu-burner").expect("the tenant is known");
    // Measured time, judged against the invocation's own wall clock (both stretch alike
    // on a busy machine): no more than it took, and most of it (only the set-up before
    // the guest's first instruction and the unwinding after its deadline are not its own).
    let charged = Duration::from_micros(burner.guest_cpu_us);
    assert!(charged <= wall, "{charged:?} charged in {wall:?}");
    assert!(charged >= wall / 2, "{charged:?} charged of an invocation of {wall:?}");
    assert_eq!(burner.kernels, 0, "charged without running a kernel");
}

#[tokio::test]
async fn gemm_burn_keeps_the_device_busy_for_the_requested_time() {
    let image = prepare("gemm_burn", FunctionLimits::default());
    let (ctx, _) = context();
    let inputs = [tensor("duration_ms", &[1], IoData::I64(vec![60])), tensor("size", &[1], IoData::I64(vec![64]))];
    let out = host().engine.invoke(&image, ctx, &inputs).await.unwrap();
    let IoData::I64(gemms) = &out.outputs[0].data else { panic!("{:?}", out.outputs) };
    let IoData::F32(ms) = &out.outputs[1].data else { panic!("{:?}", out.outputs) };
    assert!(gemms[0] >= 4 && gemms[0] % 4 == 0, "{gemms:?}");
    assert!(ms[0] >= 60.0 && ms[0] < 5000.0, "{ms:?}");
}

#[tokio::test]
async fn a_batch_guest_gives_way_at_each_tick_and_a_latency_guest_does_not() {
    // An engine of its own, so its count is this test's alone.
    let engine = Engine::new(EngineConfig::default()).unwrap();
    let component = engine.compile(&common::component("misbehave")).unwrap();
    let limits = FunctionLimits { timeout: Duration::from_millis(500), ..FunctionLimits::default() };
    let image = engine.prepare("misbehave", &component, ArtifactSet::empty(), limits).unwrap();
    let (ctx, _) = context();
    assert_eq!(ctx.scheduling.class, PriorityClass::Latency);
    let err = engine.invoke(&image, ctx, &[text("mode", "loop")]).await.unwrap_err();
    assert!(matches!(err, InvokeError::Timeout { .. }), "{err}");
    assert_eq!(engine.batch_guest_yields(), 0, "a latency guest keeps its core");

    let (mut ctx, _) = context();
    ctx.scheduling.class = PriorityClass::Batch;
    let err = engine.invoke(&image, ctx, &[text("mode", "loop")]).await.unwrap_err();
    assert!(matches!(err, InvokeError::Timeout { .. }), "{err}");
    // A tick every 250 µs for 500 ms: hundreds on an idle machine, fewer on a busy one.
    let yields = engine.batch_guest_yields();
    assert!(yields > 0, "the batch guest spinning in Wasm yielded at its ticks ({yields})");
}

#[test]
fn a_batch_guest_pauses_while_a_latency_guest_runs_and_its_caller_can_still_stop_it() {
    // Batch guests stay paused long after latency work ends, so that what this test sees
    // does not depend on how soon it looks.
    let config = EngineConfig { latency_linger: Duration::from_secs(600), ..EngineConfig::default() };
    let engine = Engine::new(config).unwrap();
    let component = engine.compile(&common::component("misbehave")).unwrap();
    let limits = FunctionLimits { timeout: Duration::from_secs(600), ..FunctionLimits::default() };
    let image = engine.prepare("misbehave", &component, ArtifactSet::empty(), limits).unwrap();
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }
    let cancel = Cancel::default();
    std::thread::scope(|s| {
        let batch = s.spawn(|| {
            let (mut ctx, _) = context();
            ctx.scheduling.class = PriorityClass::Batch;
            ctx.caller = CallerLink { sink: None, cancel: cancel.clone() };
            block_on(engine.invoke(&image, ctx, &[text("mode", "loop")]))
        });
        // It computes in Wasm: it yields at its ticks.
        while engine.batch_guest_yields() == 0 {
            std::thread::yield_now();
        }
        assert_eq!(engine.batch_guest_pauses(), 0, "no latency work yet");
        let (mut ctx, _) = context();
        ctx.timeout = Some(Duration::from_millis(50));
        let err = block_on(engine.invoke(&image, ctx, &[text("mode", "loop")])).unwrap_err();
        assert!(matches!(err, InvokeError::Timeout { .. }), "{err}");
        // It pauses at its next callback (at once, unless this machine kept it off its
        // core meanwhile), and does not compute on.
        let ended = engine.batch_guest_yields();
        while engine.batch_guest_pauses() == 0 {
            assert!(engine.batch_guest_yields() <= ended + 1, "the batch guest went on computing beside latency work");
            std::thread::yield_now();
        }
        assert_eq!(engine.batch_guest_pauses(), 1);
        // Paused, it still ends when its caller goes.
        cancel.raise();
        let err = batch.join().unwrap().unwrap_err();
        assert!(matches!(err, InvokeError::Cancelled { .. }), "{err}");
    });
}
