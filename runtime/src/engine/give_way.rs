//! The host's cores go to latency work first: while latency-class invocations are in
//! flight, batch-class guests pause at their next epoch tick, so that each latency
//! invocation has [`CORES_PER_LATENCY_GUEST`] cores free of batch guests; the rest of
//! the cores stay theirs. When latency work is idle, batch guests have every core.
//! This is the host's side of the scheduler's strict priority between classes, the
//! counterpart of the green-context SM partition on a GPU (`docs/scheduling.md`).
//!
//! Why pause them instead of leaving it to the OS. Batch guests run in Linux's idle
//! class (`platform::guest_threads`) and, at every tick, yield their core
//! (`super::epoch`). Measured on two cores beside the hostile-load mix (`cargo xtask
//! soak`), that still left the victim's p99 at 4–7× its solo p99: whenever a server
//! thread of the victim waited a millisecond or more for a core, that core was mostly
//! running an idle-class guest (`perf sched timehist`); and an idle-class thread the OS
//! preempts while it holds an allocator lock keeps every thread that needs the lock
//! waiting until the OS runs it again. A paused guest holds no core and no lock: it
//! stops only in its epoch callback, between Wasm instructions.
//!
//! How. A latency invocation counts itself in flight for its whole run
//! ([`LatencyGuest`]); the first one bumps wasmtime's epoch, so every batch guest
//! computing in Wasm reaches its callback within a few instructions instead of at the
//! next tick. There ([`GiveWay::at_tick`]), a batch guest over its share parks its
//! thread until the latency work ends, its own deadline passes or its caller goes. A
//! batch invocation also waits before it starts ([`GiveWay::before_start`]). Waking is
//! lock-free for the latency side (the parked threads wait in a channel), so a latency
//! invocation never waits for a batch thread to run.
//!
//! After the last latency invocation ends, batch guests stay paused for a short linger
//! ([`super::EngineConfig::latency_linger`]): a client that keeps a latency function busy
//! sends its next request within a few hundred microseconds, and in that gap batch
//! guests would take the cores that the server threads reading that request need. The
//! epoch clock ends the linger at its next tick ([`GiveWay::on_tick`]).
//!
//! This is strict priority: a host whose latency work never pauses runs no batch guest
//! past its deadline. Admission (each tenant's concurrency and class, set by the admin)
//! bounds the latency work.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};

/// Cores each latency invocation in flight keeps free of batch guests: its own guest
/// thread and the server thread that serves its request and its device.
pub const CORES_PER_LATENCY_GUEST: usize = 2;

/// Queue entries of guests that went on, beyond twice the paused ones, that the clock
/// lets pile up before it clears them.
const STALE_WAITERS: usize = 64;

/// Who may compute on the host's cores now, and the batch guests waiting for them.
#[derive(Debug)]
pub(crate) struct GiveWay {
    /// Bumped when latency work arrives, so batch guests reach their callback at once.
    engine: wasmtime::Engine,
    cores: usize,
    /// Latency-class invocations in flight.
    latency: AtomicUsize,
    /// Batch-class invocations in flight, paused ones included.
    batch: AtomicUsize,
    /// Batch-class invocations paused now.
    paused: AtomicUsize,
    /// Paused threads (and stale entries of ones that went on, which an unpark does not
    /// hurt).
    waiting: (Sender<Arc<Waiter>>, Receiver<Arc<Waiter>>),
    /// The epoch clock's thread, woken when the first batch guest starts and to stop.
    clock: OnceLock<Thread>,
    yields: AtomicU64,
    pauses: AtomicU64,
    /// How long batch guests stay paused after latency work ends.
    linger: Duration,
    origin: Instant,
    /// Until when (µs since `origin`) batch guests stay paused after latency work ended.
    quiet_until: AtomicU64,
}

impl GiveWay {
    /// For `engine` on a host with `cores` cores; batch guests stay paused for `linger`
    /// after latency work ends.
    pub fn new(engine: wasmtime::Engine, cores: usize, linger: Duration) -> GiveWay {
        GiveWay {
            engine,
            cores,
            linger,
            latency: AtomicUsize::new(0),
            batch: AtomicUsize::new(0),
            paused: AtomicUsize::new(0),
            waiting: unbounded(),
            clock: OnceLock::new(),
            yields: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            origin: Instant::now(),
            quiet_until: AtomicU64::new(0),
        }
    }

    /// The epoch clock's thread: the first batch guest wakes it to tick faster.
    pub fn set_clock(&self, clock: Thread) {
        let _ = self.clock.set(clock);
    }

    /// Wakes the epoch clock's thread (to tick faster, or to stop).
    pub fn wake_clock(&self) {
        if let Some(clock) = self.clock.get() {
            clock.unpark();
        }
    }

