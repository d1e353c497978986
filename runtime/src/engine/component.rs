//! Loading components: the per-component limits ([`super::footprint`]), the host API
//! version ([`super::host_api`]), validation against the `inference` world,
//! precompilation and pre-instantiation into a [`FunctionImage`].

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Component;

use super::Engine;
use super::artifacts::ArtifactSet;
use super::bindings::InferencePre;
use super::component_error::ComponentError;
use super::footprint::Footprint;
use super::host_api::HostApiUse;
use super::state::SandboxLimits;
use super::warm::WarmPool;

const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
const MODULE_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

pub(super) fn compile(engine: &Engine, wasm: &[u8]) -> Result<(Component, HostApiUse), ComponentError> {
    match wasm.get(..8) {
        Some(h) if h == COMPONENT_HEADER => {}
        Some(h) if h == MODULE_HEADER => return Err(ComponentError::CoreModule),
        _ => return Err(ComponentError::NotWasm),
    }
    // Before compiling: a component over the limits, or of a host API version this host
    // does not offer, costs no compilation.
    Footprint::of(wasm)?.check(engine.config())?;
    let used = HostApiUse::of(wasm)?;
    let wasm = used.renamed(wasm);
    // On background threads: a tenant's deploy must not take a core from another's invocations.
    let component = crate::background::compile_in_background(|| Component::new(engine.wasmtime(), &wasm))
        .map_err(|e| ComponentError::Invalid(format!("{e:#}")))?;
    Ok((component, used))
}

/// A component validated and compiled by [`Engine::precompile`].
#[derive(Debug)]
pub struct Precompiled {
    /// Its compiled form, for [`Engine::deserialize`].
    pub bytes: Vec<u8>,
    /// The newest host API version it was built against (`None`: it imports nothing
    /// of the host API).
    pub host_api: Option<semver::Version>,
}

/// Limits of one function's invocations.
#[derive(Clone, Debug)]
pub struct FunctionLimits {
    /// Wall-clock limit of one invocation.
    pub timeout: Duration,
    /// Sandbox limits (linear memory, read sizes).
    pub sandbox: SandboxLimits,
    /// Largest total size of the outputs of one invocation.
    pub max_output_bytes: usize,
}

impl Default for FunctionLimits {
    fn default() -> Self {
        FunctionLimits {
            timeout: Duration::from_secs(30),
            sandbox: SandboxLimits {
                memory_bytes: 256 << 20,
                max_read_bytes: 256 << 20,
                max_artifact_read_bytes: 64 << 20,
            },
            max_output_bytes: 64 << 20,
        }
    }
}

/// A function ready to run: validated, compiled and pre-instantiated, with its
/// artifacts bound to a device.
pub struct FunctionImage {
    pub(super) name: String,
    pub(super) pre: InferencePre<super::state::InvocationState>,
    pub(super) artifacts: Arc<ArtifactSet>,
    pub(super) limits: FunctionLimits,
    pub(super) warm: Arc<WarmPool>,
    /// Whether it imports the `requests` interface (a serving function does).
    pub(super) imports_requests: bool,
}

impl FunctionImage {
    /// The function's name, used in error messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its artifacts and shared weights.
    pub fn artifacts(&self) -> &Arc<ArtifactSet> {
        &self.artifacts
    }

    /// Instances kept warm for its next invocations.
    pub fn warm_instances(&self) -> usize {
        self.warm.len()
    }

    /// Whether it can be a serving function: it imports `sluice:gpu/requests` (a
    /// serving function also declares itself one, `super::declares_serving`).
    pub fn imports_requests(&self) -> bool {
        self.imports_requests
    }

    /// Its time limit.
    pub fn timeout(&self) -> Duration {
        self.limits.timeout
    }
}

/// Whether `component` imports the `requests` interface (any version).
fn imports_requests(engine: &wasmtime::Engine, component: &Component) -> bool {
    component
        .component_type()
        .imports(engine)
        .any(|(name, _)| name.split_once('@').map_or(name, |(interface, _version)| interface) == "sluice:gpu/requests")
}

impl Engine {
    /// Validates `wasm` and returns its precompiled form, to be stored and later
    /// loaded with [`Engine::deserialize`] without compiling again.
    pub fn precompile(&self, wasm: &[u8]) -> Result<Precompiled, ComponentError> {
        let (component, used) = compile(self, wasm)?;
        if let Err(e) = self.check_world(&component) {
            // A component of a newer minor version fails here when it uses what this
            // host lacks: say so, naming the version, rather than the missing item alone.
            return Err(match used.newer_than_host(&e.to_string()) {
                Some(import) => ComponentError::HostApi(format!(
                    "the component was built against {import}, newer than this server's {}, and uses what it lacks ({e}); this server offers {}",
                    sluice_host_api::version::CURRENT,
                    sluice_host_api::version::offered()
                )),
                None => e,
            });
        }
        let bytes = component.serialize().map_err(|e| ComponentError::Invalid(format!("{e:#}")))?;
        Ok(Precompiled { bytes, host_api: used.version().cloned() })
    }

    /// Loads a component precompiled by [`Engine::precompile`] of an engine with
    /// the same [`Engine::fingerprint`].
    ///
    /// The bytes must come from the runtime's own store: wasmtime trusts them as
    /// native code. The registry keeps them content-addressed, so they are only
    /// ever what `precompile` wrote.
    pub fn deserialize(&self, compiled: &[u8]) -> Result<Component, ComponentError> {
        // SAFETY: `compiled` is output of `Component::serialize` by an engine with
        // the same compatibility hash (checked by wasmtime, and by the fingerprint
        // the registry stores), read back from the runtime's own blob store.
        unsafe { Component::deserialize(self.wasmtime(), compiled) }
            .map_err(|e| ComponentError::Invalid(format!("{e:#}")))
    }

    fn check_world(
        &self,
        component: &Component,
    ) -> Result<InferencePre<super::state::InvocationState>, ComponentError> {
        let pre = self.linker().instantiate_pre(component).map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))?;
        InferencePre::new(pre).map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))
    }

    /// [`Engine::prepare`] for a function of `tenant`, whose warm instances count
    /// against the tenant's cap ([`super::EngineConfig::tenant_max_warm_instances`]).
    pub fn prepare_for_tenant(
        &self,
        tenant: &str,
        name: impl Into<String>,
        component: &Component,
        artifacts: Arc<ArtifactSet>,
        limits: FunctionLimits,
    ) -> Result<FunctionImage, ComponentError> {
        self.prepare_image(Some(tenant), name.into(), component, artifacts, limits)
    }

    /// Checks `component` against the world and pre-instantiates it (its warm
    /// instances count against the engine's cap and its own only).
    pub fn prepare(
        &self,
        name: impl Into<String>,
        component: &Component,
        artifacts: Arc<ArtifactSet>,
        limits: FunctionLimits,
    ) -> Result<FunctionImage, ComponentError> {
        self.prepare_image(None, name.into(), component, artifacts, limits)
    }

    fn prepare_image(
        &self,
        tenant: Option<&str>,
        name: String,
        component: &Component,
        artifacts: Arc<ArtifactSet>,
        mut limits: FunctionLimits,
    ) -> Result<FunctionImage, ComponentError> {
        let pre = self.check_world(component)?;
        limits.sandbox.memory_bytes = limits.sandbox.memory_bytes.min(self.config().max_memory_bytes);
        let warm = WarmPool::new(self.config().warm_instances_per_function, &self.warm, tenant);
        let imports_requests = imports_requests(self.wasmtime(), component);
        Ok(FunctionImage { name, pre, artifacts, limits, warm, imports_requests })
    }
}
