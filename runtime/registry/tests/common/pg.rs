//! A throw-away PostgreSQL server for the registry's tests: one per test binary, started
//! on first use, with a database per test.
//!
//! The server runs from Debian's binaries (`/usr/lib/postgresql/<version>/bin`, the
//! newest; `SLUICE_PG_BIN` names another directory) in a temporary directory: `initdb`
//! with trust authentication, then `postgres` on a free port of 127.0.0.1 with its unix
//! socket in that directory and `fsync` on. PostgreSQL refuses to run as root, so as
//! root both run as the `postgres` user (through `runuser`), owning the directory. A
//! small shell loop watches the test process and stops the server (and removes the
//! directory) once it has exited, since statics are never dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A running server.
pub struct Server {
    port: u16,
}

impl Server {
    /// The server's TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}?sslmode=disable", self.port)
    }
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// The server, started on first use; `Err(reason)` when it cannot run here.
pub fn server() -> Result<&'static Server, String> {
    SERVER.get_or_init(start).as_ref().map_err(Clone::clone)
}

/// The URL of a new, empty database on the shared server.
pub fn new_database() -> Result<String, String> {
    let server = server()?;
    let name = format!("t{}", DATABASES.fetch_add(1, Ordering::Relaxed));
    let mut admin = connect(&server.url("postgres"))?;
    admin.batch_execute(&format!("CREATE DATABASE {name}")).map_err(|e| format!("creating database {name}: {e}"))?;
    Ok(server.url(&name))
}

/// A plain client (for the tests' own SQL).
pub fn connect(url: &str) -> Result<postgres::Client, String> {
    postgres::Client::connect(url, postgres::NoTls).map_err(|e| format!("connecting to {url}: {e}"))
}

/// Where PostgreSQL's binaries are, if installed.
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SLUICE_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program` run as the `postgres` user when we are root.
fn command(program: &Path, as_postgres: bool) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

fn start() -> Result<Server, String> {
    let bin = bin_dir().ok_or("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")?;
    let root = std::env::temp_dir().join(format!(
        "sluice-pg-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos()
    ));
    let started = start_in(&bin, &root);
    if started.is_err() {
        let _ = std::fs::remove_dir_all(&root);
    }
    started
}

fn start_in(bin: &Path, root: &Path) -> Result<Server, String> {
    let as_postgres = is_root();
    std::fs::create_dir(root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    if as_postgres {
        let chown = Command::new("chown").arg("postgres:postgres").arg(root).status();
        if !chown.is_ok_and(|s| s.success()) {
            return Err(format!("could not give {} to the postgres user", root.display()));
        }
    }
    let data = root.join("data");
    let initdb = command(&bin.join("initdb"), as_postgres)
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
        .output()
        .map_err(|e| format!("running initdb: {e}"))?;
    if !initdb.status.success() {
        return Err(format!("initdb failed: {}", String::from_utf8_lossy(&initdb.stderr)));
    }
    let port = free_port()?;
    let script = r#"
        "$1/postgres" -D "$2/data" -p "$3" -k "$2" -c listen_addresses=127.0.0.1 -c fsync=on \
            -c max_connections=300 >"$2/server.log" 2>&1 &
        pg=$!
        while [ -d "/proc/$4" ] && kill -0 "$pg" 2>/dev/null; do sleep 0.5; done
        kill -INT "$pg" 2>/dev/null
        wait "$pg"
        rm -rf "$2"
    "#;
    command(Path::new("/bin/sh"), as_postgres)
        .args(["-c", script, "sh"])
        .arg(bin)
        .arg(root)
        .arg(port.to_string())
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting postgres: {e}"))?;
    let server = Server { port };
    let started = Instant::now();
    loop {
        match connect(&server.url("postgres")) {
            Ok(_) => return Ok(server),
            Err(e) if started.elapsed() > Duration::from_secs(60) => {
                let log = std::fs::read_to_string(root.join("server.log")).unwrap_or_default();
                return Err(format!("postgres did not start: {e}\n{log}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
