//! The PostgreSQL backend: every node of a platform opens the same database.
//!
//! The trees are rows of one table, `sluice_kv (tree text, key bytea, value bytea,
//! primary key (tree, key))`; `bytea` compares bytewise, so a prefix scan is a key range
//! in the same order as sled's. Transactions run at `SERIALIZABLE` and are retried after
//! a serialization failure or a deadlock, so two nodes deploying the same function get
//! consecutive version numbers. Each committed transaction sends
//! `NOTIFY sluice_registry, '<kind>:<tenant>/<name>'` for what it changed, inside the
//! transaction (delivered only if it commits); see [`crate::watch`].
//!
//! The schema is created and migrated by sluice at open: `sluice_schema_migrations`
//! lists the migrations applied, and [`MIGRATIONS`] are applied in one transaction under
//! an advisory lock, so nodes starting together do not race. A database migrated by a
//! newer build is refused ([`RegistryError::SchemaTooNew`]).
//!
//! The blocking client runs its own small tokio runtime, which may not start inside
//! another's async context: every call goes through [`blocking`], so the registry may
//! be called from a multi-threaded runtime's async code too (as `Platform::open` is),
//! not only from blocking threads.
//!
//! Connections come from a small pool (a `Mutex<Vec<Client>>`: the registry's calls are
//! short and blocking); a connection that failed is dropped, not returned. A server that
//! cannot be reached (refused, timed out, lost, shutting down) gives
//! [`RegistryError::Unavailable`]. TLS follows the URL's `sslmode` (`disable`, `prefer`,
//! the default, or `require`; `verify-ca` / `verify-full` read as `require`): with TLS
//! the server's certificate is always verified against the system's roots.

use std::sync::Mutex;
use std::time::Duration;

use ::postgres::config::SslMode;
use ::postgres::error::SqlState;
use ::postgres::{Client, Config, IsolationLevel, NoTls, Transaction};
use postgres_native_tls::MakeTlsConnector;

use super::{Entry, Tree, TxError, TxResult};
use crate::change::{CHANNEL, Change};
use crate::error::{RegistryError, Result};

/// The table of every tree's rows.
const KV: &str = "sluice_kv";

/// The schema's migrations: (version, description, SQL), applied in order at open.
pub(crate) const MIGRATIONS: &[(i32, &str, &str)] = &[(
    1,
    "key-value trees",
    "CREATE TABLE sluice_kv (tree text NOT NULL, key bytea NOT NULL, value bytea NOT NULL, PRIMARY KEY (tree, key))",
)];

/// The advisory lock held while migrating (`'sluice'` and 1).
const MIGRATION_LOCK: i64 = 0x736c_7569_6365_0001;
/// The advisory lock blob writers hold shared (from placing a blob to committing the
/// metadata that references it) and gc holds exclusively, across every node.
const BLOB_LOCK: i64 = 0x736c_7569_6365_0002;

/// How long opening a connection may take unless the URL says (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts of a transaction that keeps failing to serialize.
const MAX_ATTEMPTS: u32 = 20;
/// Connections kept idle in the pool.
const MAX_IDLE: usize = 8;

/// Runs `f`, which blocks on the PostgreSQL client, outside the caller's async context
/// if it runs on a multi-threaded tokio runtime's worker (`block_in_place`). From a
/// current-thread runtime's async context the client cannot block at all: call the
/// registry through `spawn_blocking` there.
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// How to open a connection: the parsed URL and its TLS.
#[derive(Clone)]
pub(crate) struct Connector {
    config: Config,
    tls: Option<MakeTlsConnector>,
}

impl Connector {
    /// Parses a `postgres://` or `postgresql://` URL.
    pub(crate) fn parse(url: &str) -> Result<Connector> {
        // tokio-postgres knows disable / prefer / require; it verifies certificates
        // whenever it uses TLS, which is what libpq's verify modes ask for.
        let url = url.replace("sslmode=verify-full", "sslmode=require").replace("sslmode=verify-ca", "sslmode=require");
        let mut config: Config =
            url.parse().map_err(|e| RegistryError::InvalidInput(format!("invalid PostgreSQL URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("sluice");
        }
        let tls = match config.get_ssl_mode() {
            SslMode::Disable => None,
            _ => {
                let connector = native_tls::TlsConnector::new()
                    .map_err(|e| RegistryError::storage("setting up TLS for PostgreSQL", e))?;
                Some(MakeTlsConnector::new(connector))
            }
        };
        Ok(Connector { config, tls })
    }

    /// A new connection ([`RegistryError::Unavailable`] if the server cannot be reached).
    pub(crate) fn connect(&self) -> Result<Client> {
        let client = match &self.tls {
            None => self.config.connect(NoTls),
            Some(tls) => self.config.connect(tls.clone()),
        };
        client.map_err(|e| pg_error("connecting to PostgreSQL", e))
    }
}

/// The registry's database.
pub(crate) struct PgStore {
    connector: Connector,
    idle: Mutex<Vec<Client>>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // Closing a connection blocks on the client's runtime.
        let idle = self.idle.get_mut().unwrap_or_else(|e| e.into_inner());
        blocking(|| idle.clear());
    }
}

/// A cluster-wide lock on the blob directory (see [`BLOB_LOCK`]), released on drop.
pub(crate) struct BlobLock<'a> {
    store: &'a PgStore,
    client: Option<Client>,
}

