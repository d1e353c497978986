//! Uploads in flight, the disk quota and retention at the registry's level: an open
//! upload holds no lock (gc and deploys run while it is written, on the same thread)
//! and gc leaves its file; a write above the tenant's quota is refused and changes
//! nothing; old versions are pruned with their compiled entries, and gc reclaims their blobs.

#[macro_use]
mod common;

use common::Env;
use sluice_registry::{FunctionOptions, NewVersion, RegistryError, StoragePolicy};

fn temp_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("blobs/sha256"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".tmp-"))
        .count()
}

fn an_upload_in_flight_holds_no_lock_and_gc_leaves_its_file(env: Env) {
    let reg = env.with_tenant("acme");
    reg.deploy("acme", "f", b"comp", FunctionOptions::default()).unwrap();
    let mut upload = reg.begin_upload().unwrap();
    upload.write(b"half").unwrap();
    // On this thread: a lock held by the upload would deadlock here.
    reg.gc().unwrap();
    reg.deploy("acme", "g", b"comp-g", FunctionOptions::default()).unwrap();
    assert_eq!(temp_files(env.dir()), 1, "gc left the upload's file alone");
    upload.write(b" and the rest").unwrap();
    let w = reg.put_artifact_upload("acme", "f", "w", upload, StoragePolicy::UNLIMITED).unwrap();
    assert_eq!(reg.read_blob(&w.version.artifacts["w"].digest).unwrap(), b"half and the rest");
    assert_eq!(temp_files(env.dir()), 0);
    // Dropped unfinished, an upload leaves nothing.
    let mut upload = reg.begin_upload().unwrap();
    upload.write(b"abandoned").unwrap();
    drop(upload);
    assert_eq!(temp_files(env.dir()), 0);
}

fn the_disk_quota_refuses_what_would_pass_it_after_retention_pruned(env: Env) {
    let reg = env.with_tenant("acme");
    let policy = StoragePolicy { disk_quota_bytes: Some(170), keep_versions: Some(2) };
    let opts = FunctionOptions::default;
    let v1 = reg.deploy_with("acme", "f", &[1; 40], opts(), NewVersion::default(), policy).unwrap();
    assert_eq!((v1.disk_used_bytes, reg.tenant_disk_usage("acme").unwrap()), (40, 40));
    let blobs = || std::fs::read_dir(env.dir().join("blobs/sha256")).unwrap().count();
    let blobs_before = blobs();
    let too_big = reg.deploy_with("acme", "f", &[2; 140], opts(), NewVersion::default(), policy);
    assert!(matches!(too_big, Err(RegistryError::DiskQuotaExceeded { needed_bytes: 180, .. })), "{too_big:?}");
    assert_eq!(reg.get_function("acme", "f").unwrap().versions.len(), 1, "nothing changed");
    assert_eq!(blobs(), blobs_before, "refused before the bytes were written");

    let mut upload = reg.begin_upload().unwrap();
    upload.write(&[3; 50]).unwrap();
    let v2 = reg.put_artifact_upload("acme", "f", "w", upload, policy).unwrap();
    assert_eq!((v2.version.version, v2.pruned.clone(), v2.disk_used_bytes), (2, vec![], 90));
    reg.store_compiled("acme", "f", 1, "engine", b"compiled-1").unwrap();
    let v3 = reg.deploy_with("acme", "f", &[4; 50], opts(), NewVersion::default(), policy).unwrap();
    assert_eq!((v3.version.version, v3.pruned.clone(), v3.disk_used_bytes), (3, vec![1], 140));
    assert!(!matches!(reg.compiled("acme", "f", 1, "engine"), Ok(Some(_))), "pruned with its version");
    // 200 bytes with every version kept; 160 once version 2 (the last to use the first
    // component) is pruned, so it fits.
    let v4 = reg.deploy_with("acme", "f", &[5; 60], opts(), NewVersion::default(), policy).unwrap();
    assert_eq!((v4.version.version, v4.pruned.clone(), v4.disk_used_bytes), (4, vec![2], 160));
    let report = reg.gc().unwrap();
    assert_eq!(report.removed, 2, "the first component and version 1's compiled form: {report:?}");
    let versions: Vec<u32> = reg.get_function("acme", "f").unwrap().versions.iter().map(|v| v.version).collect();
    assert_eq!(versions, [3, 4]);
    assert_eq!(reg.tenant_disk_usage("acme").unwrap(), 160);
}

on_both!(
    an_upload_in_flight_holds_no_lock_and_gc_leaves_its_file,
    the_disk_quota_refuses_what_would_pass_it_after_retention_pruned,
);
