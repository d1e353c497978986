//! Throw-away PostgreSQL servers for tests: [`shared`] (one per test binary, started on
//! first use, a database per test through [`new_database`]) and [`Server::start`] (a
//! test's own, which it can stop and start again).
//!
//! A server runs from Debian's binaries (`/usr/lib/postgresql/<version>/bin`, the
//! newest; `SLUICE_PG_BIN` names another directory) in a temporary directory: `initdb`
//! with trust authentication, then `pg_ctl start` on a free port of 127.0.0.1 with its
//! unix socket in that directory and `fsync` on. PostgreSQL refuses to run as root, so
//! as root both run as the `postgres` user (through `runuser`), owning the directory. A
//! small shell loop watches the test process and stops the server (and removes the
//! directory) once it has exited, since statics are never dropped.
//!
//! This file is shared by path with the registry's tests (`runtime/registry/tests/common`),
//! which cannot depend on `sluice-tests`: it uses nothing but std and `postgres`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A running server.
pub struct Server {
    bin: PathBuf,
    root: PathBuf,
    port: u16,
    as_postgres: bool,
    /// Stopped and removed on drop (not the shared one, which is a static).
    owned: bool,
}

impl Server {
    /// A server of the caller's own, stopped and removed when dropped; `Err(reason)`
    /// when PostgreSQL cannot run here.
    pub fn start() -> Result<Server, String> {
        let mut server = start()?;
        server.owned = true;
        Ok(server)
    }

    /// The server's TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}?sslmode=disable", self.port)
    }

    /// Creates database `db`; its URL.
    pub fn create_database(&self, db: &str) -> Result<String, String> {
        let mut admin = connect(&self.url("postgres"))?;
        admin.batch_execute(&format!("CREATE DATABASE {db}")).map_err(|e| format!("creating database {db}: {e}"))?;
        Ok(self.url(db))
    }

    /// Stops the server (`pg_ctl stop -m fast`: connections are closed, what was
    /// committed stays) and waits until it is down.
    pub fn stop(&self) -> Result<(), String> {
        self.pg_ctl(&["-m", "fast", "-w", "stop"])
    }

    /// Starts a stopped server again on the same port and data, and waits until it
    /// accepts connections.
    pub fn start_again(&self) -> Result<(), String> {
        self.run_server().and_then(|()| wait_accepting(self))
    }

    /// `pg_ctl start` with the server's log file and options.
    fn run_server(&self) -> Result<(), String> {
        let log = self.root.join("server.log").display().to_string();
        self.pg_ctl(&["-w", "-l", &log, "-o", &options(&self.root, self.port), "start"])
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let out = command(&self.bin.join("pg_ctl"), self.as_postgres)
            .arg("-D")
            .arg(self.root.join("data"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running pg_ctl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("pg_ctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr)))
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.owned {
            let _ = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

static SHARED: OnceLock<Result<Server, String>> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// The test binary's shared server, started on first use; `Err(reason)` when it cannot
/// run here.
pub fn shared() -> Result<&'static Server, String> {
    SHARED.get_or_init(start).as_ref().map_err(Clone::clone)
}

/// The URL of a new, empty database on the shared server.
pub fn new_database() -> Result<String, String> {
    let name = format!("t{}", DATABASES.fetch_add(1, Ordering::Relaxed));
    shared()?.create_database(&name)
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

/// The server's options: its port, its socket directory, loopback only, fsync on.
fn options(root: &Path, port: u16) -> String {
    format!("-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=on -c max_connections=300", root.display())
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
    let started = start_in(bin, &root);
    if started.is_err() {
        let _ = std::fs::remove_dir_all(&root);
    }
    started
}

fn start_in(bin: PathBuf, root: &Path) -> Result<Server, String> {
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
    let server = Server { bin, root: root.to_owned(), port: free_port()?, as_postgres, owned: false };
    server.run_server()?;
    // Stops the server and removes its directory once the test process has gone.
    let watcher = r#"
        while [ -d "/proc/$3" ]; do sleep 0.5; done
        "$1/pg_ctl" -D "$2/data" -m immediate -w stop >/dev/null 2>&1
        rm -rf "$2"
    "#;
    command(Path::new("/bin/sh"), as_postgres)
        .args(["-c", watcher, "sh"])
        .arg(&server.bin)
        .arg(root)
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the server's watcher: {e}"))?;
    wait_accepting(&server)?;
    Ok(server)
}

fn wait_accepting(server: &Server) -> Result<(), String> {
    let started = Instant::now();
    loop {
        match connect(&server.url("postgres")) {
            Ok(_) => return Ok(()),
            Err(e) if started.elapsed() > Duration::from_secs(60) => {
                let log = std::fs::read_to_string(server.root.join("server.log")).unwrap_or_default();
                return Err(format!("postgres did not start: {e}\n{log}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