    /// Whether a batch guest is in flight (the clock ticks faster then).
    pub fn batch_running(&self) -> bool {
        self.batch.load(SeqCst) > 0
    }

    /// A latency invocation starts; it counts as in flight until the guard drops.
    pub fn latency_guest(self: &Arc<Self>) -> LatencyGuest {
        self.latency.fetch_add(1, SeqCst);
        if self.batch.load(SeqCst) > self.paused.load(SeqCst) {
            self.engine.increment_epoch();
        }
        LatencyGuest(self.clone())
    }

    /// A batch invocation starts; it counts as in flight until the guard drops.
    pub fn batch_guest(self: &Arc<Self>) -> BatchGuest {
        if self.batch.fetch_add(1, SeqCst) == 0 {
            // The clock may be asleep for a whole idle tick: the guest gives way from
            // the first short one.
            self.wake_clock();
        }
        BatchGuest(self.clone())
    }

    /// A batch guest at an epoch tick: it pauses while latency work needs its core,
    /// else yields the core to any thread waiting for it. `false`: the guest must stop
    /// (`deadline` passed or `stop` said so while it was paused).
    pub fn at_tick(&self, deadline: Instant, recheck: Duration, stop: impl Fn() -> bool) -> bool {
        if self.must_pause(0) {
            return self.pause(deadline, recheck, stop);
        }
        std::thread::yield_now();
        self.yields.fetch_add(1, SeqCst);
        true
    }

    /// A batch invocation about to start: it waits while latency work needs the core.
    /// `false` as for [`GiveWay::at_tick`].
    pub fn before_start(&self, deadline: Instant, recheck: Duration, stop: impl Fn() -> bool) -> bool {
        !self.must_pause(0) || self.pause(deadline, recheck, stop)
    }

    /// Whether latency work (or its linger) claims every core now, so that a background
    /// thread should not compute.
    pub fn claims_every_core(&self) -> bool {
        self.latency_claiming().is_some_and(|latency| self.batch_share(latency) == 0)
    }

    /// Times batch guests yielded their core at a tick.
    pub fn yields(&self) -> u64 {
        self.yields.load(SeqCst)
    }

    /// Times batch guests paused for latency work.
    pub fn pauses(&self) -> u64 {
        self.pauses.load(SeqCst)
    }

    /// Batch guests that may compute beside `latency` latency invocations in flight.
    fn batch_share(&self, latency: usize) -> usize {
        self.cores.saturating_sub(CORES_PER_LATENCY_GUEST.saturating_mul(latency))
    }

    /// Whether a batch guest must pause (or stay paused): latency work is in flight and
    /// the batch guests computing, the caller among them, exceed their share.
    /// `paused_self` is 1 when the caller is counted among the paused already.
    fn must_pause(&self, paused_self: usize) -> bool {
        let Some(latency) = self.latency_claiming() else { return false };
        let others_paused = self.paused.load(SeqCst).saturating_sub(paused_self);
        self.batch.load(SeqCst).saturating_sub(others_paused) > self.batch_share(latency)
    }

    /// The latency invocations whose cores batch work must leave now, if any: those in
    /// flight, or, during the linger after the last one, one.
    fn latency_claiming(&self) -> Option<usize> {
        match self.latency.load(SeqCst) {
            0 if self.quiet_left().is_zero() => None,
            0 => Some(1),
            n => Some(n),
        }
    }

    /// What is left of the linger after the last latency invocation.
    fn quiet_left(&self) -> Duration {
        Duration::from_micros(self.quiet_until.load(SeqCst)).saturating_sub(self.origin.elapsed())
    }

    fn pause(&self, deadline: Instant, recheck: Duration, stop: impl Fn() -> bool) -> bool {
        self.pauses.fetch_add(1, SeqCst);
        self.paused.fetch_add(1, SeqCst);
        let me = Arc::new(Waiter { thread: std::thread::current(), queued: AtomicBool::new(false) });
        let go_on = loop {
            // In the queue again whenever a wake-up took it out.
            if !me.queued.swap(true, SeqCst) {
                // The receiver lives in `self`, so the channel is open.
                let _ = self.waiting.0.send(me.clone());
            }
            // After queueing, so a wake-up between the check and the park is not lost.
            if !self.must_pause(1) {
                break true;
            }
            let now = Instant::now();
            if now >= deadline || stop() {
                break false;
            }
            std::thread::park_timeout((deadline - now).min(recheck));
        };
        self.paused.fetch_sub(1, SeqCst);
        go_on
    }

