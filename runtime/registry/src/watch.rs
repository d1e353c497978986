//! Change notification: what other nodes changed in a shared registry.
//!
//! With PostgreSQL every committed mutation sends
//! `NOTIFY sluice_registry, '<kind>:<tenant>/<name>'` in its transaction (kinds
//! `function`, `key`, `tenant`; a tenant's `<name>` is empty, a key's is its key id and
//! the admin key's tenant is `admin`). [`crate::Registry::watch`] opens a dedicated
//! connection that `LISTEN`s and turns each notification into a [`Change`] on a std
//! channel. The connection is checked while idle; when it is lost the watcher reconnects
//! (backing off up to [`MAX_BACKOFF`]) and then sends [`Change::Resync`], because
//! notifications sent meanwhile are gone: the runtime reloads everything.
//!
//! A change says *what* to reload, not how it changed (a deploy and a delete both give
//! [`Change::Function`]); a node also hears its own changes. With sled (one process)
//! there is nobody else: the watcher's channel is closed from the start, so a loop over
//! [`Watcher::recv`] ends at once and the runtime treats both backends alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use ::postgres::fallible_iterator::FallibleIterator;

use crate::change::{CHANNEL, Change};
use crate::error::Result;
use crate::store::postgres::Connector;

/// The longest wait between two attempts to reconnect.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long the listening connection may stay silent before it is checked.
const IDLE_CHECK: Duration = Duration::from_secs(5);
/// How often the listening thread looks whether its [`Watcher`] was dropped.
const POLL: Duration = Duration::from_millis(250);

/// A stream of [`Change`]s, from [`crate::Registry::watch`]. Dropping it stops the
/// listening thread (within a fraction of a second) and closes its connection.
#[derive(Debug)]
pub struct Watcher {
    rx: Receiver<Change>,
    stop: Arc<AtomicBool>,
    live: bool,
}

impl Watcher {
    /// Waits for the next change; `None` once there will be none (always with sled).
    pub fn recv(&self) -> Option<Change> {
        self.rx.recv().ok()
    }

    /// Waits at most `timeout` for the next change (`Err(Disconnected)`: there will be
    /// none, always with sled).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Change, RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
    }

    /// Whether changes can arrive at all (`false` with sled).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// A watcher that never yields anything (one process: nobody else changes the registry).
    pub(crate) fn closed() -> Watcher {
        let (_, rx) = mpsc::channel();
        Watcher { rx, stop: Arc::new(AtomicBool::new(true)), live: false }
    }

    /// Connects, `LISTEN`s (before returning, so no later change is missed) and starts
    /// the listening thread.
    pub(crate) fn listen(connector: &Connector) -> Result<Watcher> {
        let client = listen_on(connector)?;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let connector = connector.clone();
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("sluice-registry-watch".into())
            .spawn(move || run(&connector, client, &tx, &stopped))
            .map_err(|e| crate::RegistryError::storage("starting the registry watcher", e))?;
        Ok(Watcher { rx, stop, live: true })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Iterator for &Watcher {
    type Item = Change;

    fn next(&mut self) -> Option<Change> {
        self.recv()
    }
}

fn listen_on(connector: &Connector) -> Result<::postgres::Client> {
    let mut client = connector.connect()?;
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(|e| crate::store::postgres::pg_error("listening for registry changes", e))?;
    Ok(client)
}

/// The listening thread: forwards notifications until stopped or unheard, reconnecting
/// (then sending [`Change::Resync`]) after the connection is lost.
fn run(connector: &Connector, mut client: ::postgres::Client, tx: &Sender<Change>, stop: &AtomicBool) {
    loop {
        let lost = forward(&mut client, tx, stop);
        if !lost {
            return;
        }
        tracing::warn!("registry watcher lost its connection; reconnecting");
        let mut backoff = Duration::from_millis(100);
        client = loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match listen_on(connector) {
                Ok(c) => break c,
                Err(e) => {
                    tracing::debug!(error = %e, "registry watcher could not reconnect");
                    sleep_unless_stopped(backoff, stop);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        };
        tracing::info!("registry watcher reconnected");
        if tx.send(Change::Resync).is_err() {
            return;
        }
    }
}

/// Forwards notifications; `true` when the connection was lost, `false` when stopped.
fn forward(client: &mut ::postgres::Client, tx: &Sender<Change>, stop: &AtomicBool) -> bool {
    let mut quiet_since = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let asked = Instant::now();
        let next = client.notifications().timeout_iter(POLL).next();
        // Before its timeout, the iterator ends only when the connection has.
        let ended = matches!(next, Ok(None)) && asked.elapsed() < POLL / 2;
        match next {
            Ok(Some(note)) => {
                quiet_since = Instant::now();
                match Change::parse(note.payload()) {
                    Some(change) => {
                        if tx.send(change).is_err() {
                            return false;
                        }
                    }
                    None => tracing::debug!(payload = note.payload(), "unknown registry notification"),
                }
            }
            Err(_) => return true,
            Ok(None) if client.is_closed() => return true,
            Ok(None) if ended || quiet_since.elapsed() >= IDLE_CHECK => {
                if client.is_valid(IDLE_CHECK).is_err() {
                    return true;
                }
                quiet_since = Instant::now();
            }
            Ok(None) => {}
        }
    }
}

fn sleep_unless_stopped(total: Duration, stop: &AtomicBool) {
    let until = Instant::now() + total;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
    }
}
