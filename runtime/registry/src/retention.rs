//! What a tenant's versions hold on disk, its disk quota, and which old versions the
//! retention policy prunes.
//!
//! A tenant is charged the bytes of the distinct blobs (components and artifacts) its
//! versions reference: a blob referenced by several of its versions counts once, and a
//! blob shared (content-addressed) with another tenant counts in full for each tenant
//! referencing it, so no tenant's usage depends on what others store or delete.
//! Compiled forms are the server's cache, derived from a component for one engine, and
//! are not charged (they are pruned with their versions).
//!
//! Each write of a version keeps, per function, the newest [`StoragePolicy::keep_versions`]
//! versions plus the serving version, a staged draft and pinned versions; the others are
//! removed in the same transaction and [`crate::Registry::gc`] reclaims their blobs.

use std::collections::HashSet;

use crate::RegistryError;
use crate::model::{Digest, FunctionVersion};

/// A tenant's storage limits, applied when one of its versions is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoragePolicy {
    /// The most bytes of distinct blobs its versions may reference (`None`: unlimited).
    /// A write that would take it above is refused unless it adds nothing.
    pub disk_quota_bytes: Option<u64>,
    /// Versions kept per function, the newest ones, besides the serving version, a
    /// staged draft and pinned versions (`None`: every version is kept).
    pub keep_versions: Option<u32>,
}

impl StoragePolicy {
    /// No quota, nothing pruned.
    pub const UNLIMITED: StoragePolicy = StoragePolicy { disk_quota_bytes: None, keep_versions: None };

    /// The refusal of a write that takes `tenant` from `used` to `needed` bytes, if it
    /// goes above the quota (a write that adds nothing is never refused).
    pub(crate) fn refusal(&self, tenant: &str, used: u64, needed: u64) -> Option<RegistryError> {
        let quota = self.disk_quota_bytes?;
        (needed > quota && needed > used).then(|| RegistryError::DiskQuotaExceeded {
            tenant: tenant.to_owned(),
            used_bytes: used,
            needed_bytes: needed,
            quota_bytes: quota,
        })
    }
}

/// What a write of a version leaves: the function's versions pruned, and the tenant's usage.
pub(crate) struct AfterWrite {
    /// Numbers of the function's versions the retention policy removes.
    pub pruned: Vec<u32>,
    /// The tenant's disk usage after the write and the pruning.
    pub used_bytes: u64,
}

/// The effect of writing `version` (a new one, or a draft replaced in place) when the
/// tenant has `tenant_versions` (all its functions' versions) and keeps `keep` per function.
pub(crate) fn after_write(
    tenant_versions: &[FunctionVersion],
    version: &FunctionVersion,
    keep: Option<u32>,
) -> AfterWrite {
    let mut mine: Vec<&FunctionVersion> = tenant_versions
        .iter()
        .filter(|v| v.function == version.function && v.version != version.version)
        .chain(std::iter::once(version))
        .collect();
    mine.sort_by_key(|v| v.version);
    let pruned = keep.map_or_else(Vec::new, |keep| prunable(&mine, keep));
    let others = tenant_versions.iter().filter(|v| v.function != version.function);
    let kept = mine.into_iter().filter(|v| !pruned.contains(&v.version));
    AfterWrite { used_bytes: disk_usage(others.chain(kept)), pruned }
}

/// A version written, with what the retention policy pruned.
#[derive(Debug, Clone)]
pub struct Written {
    /// The version (new, or the staged draft changed in place).
    pub version: FunctionVersion,
    /// Numbers of the function's versions removed by the retention policy.
    pub pruned: Vec<u32>,
    /// The tenant's disk usage after the write.
    pub disk_used_bytes: u64,
}