    /// The epoch clock's tick: once latency work and its linger are over, the paused
    /// batch guests go on. It also clears the queue of entries left by guests that went
    /// on while latency work never paused (each pause leaves at most one).
    pub fn on_tick(&self) {
        let paused = self.paused.load(SeqCst);
        let over = self.latency.load(SeqCst) == 0 && self.quiet_left().is_zero();
        if (paused > 0 && over) || self.waiting.1.len() > 2 * paused + STALE_WAITERS {
            self.wake_all();
        }
    }

    /// Wakes the paused batch guests to look again, if there are any. Takes no lock.
    fn wake_paused(&self) {
        if self.paused.load(SeqCst) > 0 {
            self.wake_all();
        }
    }

    /// Wakes every thread in the queue (those still paused queue themselves again).
    fn wake_all(&self) {
        while let Ok(waiter) = self.waiting.1.try_recv() {
            waiter.queued.store(false, SeqCst);
            waiter.thread.unpark();
        }
    }
}

/// A paused batch guest's thread, queued to be woken.
#[derive(Debug)]
struct Waiter {
    thread: Thread,
    /// In the queue now (a wake-up takes it out; the thread then queues itself again).
    queued: AtomicBool,
}

/// A latency invocation in flight, counted while it lives.
#[derive(Debug)]
pub(crate) struct LatencyGuest(Arc<GiveWay>);

impl Drop for LatencyGuest {
    fn drop(&mut self) {
        let way = &self.0;
        if !way.linger.is_zero() {
            let until = way.origin.elapsed() + way.linger;
            way.quiet_until.fetch_max(until.as_micros() as u64, SeqCst);
        }
        let left = way.latency.fetch_sub(1, SeqCst) - 1;
        // When the last one ends with a linger, the clock wakes them after it (waking
        // them now would only have them pause again).
        let share_grew = left > 0 && way.batch_share(left) > way.batch_share(left + 1);
        if share_grew || (left == 0 && way.linger.is_zero()) {
            way.wake_paused();
        }
    }
}

/// A batch invocation in flight, counted while it lives.
#[derive(Debug)]
pub(crate) struct BatchGuest(Arc<GiveWay>);

impl Drop for BatchGuest {
    fn drop(&mut self) {
        let way = &self.0;
        way.batch.fetch_sub(1, SeqCst);
        // Its share, if latency work leaves batch guests any, may go to a paused one.
        let latency = way.latency.load(SeqCst);
        if latency > 0 && way.batch_share(latency) > 0 {
            way.wake_paused();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(600);

    /// A batch guest on its own thread, ticking until told to end; how many ticks it
    /// got through.
    struct Ticker {
        ticks: Arc<AtomicUsize>,
        end: Arc<AtomicBool>,
        thread: std::thread::JoinHandle<()>,
    }

    impl Ticker {
        fn start(way: &Arc<GiveWay>) -> Ticker {
            let ticks = Arc::new(AtomicUsize::new(0));
            let end = Arc::new(AtomicBool::new(false));
            let (way, t, e) = (way.clone(), ticks.clone(), end.clone());
            let (started_tx, started) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                let _guest = way.batch_guest();
                started_tx.send(()).unwrap();
                while !e.load(SeqCst) {
                    assert!(way.at_tick(Instant::now() + LONG, LONG, || false));
                    t.fetch_add(1, SeqCst);
                }
            });
            started.recv().unwrap();
            Ticker { ticks, end, thread }
        }

        fn stop(self) {
            self.end.store(true, SeqCst);
            self.thread.join().unwrap();
        }
    }

    /// Waits (without a deadline) until `n` batch guests are paused.
    fn until_paused(way: &GiveWay, n: usize) {
        while way.paused.load(SeqCst) != n {
            std::thread::yield_now();
        }
    }

    #[test]
    fn batch_guests_pause_while_latency_work_is_in_flight_and_go_on_after() {
        let way = Arc::new(GiveWay::new(wasmtime::Engine::default(), 2, Duration::ZERO));
        let ticker = Ticker::start(&way);
        let latency = way.latency_guest();
        until_paused(&way, 1);
        let frozen = ticker.ticks.load(SeqCst);
        // Other latency work coming and going does not wake it for good.
        drop(way.latency_guest());
        until_paused(&way, 1);
        assert!(ticker.ticks.load(SeqCst) <= frozen + 1, "a paused guest stays paused while latency work runs");
        drop(latency);
        // It goes on: its ticks count again.
        while ticker.ticks.load(SeqCst) < frozen + 10 {
            std::thread::yield_now();
        }
        assert_eq!(way.paused.load(SeqCst), 0);
        assert!(way.pauses() >= 1);
        ticker.stop();
    }