impl Drop for BlobLock<'_> {
    fn drop(&mut self) {
        if let Some(mut client) = self.client.take() {
            blocking(|| {
                // A connection that cannot unlock is dropped, which unlocks too.
                if client.execute("SELECT pg_advisory_unlock_all()", &[]).is_ok() {
                    self.store.give_back(client);
                }
            });
        }
    }
}

impl PgStore {
    /// Connects and brings the schema up to date.
    pub(crate) fn open(url: &str) -> Result<PgStore> {
        let store = PgStore { connector: Connector::parse(url)?, idle: Mutex::default() };
        let mut client = store.connector.connect()?;
        migrate(&mut client)?;
        store.give_back(client);
        Ok(store)
    }

    /// How to open connections (for the watcher's own).
    pub(crate) fn connector(&self) -> &Connector {
        &self.connector
    }

    pub(crate) fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.read("reading the registry", |c| {
            let row =
                c.query_opt(&format!("SELECT value FROM {KV} WHERE tree = $1 AND key = $2"), &[&tree.name(), &key])?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    pub(crate) fn scan(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<Entry>> {
        self.read("scanning the registry", |c| scan_on(c, tree, prefix))
    }

    /// Runs `f` in a `SERIALIZABLE` transaction, again after a serialization failure;
    /// sends its changes' notifications and commits. `f` hands the transaction back with
    /// the changes it made and its result.
    pub(crate) fn transaction<T>(
        &self,
        f: impl for<'a> Fn(Transaction<'a>) -> (Transaction<'a>, Vec<Change>, TxResult<T>),
    ) -> Result<T> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (mut client, pooled) = self.client()?;
            let done = match client.build_transaction().isolation_level(IsolationLevel::Serializable).start() {
                // A pooled connection the server has closed since: one more try on a new one.
                Err(e) if pooled && is_unavailable(&e) => continue,
                Err(e) => return Err(pg_error("beginning a transaction", e)),
                Ok(tx) => {
                    let (tx, changes, out) = f(tx);
                    match out {
                        Ok(value) => notify_and_commit(tx, &changes).map(|()| Ok(value)),
                        Err(TxError::Abort(e)) => tx.rollback().map(|()| Err(e)),
                        Err(TxError::Pg(e)) => Err(e),
                    }
                }
            };
            match done {
                Ok(result) => {
                    self.give_back(client);
                    return result;
                }
                Err(e) if attempt < MAX_ATTEMPTS && is_retryable(&e) => {
                    self.give_back(client);
                    // Back off a little, differently per node, so two retrying nodes part.
                    std::thread::sleep(Duration::from_millis(rand::random_range(1..=5u64) * u64::from(attempt)));
                }
                Err(e) => return Err(pg_error("running a registry transaction", e)),
            }
        }
    }

    /// Takes the cluster-wide blob lock, shared (blob writers) or exclusive (gc).
    pub(crate) fn blob_lock(&self, exclusive: bool) -> Result<BlobLock<'_>> {
        let sql = if exclusive { "SELECT pg_advisory_lock($1)" } else { "SELECT pg_advisory_lock_shared($1)" };
        let (client, ()) = self.fresh_or_pooled("taking the blob lock", |c| c.execute(sql, &[&BLOB_LOCK]).map(drop))?;
        Ok(BlobLock { store: self, client: Some(client) })
    }

    /// Runs an idempotent read, again on a new connection if a pooled one turns out dead.
    fn read<T>(&self, context: &str, f: impl Fn(&mut Client) -> Result<T, ::postgres::Error>) -> Result<T> {
        let (client, value) = self.fresh_or_pooled(context, f)?;
        self.give_back(client);
        Ok(value)
    }

    /// Runs `f` on a pooled connection, or on a new one if the pooled one is dead;
    /// the connection with `f`'s result.
    fn fresh_or_pooled<T>(
        &self,
        context: &str,
        f: impl Fn(&mut Client) -> Result<T, ::postgres::Error>,
    ) -> Result<(Client, T)> {
        loop {
            let (mut client, pooled) = self.client()?;
            match f(&mut client) {
                Ok(value) => return Ok((client, value)),
                Err(e) if pooled && is_unavailable(&e) => continue,
                Err(e) => return Err(pg_error(context, e)),
            }
        }
    }

    /// A connection: an idle one (`true`) or a new one.
    fn client(&self) -> Result<(Client, bool)> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match pooled {
            Some(c) if !c.is_closed() => Ok((c, true)),
            _ => Ok((self.connector.connect()?, false)),
        }
    }

    fn give_back(&self, client: Client) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE && !client.is_closed() {
            idle.push(client);
        }
    }
}

