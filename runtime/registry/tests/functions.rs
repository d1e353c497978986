//! Functions: immutable numbered versions, artifacts as versions, compiled entries,
//! deletion and gc, corruption detection, reopening and concurrent deploys.

#[macro_use]
mod common;

use common::Env;
use sluice_registry::{FunctionOptions, Principal, PriorityClass, RegistryError, TenantSettings, VersionOrigin};

fn versions_increment_and_are_immutable(env: Env) {
    let reg = env.with_tenant("acme");
    let opts = FunctionOptions { priority: PriorityClass::Batch, timeout_ms: 500, ..FunctionOptions::default() };
    let v1 = reg.deploy("acme", "embed", b"component one", opts.clone()).unwrap();
    assert_eq!(v1.version, 1);
    assert_eq!(v1.component.digest, sluice_registry::Digest::of(b"component one"));
    assert_eq!(v1.component.size, 13);
    let v2 = reg.deploy("acme", "embed", b"component two", FunctionOptions::default()).unwrap();
    assert_eq!(v2.version, 2);
    // v1 is unchanged.
    assert_eq!(reg.get_version("acme", "embed", 1).unwrap(), v1);
    assert_eq!(reg.read_blob(&v1.component.digest).unwrap(), b"component one");
    assert_eq!(reg.latest_version("acme", "embed").unwrap(), v2);
    let rec = reg.get_function("acme", "embed").unwrap();
    assert_eq!(rec.versions, vec![v1.clone(), v2.clone()]);
    assert_eq!(rec.latest(), &v2);
    assert!(matches!(reg.get_version("acme", "embed", 3), Err(RegistryError::NotFound { .. })));
    assert!(matches!(reg.deploy("ghost", "f", b"x", FunctionOptions::default()), Err(RegistryError::NotFound { .. })));
    let bad = FunctionOptions { timeout_ms: 0, ..FunctionOptions::default() };
    assert!(matches!(reg.deploy("acme", "embed", b"x", bad), Err(RegistryError::InvalidInput(_))));
    assert_eq!(reg.latest_version("acme", "embed").unwrap().version, 2, "a rejected deploy changes nothing");

    // Tenants see only their own functions.
    reg.create_tenant("other", TenantSettings::default()).unwrap();
    reg.deploy("other", "embed", b"theirs", FunctionOptions::default()).unwrap();
    let names: Vec<_> = reg.list_functions("acme").unwrap().into_iter().map(|f| (f.name, f.latest.version)).collect();
    assert_eq!(names, [("embed".to_owned(), 2)]);
    assert_eq!(reg.list_functions("other").unwrap()[0].latest.version, 1);
    assert_eq!(reg.all_functions().unwrap().len(), 2);
}

fn artifacts_create_versions(env: Env) {
    let reg = env.with_tenant("acme");
    assert!(matches!(reg.put_artifact("acme", "embed", "w", b"w"), Err(RegistryError::NotFound { .. })));
    let opts = FunctionOptions { weight: Some(2), ..FunctionOptions::default() };
    let v1 = reg.deploy("acme", "embed", b"comp", opts.clone()).unwrap();
    assert!(v1.artifacts.is_empty());
    let v2 = reg.put_artifact("acme", "embed", "model.safetensors", b"weights-1").unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(v2.component, v1.component);
    assert_eq!(v2.options, opts);
    assert_eq!(v2.origin, VersionOrigin::Artifacts { names: vec!["model.safetensors".into()] });
    assert_eq!(v2.artifacts["model.safetensors"].size, 9);
    let v3 =
        reg.put_artifacts("acme", "embed", &[("tokenizer.json", b"{}"), ("model.safetensors", b"weights-2")]).unwrap();
    assert_eq!(v3.version, 3);
    assert_eq!(v3.artifacts.len(), 2);
    assert_eq!(reg.read_blob(&v3.artifacts["model.safetensors"].digest).unwrap(), b"weights-2");
    // Older versions keep their artifacts.
    assert_eq!(reg.get_version("acme", "embed", 2).unwrap().artifacts, v2.artifacts);
    // A deploy inherits the newest artifacts.
    let v4 = reg.deploy("acme", "embed", b"comp-2", FunctionOptions::default()).unwrap();
    assert_eq!(v4.artifacts, v3.artifacts);
    let v5 = reg.put_artifact_reader("acme", "embed", "vocab.txt", &b"a\nb\n"[..]).unwrap();
    assert_eq!(reg.read_blob(&v5.artifacts["vocab.txt"].digest).unwrap(), b"a\nb\n");
    let v6 = reg.remove_artifact("acme", "embed", "tokenizer.json").unwrap();
    assert!(!v6.artifacts.contains_key("tokenizer.json"));
    assert!(matches!(reg.remove_artifact("acme", "embed", "tokenizer.json"), Err(RegistryError::NotFound { .. })));
    assert_eq!(reg.latest_version("acme", "embed").unwrap().version, 6);
}

