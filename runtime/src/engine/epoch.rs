//! The epoch clock: one thread that advances wasmtime's epoch, so every guest computing
//! in Wasm stops at its next loop back-edge or call and runs the store's epoch callback
//! ([`super::invoke`]). That callback ends an invocation past its deadline or whose caller
//! went, and there a batch-class guest gives way ([`super::give_way`]): it pauses while
//! latency work needs its core, else yields the core (`sched_yield`), so a thread of
//! normal priority waiting for that core runs now.
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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::give_way::GiveWay;

/// The clock's thread; [`GiveWay`] decides its pace.
#[derive(Debug)]
pub(crate) struct EpochClock {
    give_way: Arc<GiveWay>,
    stop: AtomicBool,
}

impl EpochClock {
    /// Starts the clock's thread for `engine`: it ticks every `idle_tick`, or every
    /// `give_way_tick` while a batch guest runs; `give_way` is who computes on the host.
    pub fn start(
        engine: wasmtime::Engine,
        give_way: GiveWay,
        idle_tick: Duration,
        give_way_tick: Duration,
    ) -> std::io::Result<Arc<EpochClock>> {
        let give_way = Arc::new(give_way);
        let clock = Arc::new(EpochClock { give_way, stop: AtomicBool::new(false) });
        let ticking = clock.clone();
        let thread = std::thread::Builder::new().name("sluice-epoch".into()).spawn(move || {
            while !ticking.stop.load(Ordering::Relaxed) {
                let batch = ticking.give_way.batch_running();
                std::thread::park_timeout(if batch { give_way_tick } else { idle_tick });
                engine.increment_epoch();
                ticking.give_way.on_tick();
            }
        })?;
        clock.give_way.set_clock(thread.thread().clone());
        Ok(clock)
    }

    /// Who computes on the host's cores: latency and batch guests check in here.
    pub fn give_way(&self) -> &Arc<GiveWay> {
        &self.give_way
    }

    /// Stops the clock's thread (at its next tick).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.give_way.wake_clock();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn the_clock_ends_a_linger_and_the_paused_guest_goes_on() {
        let engine = wasmtime::Engine::new(wasmtime::Config::new().epoch_interruption(true)).expect("engine");
        let give_way = GiveWay::new(engine.clone(), 1, Duration::from_millis(1));
        let clock = EpochClock::start(engine, give_way, Duration::from_millis(5), Duration::from_micros(250))
            .expect("the clock starts");
        let way = clock.give_way().clone();
        let _batch = way.batch_guest();
        assert!(way.batch_running());
        let latency = way.latency_guest();
        // Nothing but the clock wakes it: it looks again on its own only at a minute.
        let minute = Duration::from_secs(60);
        std::thread::scope(|s| {
            let paused = s.spawn(|| way.before_start(Instant::now() + minute, minute, || false));
            while way.pauses() == 0 {
                std::thread::yield_now();
            }
            drop(latency);
            assert!(paused.join().unwrap(), "the clock's tick let it go on once the linger was over");
        });
        clock.stop();
    }
}
