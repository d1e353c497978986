//! Tenants, settings, name rules, API keys (stored hashed), the admin key and the
//! data-directory lock.

#[macro_use]
mod common;

use common::{Env, contains};
use sluice_registry::{FunctionOptions, MAX_WEIGHT, Principal, PriorityClass, Registry, RegistryError, TenantSettings};

fn tenants_crud_and_settings(env: Env) {
    let reg = env.open();
    let settings = TenantSettings {
        weight: 3,
        max_priority: Some(PriorityClass::Batch),
        memory_quota_bytes: Some(1 << 30),
        max_concurrency: Some(8),
        ..TenantSettings::default()
    };
    let t = reg.create_tenant("acme", settings.clone()).unwrap();
    assert_eq!(t.settings, settings);
    assert!(matches!(reg.create_tenant("acme", TenantSettings::default()), Err(RegistryError::AlreadyExists { .. })));
    reg.create_tenant("beta-2", TenantSettings::default()).unwrap();
    let ids: Vec<_> = reg.list_tenants().unwrap().into_iter().map(|t| t.id).collect();
    assert_eq!(ids, ["acme", "beta-2"]);
    let updated = reg.update_tenant("acme", TenantSettings { weight: 5, ..TenantSettings::default() }).unwrap();
    assert_eq!(updated.settings.weight, 5);
    assert_eq!(updated.created_ms, t.created_ms);
    assert!(matches!(reg.update_tenant("nope", TenantSettings::default()), Err(RegistryError::NotFound { .. })));
    let zero = TenantSettings { weight: 0, ..TenantSettings::default() };
    assert!(matches!(reg.create_tenant("z", zero), Err(RegistryError::InvalidInput(_))));
    reg.delete_tenant("beta-2").unwrap();
    assert!(matches!(reg.get_tenant("beta-2"), Err(RegistryError::NotFound { .. })));
    assert!(matches!(reg.delete_tenant("beta-2"), Err(RegistryError::NotFound { .. })));
}

fn weights_are_bounded_and_a_refused_change_changes_nothing(env: Env) {
    let reg = env.with_tenant("acme");
    let huge = TenantSettings { weight: u32::MAX, ..TenantSettings::default() };
    assert!(matches!(reg.create_tenant("big", huge.clone()), Err(RegistryError::InvalidInput(_))));
    assert!(matches!(reg.update_tenant("acme", huge), Err(RegistryError::InvalidInput(_))));
    let at_bound = reg.change_tenant("acme", |s| Ok(TenantSettings { weight: MAX_WEIGHT, ..s.clone() })).unwrap();
    assert_eq!(at_bound.settings.weight, MAX_WEIGHT);
    let over = reg.change_tenant("acme", |s| Ok(TenantSettings { weight: MAX_WEIGHT + 1, ..s.clone() }));
    assert!(matches!(over, Err(RegistryError::InvalidInput(_))));
    assert_eq!(reg.get_tenant("acme").unwrap().settings.weight, MAX_WEIGHT, "the refused change changed nothing");
    let options = FunctionOptions { weight: Some(u32::MAX), ..FunctionOptions::default() };
    assert!(matches!(reg.deploy("acme", "f", b"x", options), Err(RegistryError::InvalidInput(_))));
}

#[test]
fn records_stored_before_the_policy_fields_still_load() {
    // A tenant as an older build stored it: no `max_priority`.
    let old = r#"{"id":"acme","created_ms":1,"settings":{"weight":3,"memory_quota_bytes":null,"max_concurrency":4}}"#;
    let t: sluice_registry::Tenant = serde_json::from_str(old).unwrap();
    assert_eq!(t.settings.weight, 3);
    assert_eq!(t.settings.max_priority, None, "falls back to the server's default class");
    assert_eq!(t.settings.max_concurrency, Some(4));
    assert!(PriorityClass::Batch < PriorityClass::Latency);
}

fn temporary_files_of_an_interrupted_upload_are_removed_at_open(env: Env) {
    drop(env.open());
    let stale = env.dir().join("blobs/sha256/.tmp-4242-00000000deadbeef");
    std::fs::write(&stale, b"half an upload").unwrap();
    // Older than the grace period that spares other nodes' uploads in flight.
    let old = std::time::SystemTime::now() - sluice_registry::BLOB_GRACE * 2;
    std::fs::File::options().append(true).open(&stale).unwrap().set_modified(old).unwrap();
    let fresh = env.dir().join("blobs/sha256/.tmp-4243-00000000cafef00d");
    std::fs::write(&fresh, b"another node's upload").unwrap();
    let _reg = env.open_node();
    assert!(!stale.exists(), "a restart removes what a crash mid-upload left");
    assert_eq!(fresh.exists(), env.is_postgres(), "a shared directory keeps a young temporary file");
}

