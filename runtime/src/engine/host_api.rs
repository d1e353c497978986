//! The host API version a component was built against, read from its import names
//! before it is compiled ([`HostApiUse::of`]): the newest `sluice:gpu` version it
//! imports, refusal of a version this host does not offer, and the in-place rename that
//! lets a component of a retired version ([`sluice_host_api::version::RENAMED`]) link
//! against the interface it is.
//!
//! Only the component's own (top-level) imports count: nested components and core
//! modules import from their parent, never from the host.

use std::borrow::Cow;
use std::ops::Range;

use semver::Version;
use sluice_host_api::version::{self, GpuImport, Support};
use wasmparser::{Encoding, Parser, Payload};

use super::component_error::ComponentError;

/// What a component imports of the host API.
#[derive(Debug, Default)]
pub struct HostApiUse {
    /// Every top-level `sluice:gpu` import, with the byte range of its version in the
    /// binary.
    imports: Vec<(GpuImport, Range<usize>)>,
}

impl HostApiUse {
    /// Reads the top-level imports of the component `wasm`; refuses an unversioned
    /// `sluice:gpu` import and a version of another major than any this host offers.
    pub fn of(wasm: &[u8]) -> Result<HostApiUse, ComponentError> {
        let invalid = |e: wasmparser::BinaryReaderError| ComponentError::Invalid(e.to_string());
        let mut imports = Vec::new();
        let mut depth = 0usize;
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.map_err(invalid)? {
                Payload::Version { encoding: Encoding::Component | Encoding::Module, .. } => depth += 1,
                Payload::End(_) => depth = depth.saturating_sub(1),
                Payload::ComponentImportSection(section) if depth == 1 => {
                    for import in section {
                        let name = import.map_err(invalid)?.name.name;
                        let Some(gpu) = GpuImport::parse(name) else { continue };
                        check_offered(&gpu)?;
                        // `name` borrows from `wasm`: its version is the text after '@'.
                        let start = name.as_ptr() as usize - wasm.as_ptr() as usize;
                        let at = start + name.find('@').map_or(name.len(), |i| i + 1);
                        imports.push((gpu, at..start + name.len()));
                    }
                }
                _ => {}
            }
        }
        Ok(HostApiUse { imports })
    }

    /// The newest host API version among the imports, as built (before any rename);
    /// `None` for a component that imports nothing of the host API.
    pub fn version(&self) -> Option<&Version> {
        self.imports.iter().filter_map(|(i, _)| i.version.as_ref()).max()
    }

    /// The import of a newer minor version than this host's that the linker's `error`
    /// names (the first such import if it names none); `None` if none is newer.
    pub fn newer_than_host(&self, error: &str) -> Option<&GpuImport> {
        let mut newer = self.imports.iter().map(|(i, _)| i).filter(|i| i.support() == Support::Newer);
        let first = newer.clone().next();
        newer.find(|i| error.contains(&format!("`{i}`"))).or(first)
    }

    /// `wasm` with the imports of retired versions renamed to the versions they are; the
    /// bytes themselves when it has none.
    pub fn renamed<'a>(&self, wasm: &'a [u8]) -> Cow<'a, [u8]> {
        let mut out = Cow::Borrowed(wasm);
        for (import, range) in &self.imports {
            if let Support::Renamed(to) = import.support() {
                let to = to.to_string();
                // A rename keeps the length (`sluice_host_api::version`'s tests check
                // `RENAMED`); were it not to, the import stays as built and fails to link.
                if to.len() == range.len() {
                    out.to_mut()[range.clone()].copy_from_slice(to.as_bytes());
                }
            }
        }
        out
    }
}

fn check_offered(import: &GpuImport) -> Result<(), ComponentError> {
    match import.support() {
        Support::Linked | Support::Renamed(_) | Support::Newer => Ok(()),
        Support::Unsupported => Err(ComponentError::HostApi(format!(
            "the component was built against {import}, which this server does not offer; it offers {}",
            version::offered()
        ))),
        Support::Unversioned => Err(ComponentError::HostApi(format!(
            "the component imports {import} without a version; build it against a released WIT package (`package {}@{};`); this server offers {}",
            version::PACKAGE,
            version::CURRENT,
            version::offered()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component importing `names` as empty instances (enough for the scan).
    fn component_importing(names: &[&str]) -> Vec<u8> {
        let mut types = wasm_encoder::ComponentTypeSection::new();
        types.instance(&wasm_encoder::InstanceType::new());
        let mut imports = wasm_encoder::ComponentImportSection::new();
        for name in names {
            imports.import(*name, wasm_encoder::ComponentTypeRef::Instance(0));
        }
        let mut component = wasm_encoder::Component::new();
        component.section(&types).section(&imports);
        component.finish()
    }

    #[test]
    fn the_newest_gpu_import_is_the_version_and_other_packages_do_not_count() {
        let wasm = component_importing(&["sluice:gpu/types@1.0.0", "wasi:io/streams@0.2.9", "sluice:gpu/ops@1.1.0"]);
        let used = HostApiUse::of(&wasm).unwrap();
        assert_eq!(used.version(), Some(&Version::new(1, 1, 0)));
        assert!(used.newer_than_host("").is_none());
        assert!(matches!(used.renamed(&wasm), Cow::Borrowed(_)));
        assert_eq!(HostApiUse::of(&component_importing(&["wasi:io/streams@0.2.9"])).unwrap().version(), None);
    }

    #[test]
    fn a_retired_version_is_renamed_in_place_and_reported_as_built() {
        let wasm = component_importing(&["sluice:gpu/types@0.1.0", "sluice:gpu/ops@0.1.0"]);
        let used = HostApiUse::of(&wasm).unwrap();
        assert_eq!(used.version(), Some(&Version::new(0, 1, 0)));
        let renamed = used.renamed(&wasm);
        assert_eq!(renamed.len(), wasm.len());
        let again = HostApiUse::of(&renamed).unwrap();
        let names: Vec<String> = again.imports.iter().map(|(i, _)| i.to_string()).collect();
        assert_eq!(names, ["sluice:gpu/types@1.0.0", "sluice:gpu/ops@1.0.0"]);
    }

    #[test]
    fn a_newer_minor_is_flagged_and_another_major_or_no_version_is_refused() {
        let newer = format!("sluice:gpu/artifacts@{}.{}.0", version::CURRENT.major, version::CURRENT.minor + 1);
        let other = format!("sluice:gpu/io@{}.{}.0", version::CURRENT.major, version::CURRENT.minor + 1);
        let wasm = component_importing(&["sluice:gpu/types@1.0.0", &other, &newer]);
        let used = HostApiUse::of(&wasm).unwrap();
        let named = format!("component imports instance `{newer}`, but a matching implementation was not found");
        assert_eq!(used.newer_than_host(&named).map(ToString::to_string), Some(newer));
        assert_eq!(used.newer_than_host("").map(ToString::to_string), Some(other));
        for name in ["sluice:gpu/ops@2.0.0", "sluice:gpu/ops"] {
            let err = HostApiUse::of(&component_importing(&[name])).unwrap_err();
            assert!(matches!(&err, ComponentError::HostApi(m) if m.contains(name)), "{name}: {err}");
        }
    }
}
