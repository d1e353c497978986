//! The status snapshot every caller shares (`DeviceQueue::shared_status`): many
//! concurrent callers cost the device's actor a bounded number of status computations,
//! counted by the actor itself (`DeviceStatus::status_computations`), on the simulated
//! device and clock (the clock only moves when the test moves it).

use std::time::Duration;

use sluice_host_api::UnaryOp;
use sluice_runtime::scheduler::{DEFAULT_STATUS_INTERVAL, PriorityClass, SchedulerConfig};

use super::{sim, stream, unary, upload};

/// Starts `callers` concurrent `shared_status` calls while the device thread is held at
/// a kernel, lets the device go once all of them have arrived, and returns the
/// computations the actor counted once all are answered.
fn computations_for_concurrent_callers(status_interval: Duration, callers: u64) -> u64 {
    let sim =
        sim(SchedulerConfig { status_interval, ..Default::default() }, |d| d.cost(|_, _| Duration::from_micros(10)));
    let queue = &sim.queue;
    sim.gate.close();
    let inv = stream(queue, "t", PriorityClass::Latency, 1);
    let x = upload(queue, &inv, &[1], &[1.0]);
    let _y = unary(queue, &inv, UnaryOp::Neg, &x);
    sim.gate.wait_blocked();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).build().expect("a runtime");
    let calls: Vec<_> = (0..callers)
        .map(|_| {
            let q = queue.clone();
            runtime.spawn(async move { q.shared_status().await })
        })
        .collect();
    // A count, not a time: every caller has arrived while the device is held.
    while queue.status_requests() < callers {
        std::thread::yield_now();
    }
    sim.gate.open();
    let answers: Vec<_> = runtime.block_on(async { futures_join(calls).await });
    assert_eq!(answers.len() as u64, callers, "every caller is answered");
    let last = answers.iter().map(|s| s.status_computations).max().unwrap();
    assert_eq!(queue.status_blocking().status_computations, last + 1, "the exact status is one more");
    last
}

async fn futures_join<T>(calls: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(calls.len());
    for c in calls {
        out.push(c.await.expect("a caller"));
    }
    out
}

#[test]
fn concurrent_callers_share_one_status_computation() {
    assert_eq!(computations_for_concurrent_callers(DEFAULT_STATUS_INTERVAL, 64), 1);
}

#[test]
fn without_an_interval_concurrent_callers_still_coalesce() {
    // The computation running when they arrived, and one for all of them.
    assert!(computations_for_concurrent_callers(Duration::ZERO, 64) <= 2);
}

#[test]
fn a_snapshot_older_than_the_interval_is_computed_again() {
    let sim = sim(SchedulerConfig::default(), |d| d);
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let count = || runtime.block_on(sim.queue.shared_status()).status_computations;
    assert_eq!((count(), count(), count()), (1, 1, 1), "within the interval: the same snapshot");
    sim.clock.advance(DEFAULT_STATUS_INTERVAL);
    assert_eq!((count(), count()), (2, 2), "past it: one new computation for all");
    assert_eq!(sim.queue.status_requests(), 5);
}