    #[test]
    fn on_more_cores_batch_guests_keep_what_latency_work_leaves() {
        // Four cores, one latency invocation: two batch guests may compute, the third pauses.
        let way = Arc::new(GiveWay::new(wasmtime::Engine::default(), 4, Duration::ZERO));
        let tickers: Vec<Ticker> = (0..3).map(|_| Ticker::start(&way)).collect();
        let latency = way.latency_guest();
        until_paused(&way, 1);
        // The two others still tick.
        let before: Vec<usize> = tickers.iter().map(|t| t.ticks.load(SeqCst)).collect();
        let mut ticking = 0;
        while ticking < 2 {
            ticking = tickers.iter().zip(&before).filter(|(t, b)| t.ticks.load(SeqCst) > **b + 100).count();
            std::thread::yield_now();
        }
        assert_eq!(way.paused.load(SeqCst), 1, "exactly one over the share pauses");
        // A second latency invocation takes the rest.
        let second = way.latency_guest();
        until_paused(&way, 3);
        drop((latency, second));
        for t in tickers {
            t.stop();
        }
        assert_eq!(way.paused.load(SeqCst), 0);
    }

    #[test]
    fn a_paused_guest_stops_at_its_deadline_or_when_told() {
        let way = Arc::new(GiveWay::new(wasmtime::Engine::default(), 1, Duration::ZERO));
        let _batch = way.batch_guest();
        let _latency = way.latency_guest();
        assert!(!way.at_tick(Instant::now(), LONG, || false), "its deadline has passed");
        assert!(!way.before_start(Instant::now() + LONG, Duration::from_millis(1), || true), "its caller has gone");
        assert_eq!(way.paused.load(SeqCst), 0);
        assert_eq!(way.pauses(), 2);
    }

    #[test]
    fn without_latency_work_batch_guests_only_yield() {
        let way = Arc::new(GiveWay::new(wasmtime::Engine::default(), 1, Duration::ZERO));
        let _batch = way.batch_guest();
        assert!(way.at_tick(Instant::now(), LONG, || true));
        assert!(way.before_start(Instant::now(), LONG, || true));
        assert_eq!((way.yields(), way.pauses()), (1, 0));
    }

    #[test]
    fn batch_guests_stay_paused_for_the_linger_after_latency_work_ends() {
        let lingering = Arc::new(GiveWay::new(wasmtime::Engine::default(), 2, LONG));
        let _batch = lingering.batch_guest();
        drop(lingering.latency_guest());
        assert!(lingering.must_pause(0), "the next request of the same client is expected");
        assert!(!lingering.at_tick(Instant::now() + Duration::from_millis(1), Duration::from_millis(1), || false));

        // The clock's tick wakes the paused ones once the linger is over.
        let short = Arc::new(GiveWay::new(wasmtime::Engine::default(), 2, Duration::from_millis(1)));
        let ticker = Ticker::start(&short);
        let latency = short.latency_guest();
        until_paused(&short, 1);
        drop(latency);
        while short.paused.load(SeqCst) == 1 {
            short.on_tick();
            std::thread::yield_now();
        }
        assert!(short.quiet_left().is_zero(), "it went on only after the linger");
        ticker.stop();

        let not = Arc::new(GiveWay::new(wasmtime::Engine::default(), 2, Duration::ZERO));
        let _batch = not.batch_guest();
        drop(not.latency_guest());
        assert!(!not.must_pause(0));
    }

    #[test]
    fn the_clock_clears_what_guests_that_went_on_left_in_the_queue() {
        let way = Arc::new(GiveWay::new(wasmtime::Engine::default(), 1, Duration::ZERO));
        let _batch = way.batch_guest();
        let _latency = way.latency_guest();
        for _ in 0..200 {
            assert!(!way.before_start(Instant::now(), LONG, || false));
        }
        assert_eq!(way.waiting.1.len(), 200, "each pause left its entry");
        way.on_tick();
        assert_eq!(way.waiting.1.len(), 0);
    }

    #[test]
    fn latency_work_claims_every_core_while_its_cores_leave_batch_none() {
        let two = Arc::new(GiveWay::new(wasmtime::Engine::default(), 2, Duration::ZERO));
        assert!(!two.claims_every_core(), "no latency work");
        let latency = two.latency_guest();
        assert!(two.claims_every_core(), "one latency invocation takes both cores");
        drop(latency);
        assert!(!two.claims_every_core(), "no linger");

        let four = Arc::new(GiveWay::new(wasmtime::Engine::default(), 4, Duration::ZERO));
        let first = four.latency_guest();
        assert!(!four.claims_every_core(), "two of four cores are left");
        let second = four.latency_guest();
        assert!(four.claims_every_core());
        drop((first, second));

        let lingering = Arc::new(GiveWay::new(wasmtime::Engine::default(), 2, LONG));
        drop(lingering.latency_guest());
        assert!(lingering.claims_every_core(), "its linger keeps the cores");
    }
}
