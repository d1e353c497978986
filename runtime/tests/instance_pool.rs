//! The pooling allocator's slots as tenants share them: a component over the
//! per-component limits (core instances, memories, tables) is refused before it is
//! compiled, with its own code; one tenant's warm instances stay within its cap and
//! leave room for another tenant's cold instantiation and hold no more linear memory
//! than its budget; idle warm instances are released
//! (the idle clock driven by the test); an instantiation that finds no free slot is
//! refused with a typed code instead of a trap.

mod common;

use std::time::{Duration, Instant};

use common::{component, context};
use sluice_host_api::Code;
use sluice_runtime::engine::{
    ArtifactSet, CallerLink, Cancel, Engine, EngineConfig, FunctionImage, FunctionLimits, InvokeError, IoData, IoTensor,
};
use wasmtime::component::Component;

fn text(name: &str, s: &str) -> IoTensor {
    IoTensor { name: name.into(), shape: vec![1], data: IoData::Bytes(vec![s.as_bytes().to_vec()]) }
}

/// A component instantiating `instances` times one core module that defines one memory
/// (if `memory`) and one table (if `table`). It implements no world: only the limits,
/// checked first, can refuse it with their code.
fn component_instantiating(instances: u32, memory: bool, table: bool) -> Vec<u8> {
    fn section(out: &mut Vec<u8>, id: u8, body: &[u8]) {
        out.push(id);
        leb(out, body.len() as u32);
        out.extend(body);
    }
    fn leb(out: &mut Vec<u8>, mut v: u32) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            out.push(if v == 0 { byte } else { byte | 0x80 });
            if v == 0 {
                return;
            }
        }
    }
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    if table {
        section(&mut module, 4, &[1, 0x70, 0, 1]);
    }
    if memory {
        section(&mut module, 5, &[1, 0, 1]);
    }
    let mut out = b"\0asm\x0d\0\x01\0".to_vec();
    section(&mut out, 1, &module);
    let mut body = Vec::new();
    leb(&mut body, instances);
    for _ in 0..instances {
        body.extend([0, 0, 0]); // instantiate module 0 with no arguments
    }
    section(&mut out, 2, &body);
    out
}

