//! Helpers shared by the runtime's integration tests: one engine and CPU device per
//! test binary, and the example function components built by `cargo xtask build-functions`.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use sluice_runtime::device::CpuDevice;
use sluice_runtime::engine::{ArtifactSet, Engine, EngineConfig, FunctionImage, FunctionLimits, InvocationContext};
use sluice_runtime::scheduler::{DeviceQueue, MemoryAccount, PriorityClass, SchedulingInfo};

/// Where `cargo xtask build-functions` leaves the components.
pub fn functions_dir() -> PathBuf {
    std::env::var_os("SLUICE_FUNCTIONS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../functions/target/wasm32-wasip2/release"))
}

/// The bytes of function `name` (crate name with underscores), or a panic that says
/// how to build it.
pub fn component(name: &str) -> Vec<u8> {
    let path = functions_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e}; build the example functions first with `cargo xtask build-functions`", path.display())
    })
}

pub struct Host {
    pub engine: Engine,
    pub queue: DeviceQueue,
}

/// The engine and CPU device shared by every test of the binary.
pub fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| Host {
        engine: Engine::new(EngineConfig::default()).expect("engine"),
        queue: DeviceQueue::start(Box::new(CpuDevice::new())),
    })
}

/// Compiles and prepares function `name` with default limits and no artifacts.
pub fn prepare(name: &str, limits: FunctionLimits) -> FunctionImage {
    let h = host();
    let component = h.engine.compile(&component(name)).expect("compile");
    h.engine.prepare(name, &component, ArtifactSet::empty(), limits).expect("prepare")
}

/// A context charging a fresh account (returned too, to check it drains to zero).
pub fn context() -> (InvocationContext, Arc<MemoryAccount>) {
    let account = MemoryAccount::new("test invocation", None, None);
    (
        InvocationContext {
            queue: host().queue.clone(),
            account: account.clone(),
            scheduling: scheduling(),
            timeout: None,
            caller: Default::default(),
            serving: None,
        },
        account,
    )
}

/// Scheduling of a test invocation: one tenant, latency class.
pub fn scheduling() -> SchedulingInfo {
    SchedulingInfo { tenant: "test".into(), function: "f".into(), class: PriorityClass::Latency, weight: 1 }
}
