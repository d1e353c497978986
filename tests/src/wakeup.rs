//! How long this machine's kernel lets a woken thread wait for a core, alone and beside
//! threads that compute in Linux's idle scheduling class (`SCHED_IDLE`), as the
//! platform's batch guests do.
//!
//! The hostile-load suite's victim crosses several threads per request (the client's
//! connection, an HTTP worker, the guest's thread, the device's thread and back), each a
//! wake-up. The platform puts every hostile guest in the idle class so that a waking
//! thread of normal priority should take the core at once; whether it does is the
//! kernel's business, and [`wakeup_floor`] measures it with no sluice code involved: two
//! threads hand a token back and forth over channels, pausing between rounds so each
//! hand-off wakes a sleeping thread, first alone, then beside one busy idle-class thread
//! per core. Its tail is the floor under the victim's tail on that machine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Wake-up round trips per measurement.
const ROUNDS: usize = 20_000;
/// The pause between round trips: long enough for both threads to sleep.
const PAUSE: Duration = Duration::from_micros(100);

/// A round trip's percentiles.
#[derive(Debug, Clone, Copy)]
pub struct Tail {
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
}

/// What [`wakeup_floor`] measured.
#[derive(Debug, Clone, Copy)]
pub struct WakeupFloor {
    /// Nothing else running.
    pub alone: Tail,
    /// Beside one busy idle-class thread per core; `None` where the class is refused.
    pub beside_idle: Option<Tail>,
    /// The busy threads (one per core).
    pub spinners: usize,
}

impl WakeupFloor {
    /// A line for the suite's output.
    pub fn print(&self) {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let show = |t: &Tail| format!("p50 {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs", us(t.p50), us(t.p99), us(t.p999));
        println!("kernel wake-up floor (two threads handing a token back and forth, no sluice code):");
        println!("  {:<36} {}", "alone:", show(&self.alone));
        let beside = format!("beside {} busy SCHED_IDLE threads:", self.spinners);
        match &self.beside_idle {
            Some(t) => println!("  {beside:<36} {}", show(t)),
            None => println!("  {beside:<36} skipped (the idle class is refused here)"),
        }
    }
}

/// Measures the floor (a few seconds).
pub fn wakeup_floor() -> WakeupFloor {
    let spinners = std::thread::available_parallelism().map_or(1, |n| n.get());
    let alone = round_trips();
    let stop = AtomicBool::new(false);
    let beside_idle = std::thread::scope(|s| {
        let mut started = Vec::new();
        for _ in 0..spinners {
            let stop = &stop;
            let (ready, is_ready) = mpsc::channel();
            s.spawn(move || {
                let idle = enter_idle_class();
                let _ = ready.send(idle);
                let mut n = 0u64;
                while idle && !stop.load(Ordering::Relaxed) {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            });
            started.push(is_ready.recv().unwrap_or(false));
        }
        let result = started.iter().all(|&idle| idle).then(round_trips);
        stop.store(true, Ordering::Relaxed);
        result
    });
    WakeupFloor { alone, beside_idle, spinners }
}

fn round_trips() -> Tail {
    let (to_echo, echo_in) = mpsc::channel::<()>();
    let (to_caller, caller_in) = mpsc::channel::<()>();
    let echo = std::thread::spawn(move || {
        while echo_in.recv().is_ok() {
            if to_caller.send(()).is_err() {
                return;
            }
        }
    });
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        to_echo.send(()).expect("the echo thread lives");
        caller_in.recv().expect("the echo thread answers");
        times.push(t.elapsed());
        std::thread::sleep(PAUSE);
    }
    drop(to_echo);
    let _ = echo.join();
    times.sort();
    let at = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    Tail { p50: at(0.5), p99: at(0.99), p999: at(0.999) }
}

/// Puts the calling thread in the idle class; false where that is refused.
pub fn enter_idle_class() -> bool {
    #[cfg(target_os = "linux")]
    {
        let idle = libc::sched_param { sched_priority: 0 };
        // SAFETY: a system call on the calling thread (pid 0) with a valid parameter.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    false
}
