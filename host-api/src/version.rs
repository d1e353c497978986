//! The host API's version: which versions of the `sluice:gpu` WIT package this build
//! offers, and what a component's import names say it was built against.
//!
//! The package follows semver. A minor version only adds (functions, interfaces, types,
//! each marked `@since` in the WIT); a host of version `M.n` runs a component built
//! against any `M.k` with `k ≤ n`, because wasmtime's linker resolves an import of
//! `sluice:gpu/ops@M.k.0` to the host's `sluice:gpu/ops@M.n.0` and checks only the
//! items the component uses. A component built against a newer minor deploys as long as
//! it uses nothing the host lacks. Every released version is frozen in
//! `wit-released/<version>/` ([`RELEASED_WIT_DIR`]).
//!
//! 0.1.0 predates the versioning rules: 1.0.0 is the same interface under the first
//! stable version. The host runs 0.1.0 components by reading their imports as 1.0.0
//! ([`RENAMED`]), a same-length rename of the import names, nothing else.

use std::fmt;

use semver::Version;

/// The WIT package's namespace and name.
pub const PACKAGE: &str = "sluice:gpu";

/// The version of the WIT package in [`crate::WIT_DIR`]: what this host implements.
pub static CURRENT: Version = Version::new(1, 2, 0);

/// Every released version, oldest first; each is frozen in [`RELEASED_WIT_DIR`].
pub static RELEASED: [Version; 4] =
    [Version::new(0, 1, 0), Version::new(1, 0, 0), Version::new(1, 1, 0), Version::new(1, 2, 0)];

/// Retired versions the host still runs, each with the version whose interface it is
/// (the same WIT but for its version line); its imports are renamed to that version's.
pub static RENAMED: [(Version, Version); 1] = [(Version::new(0, 1, 0), Version::new(1, 0, 0))];

/// Folder of the frozen released interfaces, one sub-folder per version.
pub const RELEASED_WIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/wit-released");

/// One import of a `sluice:gpu` interface, parsed from its import name
/// (`sluice:gpu/ops@1.0.0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuImport {
    /// The interface's name within the package (`ops`).
    pub interface: String,
    /// The package version the component was built against; `None` for an unversioned
    /// import, which no host since 0.1.0 offers.
    pub version: Option<Version>,
}

impl GpuImport {
    /// Parses an import name; `None` if it does not name a `sluice:gpu` interface.
    pub fn parse(import_name: &str) -> Option<GpuImport> {
        let rest = import_name.strip_prefix(PACKAGE)?.strip_prefix('/')?;
        let (interface, version) = match rest.split_once('@') {
            Some((interface, version)) => (interface, Some(Version::parse(version).ok()?)),
            None => (rest, None),
        };
        Some(GpuImport { interface: interface.to_owned(), version })
    }

    /// How this host relates to the version this import asks for.
    pub fn support(&self) -> Support {
        match &self.version {
            None => Support::Unversioned,
            Some(v) => support(v),
        }
    }
}

impl fmt::Display for GpuImport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{PACKAGE}/{}@{v}", self.interface),
            None => write!(f, "{PACKAGE}/{}", self.interface),
        }
    }
}

/// How this host relates to a version a component was built against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Support {
    /// Semver-compatible with [`CURRENT`] and not newer: linked as is.
    Linked,
    /// A retired version the host runs as the given one ([`RENAMED`]).
    Renamed(Version),
    /// Same major as [`CURRENT`] but a newer minor or patch: runs if the component uses
    /// nothing the host lacks.
    Newer,
    /// Another major version than any this host offers.
    Unsupported,
    /// An import without a version.
    Unversioned,
}

/// How this host relates to `version`.
pub fn support(version: &Version) -> Support {
    if let Some((_, to)) = RENAMED.iter().find(|(from, _)| from == version) {
        return Support::Renamed(to.clone());
    }
    if !version.pre.is_empty() || compatibility_key(version) != compatibility_key(&CURRENT) {
        return Support::Unsupported;
    }
    if *version > CURRENT { Support::Newer } else { Support::Linked }
}