#[test]
fn a_component_over_the_per_component_limits_is_refused_at_deploy() {
    let engine = Engine::new(EngineConfig {
        max_core_instances_per_component: 8,
        max_memories_per_component: 2,
        max_tables_per_component: 4,
        ..EngineConfig::default()
    })
    .unwrap();
    let over = [
        ("9 core instances, more than the 8", component_instantiating(9, false, false)),
        ("3 linear memories, more than the 2", component_instantiating(3, true, false)),
        ("5 tables, more than the 4", component_instantiating(5, false, true)),
    ];
    for (what, wasm) in over {
        let err = engine.precompile(&wasm).unwrap_err();
        assert_eq!(err.code(), Code::ComponentLimitExceeded, "{what}: {err}");
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
    // At the limits, the same component is refused only for its world.
    let err = engine.precompile(&component_instantiating(2, true, true)).unwrap_err();
    assert_eq!(err.code(), Code::InvalidComponent, "{err}");
    // A Rust function fits the defaults (a Python one: the next test).
    let engine = Engine::new(EngineConfig::default()).unwrap();
    engine.compile(&component("echo")).unwrap();
}

fn prepare(engine: &Engine, tenant: &str, name: &str, component: &Component) -> FunctionImage {
    engine.prepare_for_tenant(tenant, name, component, ArtifactSet::empty(), FunctionLimits::default()).unwrap()
}

#[tokio::test]
async fn one_tenants_warm_instances_leave_room_for_another_tenants_cold_instantiation() {
    // A small pool: 4 component instances. A Python component has over a dozen core
    // instances; two kept warm took more than the pool's share of core-instance slots.
    let engine =
        Engine::new(EngineConfig { max_instances: 4, tenant_max_warm_instances: 1, ..EngineConfig::default() })
            .unwrap();
    let python = engine.compile(&component("echo_py")).unwrap();
    let hoarder: Vec<FunctionImage> = (0..3).map(|i| prepare(&engine, "hoarder", &format!("h{i}"), &python)).collect();
    for image in &hoarder {
        let (ctx, _) = context();
        engine.invoke(image, ctx, &[text("x", "hoard")]).await.unwrap();
    }
    let victim = prepare(&engine, "victim", "v", &python);
    let (ctx, _) = context();
    let out = engine.invoke(&victim, ctx, &[text("x", "hello")]).await;
    let out = out.unwrap_or_else(|e| panic!("the other tenant's cold instantiation failed: {e}"));
    assert!(!out.warm);
    let kept: usize = hoarder.iter().map(FunctionImage::warm_instances).sum();
    assert_eq!(kept, 1, "the hoarder keeps at most its cap of warm instances");
    let pool = engine.pool_status();
    assert_eq!((pool.warm_instances, pool.tenant_max_warm_instances), (2, 1), "{pool:?}");
    assert_eq!(engine.warm_instances_of("hoarder").0, 1);
    assert_eq!(engine.warm_instances_of("victim").0, 1);
}

#[tokio::test]
async fn a_tenants_warm_instances_hold_no_more_linear_memory_than_its_budget() {
    // How much linear memory one warm echo instance holds, on an engine with no budget.
    let probe =
        Engine::new(EngineConfig { tenant_max_warm_memory_bytes: usize::MAX, ..EngineConfig::default() }).unwrap();
    let echo = probe.compile(&component("echo")).unwrap();
    let (ctx, _) = context();
    let image = prepare(&probe, "t", "echo", &echo);
    probe.invoke(&image, ctx, &[text("x", "hi")]).await.unwrap();
    let (kept, one) = probe.warm_instances_of("t");
    assert_eq!(kept, 1);
    assert!(one > 0, "a warm echo instance holds its linear memory");

    // Room for one and a half of them per tenant: a tenant's second function's instance
    // is dropped when its invocation ends, and another tenant keeps its own.
    let engine =
        Engine::new(EngineConfig { tenant_max_warm_memory_bytes: one * 3 / 2, ..EngineConfig::default() }).unwrap();
    let echo = engine.compile(&component("echo")).unwrap();
    let images: Vec<FunctionImage> = [("t", "a"), ("t", "b"), ("u", "a")]
        .iter()
        .map(|&(tenant, name)| prepare(&engine, tenant, name, &echo))
        .collect();
    for image in &images {
        let (ctx, _) = context();
        engine.invoke(image, ctx, &[text("x", "hi")]).await.unwrap();
    }
    let kept: Vec<usize> = images.iter().map(FunctionImage::warm_instances).collect();
    assert_eq!(kept, [1, 0, 1], "the second instance of tenant t would take it past its budget");
    assert_eq!((engine.warm_instances_of("t"), engine.warm_instances_of("u")), ((1, one), (1, one)));
    let pool = engine.pool_status();
    assert_eq!((pool.warm_memory_bytes, pool.tenant_max_warm_memory_bytes), (2 * one as u64, (one * 3 / 2) as u64));
    // The dropped instance's slot is free: only the two warm ones hold memories.
    assert_eq!(pool.memories, 2, "{pool:?}");
    // Its function still runs, on a fresh instance each time.
    let (ctx, _) = context();
    assert!(!engine.invoke(&images[1], ctx, &[text("x", "hi")]).await.unwrap().warm);
}

#[tokio::test]
async fn idle_warm_instances_are_released() {
    let idle = Duration::from_secs(60);
    let engine = Engine::new(EngineConfig { warm_idle_timeout: idle, ..EngineConfig::default() }).unwrap();
    let image = prepare(&engine, "t", "echo", &engine.compile(&component("echo")).unwrap());
    let (ctx, _) = context();
    let used = Instant::now();
    engine.invoke(&image, ctx, &[text("x", "hi")]).await.unwrap();
    assert_eq!(image.warm_instances(), 1);
    // Not yet idle for long enough: kept. Then past the idle time: released.
    assert_eq!(engine.expire_idle_warm(used), 0);
    assert_eq!(image.warm_instances(), 1);
    let released = engine.expire_idle_warm(Instant::now() + idle);
    assert_eq!((released, image.warm_instances(), engine.pool_status().warm_instances), (1, 0, 0));
    assert_eq!(engine.pool_status().memories, 0, "its memory slot is free again");
    let (ctx, _) = context();
    assert!(!engine.invoke(&image, ctx, &[text("x", "hi")]).await.unwrap().warm);
}

#[test]
fn an_instantiation_without_a_free_slot_is_refused_with_a_typed_code() {
    // One component instance in the pool, held by a spinning guest.
    let engine = Engine::new(EngineConfig { max_instances: 1, ..EngineConfig::default() }).unwrap();
    let limits = FunctionLimits { timeout: Duration::from_secs(120), ..FunctionLimits::default() };
    let c = engine.compile(&component("misbehave")).unwrap();
    let image = engine.prepare("misbehave", &c, ArtifactSet::empty(), limits).unwrap();
    let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let cancel = Cancel::default();
    std::thread::scope(|s| {
        let spinner = s.spawn(|| {
            let (mut ctx, _) = context();
            ctx.caller = CallerLink { sink: None, cancel: cancel.clone() };
            runtime().block_on(engine.invoke(&image, ctx, &[text("mode", "loop")]))
        });
        // The spinner loops until cancelled: once it holds its slot, it keeps it.
        while engine.pool_status().component_instances == 0 {
            assert!(!spinner.is_finished(), "the spinning guest ended before it was seen");
            std::thread::sleep(Duration::from_millis(5));
        }
        let (ctx, _) = context();
        let err = runtime().block_on(engine.invoke(&image, ctx, &[text("mode", "ok")])).unwrap_err();
        cancel.raise();
        assert!(matches!(err, InvokeError::NoInstanceSlot { .. }), "{err}");
        assert_eq!(err.code(), Code::InstancePoolExhausted);
        assert_eq!(err.code().status(), 503);
        assert!(matches!(spinner.join().unwrap(), Err(InvokeError::Cancelled { .. })));
    });
}
