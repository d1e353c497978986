//! What one instance of a component takes from the instance pool: its core-module
//! instances, and the linear memories and tables those define, counted from the binary
//! before it is compiled, and checked against the per-component limits at deploy.
//!
//! The count follows the component's instantiations as wasmtime flattens them: each
//! core `instantiate` of a module counts one core instance plus the module's defined
//! (not imported) memories and tables; each component `instantiate` counts what that
//! component's own instantiations count, nested components included. A module or
//! component the binary does not define (an import, an instance's export) counts
//! nothing here: such a component cannot be linked by sluice, and the pool's own
//! per-component limits ([`super::pool`]) stay as a backstop.

use wasmparser::{
    ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind, ComponentTypeRef, Encoding,
    Instance, Parser, Payload,
};

use super::EngineConfig;
use super::component_error::ComponentError;

/// Slots of the instance pool one instance takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    pub core_instances: u64,
    pub memories: u64,
    pub tables: u64,
}

impl Footprint {
    fn add(&mut self, other: Footprint) {
        self.core_instances = self.core_instances.saturating_add(other.core_instances);
        self.memories = self.memories.saturating_add(other.memories);
        self.tables = self.tables.saturating_add(other.tables);
    }

    /// The footprint of the component `wasm`.
    pub fn of(wasm: &[u8]) -> Result<Footprint, ComponentError> {
        let mut scopes: Vec<Scope> = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            let payload = payload.map_err(|e| ComponentError::Invalid(e.to_string()))?;
            let invalid = |e: wasmparser::BinaryReaderError| ComponentError::Invalid(e.to_string());
            match payload {
                Payload::Version { encoding, .. } => scopes.push(match encoding {
                    Encoding::Module => Scope::Module(Footprint { core_instances: 1, ..Footprint::default() }),
                    Encoding::Component => Scope::Component(Component::default()),
                }),
                Payload::MemorySection(s) => {
                    if let Some(Scope::Module(m)) = scopes.last_mut() {
                        m.memories += u64::from(s.count());
                    }
                }
                Payload::TableSection(s) => {
                    if let Some(Scope::Module(m)) = scopes.last_mut() {
                        m.tables += u64::from(s.count());
                    }
                }
                Payload::InstanceSection(s) => {
                    let c = component(&mut scopes)?;
                    for instance in s {
                        if let Instance::Instantiate { module_index, .. } = instance.map_err(invalid)? {
                            let module = c.modules.get(module_index as usize).copied();
                            c.total.add(module.unwrap_or(Footprint { core_instances: 1, ..Footprint::default() }));
                        }
                    }
                }
                Payload::ComponentInstanceSection(s) => {
                    let c = component(&mut scopes)?;
                    for instance in s {
                        if let ComponentInstance::Instantiate { component_index, .. } = instance.map_err(invalid)? {
                            let nested = c.components.get(component_index as usize).copied();
                            c.total.add(nested.unwrap_or_default());
                        }
                    }
                }
                Payload::ComponentAliasSection(s) => {
                    for alias in s {
                        let alias = alias.map_err(invalid)?;
                        let (outer, kind) = match alias {
                            ComponentAlias::Outer { kind, count, index } => {
                                // `count` 0 is the component being read, the innermost scope.
                                let depth = scopes.len().checked_sub(1 + count as usize);
                                let from = depth.and_then(|d| scopes.get(d)).and_then(Scope::as_component);
                                let found = from.and_then(|f| match kind {
                                    ComponentOuterAliasKind::CoreModule => f.modules.get(index as usize).copied(),
                                    ComponentOuterAliasKind::Component => f.components.get(index as usize).copied(),
                                    _ => None,
                                });
                                (found.unwrap_or_default(), Some(kind))
                            }
                            ComponentAlias::InstanceExport { kind: ComponentExternalKind::Module, .. } => {
                                (Footprint::default(), Some(ComponentOuterAliasKind::CoreModule))
                            }
                            ComponentAlias::InstanceExport { kind: ComponentExternalKind::Component, .. } => {
                                (Footprint::default(), Some(ComponentOuterAliasKind::Component))
                            }
                            _ => (Footprint::default(), None),
                        };
                        let c = component(&mut scopes)?;
                        match kind {
                            Some(ComponentOuterAliasKind::CoreModule) => c.modules.push(outer),
                            Some(ComponentOuterAliasKind::Component) => c.components.push(outer),
                            _ => {}
                        }
                    }
                }
                Payload::ComponentImportSection(s) => {
                    let c = component(&mut scopes)?;
                    for import in s {
                        match import.map_err(invalid)?.ty {
                            ComponentTypeRef::Module(_) => c.modules.push(Footprint::default()),
                            ComponentTypeRef::Component(_) => c.components.push(Footprint::default()),
                            _ => {}
                        }
                    }
                }
                Payload::ComponentExportSection(s) => {
                    let c = component(&mut scopes)?;
                    for export in s {
                        let export = export.map_err(invalid)?;
                        let index = export.index as usize;
                        match export.kind {
                            ComponentExternalKind::Module => {
                                c.modules.push(c.modules.get(index).copied().unwrap_or_default())
                            }
                            ComponentExternalKind::Component => {
                                c.components.push(c.components.get(index).copied().unwrap_or_default())
                            }
                            _ => {}
                        }
                    }
                }
                Payload::End(_) => {
                    let done = scopes.pop().ok_or_else(|| ComponentError::Invalid("unbalanced sections".into()))?;
                    let Some(parent) = scopes.last_mut() else {
                        return Ok(done.as_component().map_or_else(Footprint::default, |c| c.total));
                    };
                    let parent = parent.component()?;
                    match done {
                        Scope::Module(m) => parent.modules.push(m),
                        Scope::Component(c) => parent.components.push(c.total),
                    }
                }
                _ => {}
            }
        }
        Err(ComponentError::Invalid("the component ends early".into()))
    }

    /// Refuses a footprint over one of `config`'s per-component limits, naming it.
    pub fn check(&self, config: &EngineConfig) -> Result<(), ComponentError> {
        let limits = [
            (
                "core instances",
                self.core_instances,
                config.max_core_instances_per_component,
                "--max-core-instances-per-component",
            ),
            ("linear memories", self.memories, config.max_memories_per_component, "--max-memories-per-component"),
            ("tables", self.tables, config.max_tables_per_component, "--max-tables-per-component"),
        ];
        for (what, count, limit, flag) in limits {
            if count > u64::from(limit) {
                return Err(ComponentError::OverLimit { what, count, limit, flag });
            }
        }
        Ok(())
    }
}