/// Bytes of the distinct blobs `versions` reference.
pub(crate) fn disk_usage<'a>(versions: impl IntoIterator<Item = &'a FunctionVersion>) -> u64 {
    let mut seen: HashSet<&Digest> = HashSet::new();
    let mut bytes = 0u64;
    for v in versions {
        crate::pause::point();
        for blob in std::iter::once(&v.component).chain(v.artifacts.values()) {
            if seen.insert(&blob.digest) {
                bytes = bytes.saturating_add(blob.size);
            }
        }
    }
    bytes
}

/// The numbers of the versions of one function (`versions`, oldest first) that keeping
/// the newest `keep` prunes: never the serving version (the newest published one), a
/// staged draft (the newest, if staged) or a pinned version.
pub(crate) fn prunable(versions: &[&FunctionVersion], keep: u32) -> Vec<u32> {
    let serving = versions.iter().rev().find(|v| !v.staged).map(|v| v.version);
    let draft = versions.last().filter(|v| v.staged).map(|v| v.version);
    let old = versions.len().saturating_sub(keep as usize);
    versions[..old]
        .iter()
        .filter(|v| !v.pinned && Some(v.version) != serving && Some(v.version) != draft)
        .map(|v| v.version)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{BlobRef, FunctionOptions, VersionOrigin};

    fn blob(content: &str) -> BlobRef {
        BlobRef { digest: Digest::of(content.as_bytes()), size: content.len() as u64 }
    }

    fn version(n: u32, component: &str, artifacts: &[(&str, &str)]) -> FunctionVersion {
        FunctionVersion {
            tenant: "t".into(),
            function: "f".into(),
            version: n,
            component: blob(component),
            options: FunctionOptions::default(),
            artifacts: artifacts.iter().map(|(k, c)| ((*k).to_owned(), blob(c))).collect::<BTreeMap<_, _>>(),
            origin: VersionOrigin::Deploy,
            created_ms: 0,
            staged: false,
            pinned: false,
            host_api: None,
        }
    }

    #[test]
    fn a_blob_counts_once_however_many_versions_reference_it() {
        let a = version(1, "comp", &[("w", "weights")]);
        let b = version(2, "comp", &[("w", "weights"), ("t", "tok")]);
        assert_eq!(disk_usage([&a, &b]), 4 + 7 + 3);
        assert_eq!(disk_usage([]), 0);
    }

    #[test]
    fn the_newest_are_kept_and_so_are_the_serving_the_draft_and_the_pinned() {
        let mut vs: Vec<FunctionVersion> = (1..=6).map(|n| version(n, "c", &[])).collect();
        let refs = |vs: &[FunctionVersion]| prunable(&vs.iter().collect::<Vec<_>>(), 3);
        assert_eq!(refs(&vs), [1, 2, 3]);
        assert_eq!(prunable(&vs.iter().collect::<Vec<_>>(), 10), Vec::<u32>::new());
        vs[1].pinned = true;
        assert_eq!(refs(&vs), [1, 3], "version 2 is pinned");
        // Versions 4..6 are drafts (an abandoned one and the newest): 3 serves.
        for v in &mut vs[3..] {
            v.staged = true;
        }
        assert_eq!(prunable(&vs.iter().collect::<Vec<_>>(), 1), [1, 4, 5], "3 serves, 6 is the draft, 2 is pinned");
    }

    #[test]
    fn a_write_is_charged_after_what_it_prunes() {
        let stored: Vec<FunctionVersion> =
            (1..=3).map(|n| version(n, "c", &[("w", &format!("weights-{n}"))])).collect();
        let next = version(4, "c", &[("w", "weights-4")]);
        let after = after_write(&stored, &next, Some(2));
        assert_eq!(after.pruned, [1, 2]);
        assert_eq!(after.used_bytes, 1 + 2 * 9, "the component once, versions 3 and 4's weights");
        let policy = StoragePolicy { disk_quota_bytes: Some(19), keep_versions: Some(2) };
        assert!(policy.refusal("t", 28, after.used_bytes).is_none());
        assert!(policy.refusal("t", 10, 20).is_some());
        assert!(policy.refusal("t", 25, 25).is_none(), "a write adding nothing is never refused");
    }
}