/// The versions a semver-compatible linker treats as one: the major, or for 0.x the
/// minor, or for 0.0.x the exact version.
fn compatibility_key(v: &Version) -> (u64, u64, u64) {
    match (v.major, v.minor) {
        (0, 0) => (0, 0, v.patch),
        (0, minor) => (0, minor, 0),
        (major, _) => (major, 0, 0),
    }
}

/// What this host offers, for error messages: "sluice:gpu 1.2.0 (runs components built
/// against 1.0.0 to 1.2.0, and 0.1.0)".
pub fn offered() -> String {
    let oldest_linked =
        RELEASED.iter().find(|v| compatibility_key(v) == compatibility_key(&CURRENT)).unwrap_or(&CURRENT);
    let renamed: Vec<String> = RENAMED.iter().map(|(from, _)| from.to_string()).collect();
    format!(
        "{PACKAGE} {CURRENT} (runs components built against {oldest_linked} to {CURRENT}, and {})",
        renamed.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wit_package_carries_the_current_version() {
        let wit = std::fs::read_to_string(format!("{}/sluice.wit", crate::WIT_DIR)).unwrap();
        assert!(wit.contains(&format!("\npackage {PACKAGE}@{CURRENT};\n")), "host-api/wit is not at {CURRENT}");
    }

    #[test]
    fn every_released_version_is_frozen_in_its_folder_with_its_own_version_line() {
        for v in &RELEASED {
            let wit = std::fs::read_to_string(format!("{RELEASED_WIT_DIR}/{v}/sluice.wit"))
                .unwrap_or_else(|e| panic!("released version {v} has no frozen WIT: {e}"));
            assert!(wit.contains(&format!("\npackage {PACKAGE}@{v};\n")), "wit-released/{v} declares another version");
        }
        assert_eq!(RELEASED.last(), Some(&CURRENT), "the current version is released");
        assert!(RELEASED.windows(2).all(|w| w[0] < w[1]), "RELEASED is oldest first");
    }

    #[test]
    fn a_renamed_version_is_the_same_interface_and_renames_in_place() {
        for (from, to) in &RENAMED {
            // Same length: the host renames the import names without moving a byte.
            assert_eq!(from.to_string().len(), to.to_string().len());
            let read = |v: &Version| std::fs::read_to_string(format!("{RELEASED_WIT_DIR}/{v}/sluice.wit")).unwrap();
            let renamed =
                read(from).replace(&format!("package {PACKAGE}@{from};"), &format!("package {PACKAGE}@{to};"));
            assert_eq!(renamed, read(to), "{from} and {to} differ beyond their version line");
        }
    }

    #[test]
    fn import_names_parse_into_interface_and_version() {
        let ops = GpuImport::parse("sluice:gpu/ops@1.0.0").unwrap();
        assert_eq!((ops.interface.as_str(), ops.version.clone()), ("ops", Some(Version::new(1, 0, 0))));
        assert_eq!(ops.to_string(), "sluice:gpu/ops@1.0.0");
        assert_eq!(GpuImport::parse("sluice:gpu/ops").unwrap().support(), Support::Unversioned);
        assert_eq!(GpuImport::parse("wasi:io/streams@0.2.0"), None);
        assert_eq!(GpuImport::parse("sluice:gpux/ops@1.0.0"), None);
        assert_eq!(GpuImport::parse("sluice:gpu/ops@one"), None);
    }

    #[test]
    fn versions_are_linked_renamed_newer_or_unsupported() {
        assert_eq!(support(&Version::new(1, 0, 0)), Support::Linked);
        assert_eq!(support(&CURRENT), Support::Linked);
        assert_eq!(support(&Version::new(0, 1, 0)), Support::Renamed(Version::new(1, 0, 0)));
        assert_eq!(support(&Version::new(1, CURRENT.minor + 1, 0)), Support::Newer);
        assert_eq!(support(&Version::new(2, 0, 0)), Support::Unsupported);
        assert_eq!(support(&Version::new(0, 2, 0)), Support::Unsupported);
        assert_eq!(support(&Version::parse("1.0.0-rc1").unwrap()), Support::Unsupported);
    }

    #[test]
    fn the_offer_names_the_range_and_the_renamed_versions() {
        assert_eq!(offered(), "sluice:gpu 1.2.0 (runs components built against 1.0.0 to 1.2.0, and 0.1.0)");
    }
}