fn notify_and_commit(mut tx: Transaction<'_>, changes: &[Change]) -> Result<(), ::postgres::Error> {
    for change in changes {
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &change.payload()])?;
    }
    tx.commit()
}

/// Creates or migrates the schema, under the migration lock, in one transaction.
fn migrate(client: &mut Client) -> Result<()> {
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    let ctx = |e| pg_error("migrating the registry schema", e);
    let mut tx = client.transaction().map_err(ctx)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(ctx)?;
    // No "already exists, skipping" notice at every start.
    tx.batch_execute("SET LOCAL client_min_messages = warning").map_err(ctx)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS sluice_schema_migrations (version integer PRIMARY KEY, \
         description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .map_err(ctx)?;
    let current: i32 =
        tx.query_one("SELECT coalesce(max(version), 0) FROM sluice_schema_migrations", &[]).map_err(ctx)?.get(0);
    if current > known {
        return Err(RegistryError::SchemaTooNew { found: current.to_string(), known: known.to_string() });
    }
    for &(version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.batch_execute(sql).map_err(ctx)?;
        tx.execute(
            "INSERT INTO sluice_schema_migrations (version, description) VALUES ($1, $2)",
            &[&version, &description],
        )
        .map_err(ctx)?;
        tracing::info!(version, description, "registry schema migrated");
    }
    tx.commit().map_err(ctx)
}

/// The smallest key above every key starting with `prefix` (`None`: no upper bound).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

fn scan_on(c: &mut impl ::postgres::GenericClient, tree: Tree, prefix: &[u8]) -> Result<Vec<Entry>, ::postgres::Error> {
    let rows = match prefix_end(prefix) {
        Some(end) => c.query(
            &format!("SELECT key, value FROM {KV} WHERE tree = $1 AND key >= $2 AND key < $3 ORDER BY key"),
            &[&tree.name(), &prefix, &end],
        )?,
        None => c.query(
            &format!("SELECT key, value FROM {KV} WHERE tree = $1 AND key >= $2 ORDER BY key"),
            &[&tree.name(), &prefix],
        )?,
    };
    Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
}

pub(super) fn tx_get(tx: &mut Transaction<'_>, tree: Tree, key: &[u8]) -> TxResult<Option<Vec<u8>>> {
    let row = tx.query_opt(&format!("SELECT value FROM {KV} WHERE tree = $1 AND key = $2"), &[&tree.name(), &key])?;
    Ok(row.map(|r| r.get(0)))
}

pub(super) fn tx_insert(tx: &mut Transaction<'_>, tree: Tree, key: &[u8], value: &[u8]) -> TxResult<()> {
    tx.execute(
        &format!(
            "INSERT INTO {KV} (tree, key, value) VALUES ($1, $2, $3) \
             ON CONFLICT (tree, key) DO UPDATE SET value = excluded.value"
        ),
        &[&tree.name(), &key, &value],
    )?;
    Ok(())
}

pub(super) fn tx_remove(tx: &mut Transaction<'_>, tree: Tree, key: &[u8]) -> TxResult<bool> {
    let n = tx.execute(&format!("DELETE FROM {KV} WHERE tree = $1 AND key = $2"), &[&tree.name(), &key])?;
    Ok(n > 0)
}

pub(super) fn tx_scan(tx: &mut Transaction<'_>, tree: Tree, prefix: &[u8]) -> TxResult<Vec<Entry>> {
    Ok(scan_on(tx, tree, prefix)?)
}

/// A serialization failure or deadlock: the transaction may succeed if run again.
fn is_retryable(e: &::postgres::Error) -> bool {
    matches!(e.code(), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// Whether `e` says the server cannot be reached now (rather than refusing a statement).
pub(crate) fn is_unavailable(e: &::postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let code = code.code();
        // Connection exceptions, shutting down / starting up, too many connections.
        return code.starts_with("08") || code.starts_with("57P") || code == "53300";
    }
    // tokio-postgres's kinds are private: I/O (refused, reset) carries an io::Error;
    // a connect timeout says so.
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
        || e.to_string().starts_with("timeout")
        || e.to_string().starts_with("error connecting")
}

/// The registry's error for a PostgreSQL failure while doing `context`.
pub(crate) fn pg_error(context: &str, e: ::postgres::Error) -> RegistryError {
    if is_unavailable(&e) {
        RegistryError::Unavailable { context: context.to_owned(), source: Box::new(e) }
    } else {
        RegistryError::storage(context.to_owned(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_scan_is_a_key_range() {
        assert_eq!(prefix_end(b"acme/"), Some(b"acme0".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn urls_parse_with_their_tls_mode() {
        assert!(Connector::parse("postgres://u@localhost/db?sslmode=disable").unwrap().tls.is_none());
        assert!(Connector::parse("postgresql://u@localhost/db?sslmode=verify-full").unwrap().tls.is_some());
        assert!(matches!(
            Connector::parse("postgres://u@localhost/db?sslmode=nope"),
            Err(RegistryError::InvalidInput(_))
        ));
    }
}