fn compiled_entries(env: Env) {
    let reg = env.with_tenant("acme");
    reg.deploy("acme", "f", b"comp", FunctionOptions::default()).unwrap();
    assert_eq!(reg.compiled("acme", "f", 1, "engine-a").unwrap(), None);
    let c = reg.store_compiled("acme", "f", 1, "engine-a", b"compiled-a").unwrap();
    assert_eq!(reg.compiled("acme", "f", 1, "engine-a").unwrap(), Some(c.clone()));
    let path = reg.compiled_blob("acme", "f", 1, "engine-a").unwrap().unwrap();
    assert_eq!(std::fs::read(path).unwrap(), b"compiled-a");
    // A new engine fingerprint replaces the old entry.
    reg.store_compiled("acme", "f", 1, "engine-b", b"compiled-b").unwrap();
    assert_eq!(reg.compiled("acme", "f", 1, "engine-a").unwrap(), None);
    assert!(reg.compiled_blob("acme", "f", 1, "engine-b").unwrap().is_some());
    assert!(matches!(reg.store_compiled("acme", "f", 2, "engine-b", b"x"), Err(RegistryError::NotFound { .. })));
    assert!(matches!(reg.store_compiled("acme", "f", 1, "", b"x"), Err(RegistryError::InvalidInput(_))));
    let report = reg.gc().unwrap();
    assert_eq!((report.kept, report.removed), (2, 1), "{report:?}");
}

fn delete_function_and_gc(env: Env) {
    let reg = env.with_tenant("acme");
    let v1 = reg.deploy("acme", "f", b"comp-f", FunctionOptions::default()).unwrap();
    reg.put_artifact("acme", "f", "w", b"weights-f").unwrap();
    reg.store_compiled("acme", "f", 2, "eng", b"compiled-f").unwrap();
    let g = reg.deploy("acme", "g", b"comp-shared", FunctionOptions::default()).unwrap();
    reg.deploy("acme", "h", b"comp-shared", FunctionOptions::default()).unwrap();
    // A stale temporary file from an interrupted write.
    let temp = env.dir().join("blobs/sha256/.tmp-1-dead");
    std::fs::write(&temp, b"partial").unwrap();
    assert_eq!(reg.gc().unwrap().removed, 0);
    assert!(!temp.exists());

    reg.delete_function("acme", "f").unwrap();
    assert!(matches!(reg.get_function("acme", "f"), Err(RegistryError::NotFound { .. })));
    assert!(matches!(reg.delete_function("acme", "f"), Err(RegistryError::NotFound { .. })));
    assert_eq!(reg.compiled("acme", "f", 2, "eng").unwrap(), None);
    let report = reg.gc().unwrap();
    assert_eq!((report.removed, report.kept), (3, 1), "{report:?}");
    assert!(!reg.blob_path(&v1.component.digest).exists());
    assert!(matches!(reg.read_blob(&v1.component.digest), Err(RegistryError::NotFound { .. })));

    // The shared blob survives deleting one of its users.
    reg.delete_function("acme", "g").unwrap();
    assert_eq!(reg.gc().unwrap().removed, 0);
    assert!(reg.blob_path(&g.component.digest).exists());

    // Redeploying a deleted name starts again at version 1.
    assert_eq!(reg.deploy("acme", "f", b"comp-f", FunctionOptions::default()).unwrap().version, 1);

    // Deleting the tenant removes its functions.
    reg.delete_tenant("acme").unwrap();
    assert!(reg.all_functions().unwrap().is_empty());
    reg.create_tenant("acme", TenantSettings::default()).unwrap();
    assert!(reg.list_functions("acme").unwrap().is_empty());
    assert_eq!(reg.gc().unwrap().kept, 0);
}

fn corrupt_blob_is_detected(env: Env) {
    let reg = env.with_tenant("acme");
    let v = reg.deploy("acme", "f", b"comp", FunctionOptions::default()).unwrap();
    std::fs::write(reg.blob_path(&v.component.digest), b"evil").unwrap();
    assert!(matches!(reg.read_blob(&v.component.digest), Err(RegistryError::Corrupt(_))));
}