/// A component's index spaces of modules and components (what instantiating each
/// takes) and what its own instantiations take.
#[derive(Default)]
struct Component {
    modules: Vec<Footprint>,
    components: Vec<Footprint>,
    total: Footprint,
}

/// The module or component being read.
enum Scope {
    /// A module: one core instance when instantiated, with its memories and tables.
    Module(Footprint),
    Component(Component),
}

impl Scope {
    fn as_component(&self) -> Option<&Component> {
        match self {
            Scope::Component(c) => Some(c),
            Scope::Module(_) => None,
        }
    }

    fn component(&mut self) -> Result<&mut Component, ComponentError> {
        match self {
            Scope::Component(c) => Ok(c),
            Scope::Module(_) => Err(ComponentError::Invalid("a component section inside a core module".into())),
        }
    }
}

/// The component being read (the innermost scope).
fn component(scopes: &mut [Scope]) -> Result<&mut Component, ComponentError> {
    scopes.last_mut().ok_or_else(|| ComponentError::Invalid("a section before the header".into()))?.component()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(out: &mut Vec<u8>, id: u8, body: &[u8]) {
        out.push(id);
        out.push(u8::try_from(body.len()).expect("small sections"));
        out.extend(body);
    }

    /// A core module defining `memories` memories and `tables` tables.
    fn module(memories: u8, tables: u8) -> Vec<u8> {
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        if tables > 0 {
            let mut body = vec![tables];
            (0..tables).for_each(|_| body.extend([0x70, 0, 1]));
            section(&mut m, 4, &body);
        }
        if memories > 0 {
            let mut body = vec![memories];
            (0..memories).for_each(|_| body.extend([0, 1]));
            section(&mut m, 5, &body);
        }
        m
    }

    /// A component of `sections` (id, body).
    fn component(sections: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut c = b"\0asm\x0d\0\x01\0".to_vec();
        for (id, body) in sections {
            section(&mut c, *id, body);
        }
        c
    }

    /// A section instantiating item 0 `n` times (core instances: id 2, component instances: id 5).
    fn instantiate(n: u8) -> Vec<u8> {
        let mut body = vec![n];
        (0..n).for_each(|_| body.extend([0, 0, 0]));
        body
    }

    #[test]
    fn instantiations_are_counted_as_wasmtime_flattens_them() {
        let flat = component(&[(1, module(1, 2)), (2, instantiate(3))]);
        assert_eq!(Footprint::of(&flat).unwrap(), Footprint { core_instances: 3, memories: 3, tables: 6 });
        // A module defined but never instantiated takes nothing.
        let unused = component(&[(1, module(1, 1))]);
        assert_eq!(Footprint::of(&unused).unwrap(), Footprint::default());
        // A nested component instantiated twice counts twice.
        let inner = component(&[(1, module(1, 0)), (2, instantiate(1))]);
        let nested = component(&[(4, inner), (5, instantiate(2))]);
        assert_eq!(Footprint::of(&nested).unwrap(), Footprint { core_instances: 2, memories: 2, tables: 0 });
        // A module aliased from the enclosing component: `alias outer 1 (core module 0)`.
        let aliasing = component(&[(6, vec![1, 0x00, 0x11, 0x02, 1, 0]), (2, instantiate(1))]);
        let outer = component(&[(1, module(2, 1)), (4, aliasing), (5, instantiate(1))]);
        assert_eq!(Footprint::of(&outer).unwrap(), Footprint { core_instances: 1, memories: 2, tables: 1 });
    }

    #[test]
    fn the_first_limit_passed_is_named() {
        let config = EngineConfig { max_memories_per_component: 2, ..EngineConfig::default() };
        let over = Footprint { core_instances: 3, memories: 3, tables: 0 };
        let e = over.check(&config).unwrap_err();
        assert_eq!(e.code(), sluice_host_api::Code::ComponentLimitExceeded);
        assert!(e.to_string().contains("3 linear memories, more than the 2"), "{e}");
        assert!(Footprint { memories: 2, ..over }.check(&config).is_ok());
    }

    #[test]
    fn the_example_functions_fit_the_defaults() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../functions/target/wasm32-wasip2/release");
        for (name, want) in [("echo", 3), ("echo_py", 14)] {
            let path = dir.join(format!("{name}.wasm"));
            let wasm = std::fs::read(&path).unwrap_or_else(|e| {
                panic!("{}: {e}; build the functions first (cargo xtask build-functions)", path.display())
            });
            let f = Footprint::of(&wasm).unwrap();
            assert_eq!((f.core_instances, f.memories, f.tables), (want, 1, 2), "{name}");
            f.check(&EngineConfig::default()).unwrap();
        }
    }
}
