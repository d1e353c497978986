//! Several nodes on one PostgreSQL registry: concurrent deploys number versions
//! consistently, a key issued on one node authenticates on the other, changes reach the
//! other node's watcher (and a lost connection ends in a resync), a newer schema is
//! refused, an unreachable database is `Unavailable`, and gc spares what another node
//! has just written. Each test skips, saying why, where PostgreSQL is not installed.

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::{Env, pg};
use sluice_registry::{Change, FunctionOptions, Principal, Registry, RegistryError, StoragePolicy, TenantSettings};

/// Two nodes on the same database and blob directory, with tenant `acme`.
fn two_nodes() -> Option<(Env, Registry, Registry)> {
    let env = Env::postgres()?;
    let a = env.open();
    let b = env.open();
    a.create_tenant("acme", TenantSettings::default()).unwrap();
    Some((env, a, b))
}

/// The next change `watcher` yields that `wanted` accepts, within a few seconds.
fn wait_for(watcher: &sluice_registry::Watcher, wanted: impl Fn(&Change) -> bool) -> Change {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match watcher.recv_timeout(left) {
            Ok(change) if wanted(&change) => return change,
            Ok(_) => {}
            Err(e) => panic!("no such change arrived: {e}"),
        }
    }
}

#[test]
fn concurrent_deploys_on_two_nodes_number_versions_consistently() {
    let Some((_env, a, b)) = two_nodes() else { return };
    let nodes = [Arc::new(a), Arc::new(b)];
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let reg = nodes[t % 2].clone();
            std::thread::spawn(move || {
                for i in 0..5 {
                    reg.deploy("acme", "f", format!("node{}-t{t}-{i}", t % 2).as_bytes(), FunctionOptions::default())
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for reg in &nodes {
        let rec = reg.get_function("acme", "f").unwrap();
        let numbers: Vec<u32> = rec.versions.iter().map(|v| v.version).collect();
        assert_eq!(numbers, (1..=20).collect::<Vec<_>>());
        for v in &rec.versions {
            reg.read_blob(&v.component.digest).unwrap();
        }
    }
}

#[test]
fn a_key_issued_on_one_node_authenticates_on_the_other() {
    let Some((_env, a, b)) = two_nodes() else { return };
    let (key_id, key) = a.issue_key("acme").unwrap();
    assert_eq!(b.authenticate(&key).unwrap(), Some(Principal::Tenant("acme".into())));
    b.revoke_key(&key_id).unwrap();
    assert_eq!(a.authenticate(&key).unwrap(), None);
    // Two nodes starting together with no admin key: one generates it, the other sees it.
    let generated = [a.ensure_admin_key(None).unwrap(), b.ensure_admin_key(None).unwrap()];
    assert_eq!(generated.iter().flatten().count(), 1, "{generated:?}");
}

#[test]
fn the_other_node_hears_of_a_deploy_and_a_delete() {
    let Some((_env, a, b)) = two_nodes() else { return };
    let watcher = a.watch().unwrap();
    assert!(watcher.is_live());
    let f = Change::Function { tenant: "acme".into(), name: "f".into() };
    b.deploy("acme", "f", b"comp", FunctionOptions::default()).unwrap();
    wait_for(&watcher, |c| *c == f);
    b.delete_function("acme", "f").unwrap();
    wait_for(&watcher, |c| *c == f);
    assert!(matches!(a.get_function("acme", "f"), Err(RegistryError::NotFound { .. })));
    let (key_id, _) = b.issue_key("acme").unwrap();
    wait_for(&watcher, |c| *c == Change::Key { tenant: Some("acme".into()), key_id: key_id.clone() });
    b.delete_tenant("acme").unwrap();
    wait_for(&watcher, |c| *c == Change::Tenant { tenant: "acme".into() });
    // A refused change announces nothing: the next change heard is the later one.
    assert!(b.delete_function("acme", "f").is_err());
    b.create_tenant("beta", TenantSettings::default()).unwrap();
    assert_eq!(wait_for(&watcher, |_| true), Change::Tenant { tenant: "beta".into() });
}

#[test]
fn a_watcher_that_lost_its_connection_reconnects_and_asks_for_a_resync() {
    let Some((env, a, b)) = two_nodes() else { return };
    let watcher = a.watch().unwrap();
    let mut admin = pg::connect(env.url()).unwrap();
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    assert_eq!(wait_for(&watcher, |_| true), Change::Resync);
    b.deploy("acme", "g", b"comp", FunctionOptions::default()).unwrap();
    wait_for(&watcher, |c| *c == Change::Function { tenant: "acme".into(), name: "g".into() });
}

#[test]
fn async_code_on_a_multi_threaded_runtime_may_call_the_registry() {
    let Some(env) = Env::postgres() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // On the thread that blocks on the runtime (as `sluice serve` opens its platform)…
    let reg = Arc::new(rt.block_on(async { env.with_tenant("acme") }));
    // …and on a worker.
    let worker = reg.clone();
    rt.block_on(async move {
        tokio::spawn(async move {
            worker.deploy("acme", "f", b"comp", FunctionOptions::default()).unwrap();
            worker.gc().unwrap();
            drop(worker.watch().unwrap());
        })
        .await
        .unwrap();
    });
    let last = Arc::into_inner(reg).unwrap();
    rt.block_on(async move { drop(last) });
}

#[test]
fn sled_has_nothing_to_watch() {
    let env = Env::sled();
    let watcher = env.open().watch().unwrap();
    assert!(!watcher.is_live());
    assert_eq!(watcher.recv(), None);
}

#[test]
fn a_schema_newer_than_this_build_is_refused() {
    let Some(env) = Env::postgres() else { return };
    drop(env.open());
    let mut admin = pg::connect(env.url()).unwrap();
    admin
        .execute("INSERT INTO sluice_schema_migrations (version, description) VALUES (1000, 'from the future')", &[])
        .unwrap();
    let err = Registry::open_url(env.url(), env.dir().join("blobs")).unwrap_err();
    assert!(matches!(&err, RegistryError::SchemaTooNew { found, .. } if found == "1000"), "{err}");
}

#[test]
fn an_unreachable_database_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("postgres://sluice@127.0.0.1:{port}/nowhere?sslmode=disable&connect_timeout=2");
    let err = Registry::open_url(&url, dir.path()).unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
}

#[test]
fn a_database_that_goes_away_makes_changes_unavailable_until_it_returns() {
    let Some(env) = Env::postgres() else { return };
    let server = pg::shared().unwrap();
    let proxy = Proxy::start(server.port());
    let url = env.url().replace(&format!(":{}/", server.port()), &format!(":{}/", proxy.port()));
    let reg = Registry::open_url(&url, env.dir().join("blobs")).unwrap();
    reg.create_tenant("acme", TenantSettings::default()).unwrap();
    let watcher = reg.watch().unwrap();
    proxy.cut();
    let refused = reg.create_tenant("beta", TenantSettings::default()).unwrap_err();
    assert!(refused.is_unavailable(), "{refused:?}");
    let refused = reg.deploy("acme", "f", b"comp", FunctionOptions::default()).unwrap_err();
    assert!(refused.is_unavailable(), "{refused:?}");
    assert!(reg.get_tenant("acme").unwrap_err().is_unavailable());
    proxy.restore();
    reg.create_tenant("beta", TenantSettings::default()).unwrap();
    assert_eq!(reg.deploy("acme", "f", b"comp", FunctionOptions::default()).unwrap().version, 1);
    assert_eq!(wait_for(&watcher, |c| *c == Change::Resync), Change::Resync);
}

#[test]
fn gc_on_one_node_spares_what_the_other_has_just_written() {
    let Some(env) = Env::postgres() else { return };
    // Both with the real grace period.
    let a = env.open_node();
    let b = env.open_node();
    a.create_tenant("acme", TenantSettings::default()).unwrap();
    // An upload in flight on b, and a blob b placed that nothing references (yet).
    let mut upload = b.begin_upload().unwrap();
    upload.write(b"weights, the first half").unwrap();
    b.deploy("acme", "g", b"deployed then deleted", FunctionOptions::default()).unwrap();
    b.delete_function("acme", "g").unwrap();
    b.deploy("acme", "f", b"comp", FunctionOptions::default()).unwrap();
    let report = a.gc().unwrap();
    assert_eq!((report.removed, report.young, report.temp_files_removed), (0, 1, 0), "{report:?}");
    upload.write(b" and the second").unwrap();
    let w = b.put_artifact_upload("acme", "f", "w", upload, StoragePolicy::UNLIMITED).unwrap();
    assert_eq!(a.read_blob(&w.version.artifacts["w"].digest).unwrap(), b"weights, the first half and the second");
    // Without the grace period, the unreferenced blob goes.
    let report = a.with_gc_grace(Duration::ZERO).gc().unwrap();
    assert_eq!((report.removed, report.kept), (1, 2), "{report:?}");
}
