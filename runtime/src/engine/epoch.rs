//! The epoch clock: one thread that advances wasmtime's epoch, so every guest computing
//! in Wasm stops at its next loop back-edge or call and runs the store's epoch callback
//! ([`super::invoke`]). That callback ends an invocation past its deadline or whose caller
//! went, and there a batch-class guest gives way: it yields its core
//! (`sched_yield`), so a thread of normal priority waiting for that core runs now.
//!
//! Why batch guests give way: they run in Linux's idle scheduling class
//! (`platform::guest_threads`), which should let any normal thread woken onto their core
//! take it at once; measured on a two-core VM (Linux 6.18, `HZ=250`), a woken server
//! thread instead often waits for the next scheduler tick, up to 4 ms, and a latency
//! request crosses several such wake-ups. Yielding at every tick bounds that wait by the
//! tick: beside eight batch guests spinning in Wasm the victim's p99 went from 3.6–4.1 ms
//! to 0.4–0.7 ms, its solo p99 being 0.2–1.6 ms (`bench/RESULTS.md`, session 7).
//!
//! The clock ticks every [`EngineConfig::give_way_tick`] while a batch guest runs, and
//! every [`EngineConfig::epoch_tick`] otherwise, so an idle or latency-only server is not
//! woken thousands of times a second. The first batch guest to start wakes the clock, so
//! it gives way from its first tick. A late tick costs nothing but its lateness:
//! deadlines are checked against the wall clock, not counted in ticks.
//!
//! [`EngineConfig::give_way_tick`]: super::EngineConfig::give_way_tick
//! [`EngineConfig::epoch_tick`]: super::EngineConfig::epoch_tick

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

/// The clock's thread and what decides its pace.
#[derive(Debug, Default)]
pub(crate) struct EpochClock {
    /// Batch-class guests running now.
    batch_guests: AtomicUsize,
    /// Times a batch guest gave way, since the engine started.
    yields: AtomicU64,
    stop: AtomicBool,
    thread: OnceLock<Thread>,
}

impl EpochClock {
    /// Starts the clock's thread for `engine`: it ticks every `idle_tick`, or every
    /// `give_way_tick` while a batch guest runs.
    pub fn start(
        engine: wasmtime::Engine,
        idle_tick: Duration,
        give_way_tick: Duration,
    ) -> std::io::Result<Arc<EpochClock>> {
        let clock = Arc::new(EpochClock::default());
        let ticking = clock.clone();
        let thread = std::thread::Builder::new().name("sluice-epoch".into()).spawn(move || {
            while !ticking.stop.load(Ordering::Relaxed) {
                let batch = ticking.batch_guests.load(Ordering::Relaxed) > 0;
                std::thread::park_timeout(if batch { give_way_tick } else { idle_tick });
                engine.increment_epoch();
            }
        })?;
        clock.thread.set(thread.thread().clone()).expect("set once, here");
        Ok(clock)
    }

    /// A batch guest starts running; it counts as running until the guard drops.
    pub fn batch_guest(self: &Arc<Self>) -> BatchGuest {
        if self.batch_guests.fetch_add(1, Ordering::Relaxed) == 0 {
            // The clock may be asleep for a whole idle tick: the guest gives way from
            // the first short one.
            self.wake();
        }
        BatchGuest(self.clone())
    }

    /// A batch guest at an epoch tick: it yields its core to any thread waiting for it.
    pub fn give_way(&self) {
        std::thread::yield_now();
        self.yields.fetch_add(1, Ordering::Relaxed);
    }

    /// Times a batch guest gave way so far.
    pub fn yields(&self) -> u64 {
        self.yields.load(Ordering::Relaxed)
    }

    /// Stops the clock's thread (at its next tick).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake();
    }

    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// A running batch guest, counted by the clock while it lives.
#[derive(Debug)]
pub(crate) struct BatchGuest(Arc<EpochClock>);

impl Drop for BatchGuest {
    fn drop(&mut self) {
        self.0.batch_guests.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_counts_batch_guests_while_they_run() {
        let clock = EpochClock::start(wasmtime::Engine::default(), Duration::from_secs(1), Duration::from_millis(1))
            .expect("the clock starts");
        let first = clock.batch_guest();
        let second = clock.batch_guest();
        assert_eq!(clock.batch_guests.load(Ordering::Relaxed), 2);
        drop(first);
        assert_eq!(clock.batch_guests.load(Ordering::Relaxed), 1);
        drop(second);
        assert_eq!(clock.batch_guests.load(Ordering::Relaxed), 0);
        clock.give_way();
        assert_eq!(clock.yields(), 1);
        clock.stop();
    }
}