fn reopen_keeps_everything(env: Env) {
    let (key, v2) = {
        let reg = env.with_tenant("acme");
        reg.update_tenant("acme", TenantSettings { max_concurrency: Some(4), ..TenantSettings::default() }).unwrap();
        let (_, key) = reg.issue_key("acme").unwrap();
        reg.deploy("acme", "f", b"comp", FunctionOptions::default()).unwrap();
        let v2 = reg.put_artifact("acme", "f", "w", b"weights").unwrap();
        reg.store_compiled("acme", "f", 2, "eng", b"compiled").unwrap();
        (key, v2)
    };
    let reg = env.open();
    assert_eq!(reg.get_tenant("acme").unwrap().settings.max_concurrency, Some(4));
    assert_eq!(reg.authenticate(&key).unwrap(), Some(Principal::Tenant("acme".into())));
    assert_eq!(reg.latest_version("acme", "f").unwrap(), v2);
    assert_eq!(reg.get_function("acme", "f").unwrap().versions.len(), 2);
    assert!(reg.compiled_blob("acme", "f", 2, "eng").unwrap().is_some());
    assert_eq!(reg.read_blob(&v2.artifacts["w"].digest).unwrap(), b"weights");
    assert_eq!(reg.deploy("acme", "f", b"comp3", FunctionOptions::default()).unwrap().version, 3);
}

fn concurrent_deploys_get_distinct_versions(env: Env) {
    let reg = std::sync::Arc::new(env.with_tenant("acme"));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let reg = reg.clone();
            std::thread::spawn(move || {
                for i in 0..5 {
                    reg.deploy("acme", "f", format!("c{t}-{i}").as_bytes(), FunctionOptions::default()).unwrap();
                    if i == 2 {
                        reg.gc().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let rec = reg.get_function("acme", "f").unwrap();
    let numbers: Vec<u32> = rec.versions.iter().map(|v| v.version).collect();
    assert_eq!(numbers, (1..=20).collect::<Vec<_>>());
    for v in &rec.versions {
        reg.read_blob(&v.component.digest).unwrap();
    }
}

fn a_staged_version_takes_its_artifacts_in_place_and_serves_only_once_published(env: Env) {
    let reg = env.with_tenant("acme");
    let v1 = reg.deploy("acme", "f", b"comp1", FunctionOptions::default()).unwrap();
    let draft = reg.deploy_as("acme", "f", b"comp2", FunctionOptions::default(), true).unwrap();
    assert_eq!((draft.version, draft.staged), (2, true));
    // Three artifacts land in the draft: still one version, still not serving.
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let v = reg.put_artifact("acme", "f", name, format!("w{i}").as_bytes()).unwrap();
        assert_eq!((v.version, v.staged), (2, true), "in place");
        assert_eq!(v.origin, sluice_registry::VersionOrigin::Deploy);
        assert_eq!(reg.latest_version("acme", "f").unwrap(), v1, "version 1 serves while 2 is staged");
    }
    let published = reg.publish("acme", "f", 2).unwrap();
    assert!(!published.staged);
    assert_eq!(published.artifacts.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(reg.latest_version("acme", "f").unwrap(), published);
    assert_eq!(reg.get_function("acme", "f").unwrap().versions.len(), 2, "one version per deploy");
    assert_eq!(reg.publish("acme", "f", 2).unwrap(), published, "a retried publish is a no-op");
    // Artifacts on a published version make a new version, as before.
    assert_eq!(reg.put_artifact("acme", "f", "d", b"w").unwrap().version, 3);
    // A function whose only version is staged does not serve at all.
    reg.deploy_as("acme", "g", b"comp", FunctionOptions::default(), true).unwrap();
    assert!(matches!(reg.latest_version("acme", "g"), Err(RegistryError::NotFound { .. })));
    let listed = reg.all_functions().unwrap();
    let g = listed.iter().find(|f| f.name == "g").unwrap();
    assert!(g.serving.is_none() && g.latest.staged);
    // An abandoned draft cannot be published.
    reg.deploy_as("acme", "g", b"comp-b", FunctionOptions::default(), true).unwrap();
    assert!(matches!(reg.publish("acme", "g", 1), Err(RegistryError::InvalidInput(_))));
    assert!(matches!(reg.publish("acme", "g", 9), Err(RegistryError::NotFound { .. })));
    assert_eq!(reg.publish("acme", "g", 2).unwrap().version, 2);
}

on_both!(
    versions_increment_and_are_immutable,
    artifacts_create_versions,
    compiled_entries,
    delete_function_and_gc,
    corrupt_blob_is_detected,
    reopen_keeps_everything,
    concurrent_deploys_get_distinct_versions,
    a_staged_version_takes_its_artifacts_in_place_and_serves_only_once_published,
);