#[test]
fn settings_json_defaults() {
    let s: TenantSettings = serde_json::from_str("{}").unwrap();
    assert_eq!(s, TenantSettings::default());
    let o: FunctionOptions = serde_json::from_str(r#"{"priority":"batch"}"#).unwrap();
    assert_eq!(o.priority, PriorityClass::Batch);
    assert_eq!(o.timeout_ms, 30_000);
    assert_eq!(o.memory_limit_bytes, 256 << 20);
    assert!(serde_json::from_str::<FunctionOptions>(r#"{"prio":"batch"}"#).is_err());
}

fn name_validation(env: Env) {
    let reg = env.with_tenant("acme");
    let long = "a".repeat(64);
    for bad in ["", "-a", "A", "a_b", "a.b", "a/b", "ä", long.as_str()] {
        let err = reg.create_tenant(bad, TenantSettings::default()).unwrap_err();
        assert!(matches!(err, RegistryError::InvalidName { kind: "tenant", .. }), "{bad:?}: {err}");
    }
    reg.create_tenant(&"a".repeat(63), TenantSettings::default()).unwrap();
    for bad in ["", "_a", ".a", "A", "a/b", "a b", long.as_str()] {
        let err = reg.deploy("acme", bad, b"x", FunctionOptions::default()).unwrap_err();
        assert!(matches!(err, RegistryError::InvalidName { kind: "function", .. }), "{bad:?}: {err}");
    }
    for good in ["a", "0", "m-1_v2.onnx"] {
        reg.deploy("acme", good, b"x", FunctionOptions::default()).unwrap();
    }
    for bad in ["", ".hidden", "../x", "a/b", "a b"] {
        let err = reg.put_artifact("acme", "a", bad, b"w").unwrap_err();
        assert!(matches!(err, RegistryError::InvalidName { kind: "artifact", .. }), "{bad:?}: {err}");
    }
    reg.put_artifact("acme", "a", "Model.safetensors", b"w").unwrap();
    assert!(sluice_registry::Digest::parse("../../etc/passwd").is_err());
}

fn keys_authenticate_revoke_and_are_stored_hashed(env: Env) {
    let reg = env.with_tenant("acme");
    reg.create_tenant("other", TenantSettings::default()).unwrap();
    let (key_id, key) = reg.issue_key("acme").unwrap();
    assert!(key.starts_with("sk_acme_"), "{key}");
    let (other_id, other_key) = reg.issue_key("other").unwrap();
    assert_eq!(reg.authenticate(&key).unwrap(), Some(Principal::Tenant("acme".into())));
    assert_eq!(reg.authenticate(&other_key).unwrap(), Some(Principal::Tenant("other".into())));
    assert_eq!(reg.authenticate("sk_acme_wrong").unwrap(), None);
    assert_eq!(reg.authenticate("").unwrap(), None);
    let mut tampered = key.clone();
    tampered.pop();
    tampered.push('x');
    assert_eq!(reg.authenticate(&tampered).unwrap(), None);
    assert!(matches!(reg.issue_key("ghost"), Err(RegistryError::NotFound { .. })));
    assert_eq!(reg.list_tenant_keys("acme").unwrap().len(), 1);

    // A tenant cannot revoke another tenant's key.
    assert!(matches!(reg.revoke_tenant_key("acme", &other_id), Err(RegistryError::NotFound { .. })));
    assert!(reg.authenticate(&other_key).unwrap().is_some());

    // The plaintext never reaches the disk.
    reg.flush().unwrap();
    let secret = key.rsplit('_').next().unwrap().to_owned();
    drop(reg);
    let bytes = env.stored_bytes();
    assert!(contains(&bytes, key_id.as_bytes()), "the scan sees the stored key metadata");
    assert!(!contains(&bytes, secret.as_bytes()), "plaintext key found in the data directory");
    assert!(!contains(&bytes, key.as_bytes()));

    let reg = env.open();
    assert_eq!(reg.authenticate(&key).unwrap(), Some(Principal::Tenant("acme".into())));
    reg.revoke_tenant_key("acme", &key_id).unwrap();
    assert_eq!(reg.authenticate(&key).unwrap(), None);
    assert!(matches!(reg.revoke_key(&key_id), Err(RegistryError::NotFound { .. })));

    // Deleting a tenant revokes its keys.
    reg.delete_tenant("other").unwrap();
    assert_eq!(reg.authenticate(&other_key).unwrap(), None);
}

fn admin_key_lifecycle(env: Env) {
    let reg = env.open();
    let generated = reg.ensure_admin_key(None).unwrap().expect("first start generates a key");
    assert_eq!(reg.authenticate(&generated).unwrap(), Some(Principal::Admin));
    assert_eq!(reg.ensure_admin_key(None).unwrap(), None, "only returned once");
    drop(reg);
    assert!(!contains(&env.stored_bytes(), generated.as_bytes()));

    let reg = env.open();
    assert_eq!(reg.ensure_admin_key(None).unwrap(), None);
    assert_eq!(reg.authenticate(&generated).unwrap(), Some(Principal::Admin));
    // An operator-provided key replaces the generated one.
    let env_key = "operator-chosen-admin-key-123".to_owned();
    assert_eq!(reg.ensure_admin_key(Some(env_key.clone())).unwrap(), None);
    assert_eq!(reg.authenticate(&env_key).unwrap(), Some(Principal::Admin));
    assert_eq!(reg.authenticate(&generated).unwrap(), None);
    assert_eq!(reg.ensure_admin_key(Some(env_key.clone())).unwrap(), None);
    assert_eq!(reg.list_keys().unwrap().len(), 1);
    assert!(matches!(reg.ensure_admin_key(Some("short".into())), Err(RegistryError::InvalidInput(_))));
    assert!(matches!(reg.ensure_admin_key(Some("has a space in it!!".into())), Err(RegistryError::InvalidInput(_))));
}

fn provided_tenant_keys_are_stored_hashed_once_and_never_cross_principals(env: Env) {
    let reg = env.open();
    let key = "a-tenant-key-from-a-mounted-secret-0123456789";
    assert!(matches!(reg.ensure_tenant_key("acme", key), Err(RegistryError::NotFound { .. })));
    reg.create_tenant("acme", TenantSettings::default()).unwrap();
    assert!(reg.ensure_tenant_key("acme", key).unwrap(), "added");
    assert!(!reg.ensure_tenant_key("acme", key).unwrap(), "a restart adds nothing");
    assert_eq!(reg.authenticate(key).unwrap(), Some(Principal::Tenant("acme".into())));
    assert_eq!(reg.list_tenant_keys("acme").unwrap().len(), 1);
    // The same key for another tenant, or the admin's key for a tenant, is refused.
    reg.create_tenant("beta", TenantSettings::default()).unwrap();
    assert!(matches!(reg.ensure_tenant_key("beta", key), Err(RegistryError::InvalidInput(_))));
    let admin = "an-operator-admin-key-that-is-long-enough";
    reg.ensure_admin_key(Some(admin.into())).unwrap();
    assert!(matches!(reg.ensure_tenant_key("beta", admin), Err(RegistryError::InvalidInput(_))));
    assert_eq!(reg.authenticate(admin).unwrap(), Some(Principal::Admin));
    for bad in ["short", "a key with spaces in it that is long enough"] {
        assert!(matches!(reg.ensure_tenant_key("beta", bad), Err(RegistryError::InvalidInput(_))), "{bad}");
    }
    assert!(matches!(reg.ensure_tenant_key("Bad Name", key), Err(RegistryError::InvalidName { .. })));
    drop(reg);
    assert!(!contains(&env.stored_bytes(), key.as_bytes()), "only the hash is stored");
}

#[test]
fn second_open_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _reg = Registry::open(dir.path()).unwrap();
    let err = Registry::open(dir.path()).unwrap_err();
    assert!(matches!(err, RegistryError::InUse { .. }), "{err}");
    assert!(err.to_string().contains("in use by another sluice process"), "{err}");
}

on_both!(
    tenants_crud_and_settings,
    weights_are_bounded_and_a_refused_change_changes_nothing,
    temporary_files_of_an_interrupted_upload_are_removed_at_open,
    name_validation,
    keys_authenticate_revoke_and_are_stored_hashed,
    admin_key_lifecycle,
    provided_tenant_keys_are_stored_hashed_once_and_never_cross_principals,
);
