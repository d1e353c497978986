//! The kernel log on the simulated device: what the scheduler records for live
//! watchers (the console's timeline), in the order kernels ran, with whose they were,
//! only while someone watches, and bounded.

use std::time::Duration;

use sluice_host_api::{Op, UnaryOp};
use sluice_runtime::device::Lane;
use sluice_runtime::scheduler::{Policy, PriorityClass, SchedulerConfig};

use super::{overtaking_costs, read_f32, sim, stream, unary, upload};

#[test]
fn records_follow_the_order_kernels_ran_in_with_their_tenants() {
    let sim = sim(SchedulerConfig { policy: Policy::Priority, ..Default::default() }, |d| {
        d.cost(|op, _| overtaking_costs(op))
    });
    let queue = &sim.queue;
    // Unwatched: nothing is recorded.
    let early = stream(queue, "early", PriorityClass::Latency, 1);
    let e = upload(queue, &early, &[1], &[1.0]);
    read_f32(queue, &e);
    drop(early);
    assert!(queue.kernels_blocking(0, 100).records.is_empty(), "no watcher, no records");

    let _watch = queue.watch_kernels();
    sim.gate.close();
    let be = stream(queue, "batch-tenant", PriorityClass::Batch, 1);
    let mut last = upload(queue, &be, &[2], &[1.0, 2.0]);
    for _ in 0..5 {
        last = unary(queue, &be, UnaryOp::Neg, &last);
    }
    sim.gate.allow(1);
    sim.gate.wait_blocked();
    let ls = stream(queue, "latency-tenant", PriorityClass::Latency, 1);
    let y = upload(queue, &ls, &[1], &[0.0]);
    let z = unary(queue, &ls, UnaryOp::Exp, &y);
    sim.gate.open();
    assert_eq!(read_f32(queue, &z), vec![1.0]);
    assert_eq!(read_f32(queue, &last), vec![-1.0, -2.0]);

    let batch = queue.kernels_blocking(0, 100);
    assert_eq!(batch.missed, 0);
    let kernels: Vec<_> = batch.records.iter().filter(|r| r.op != "upload").collect();
    // The device's own log says what ran, in order: the records say the same.
    let ran: Vec<Op> = sim.log.entries().iter().map(|k| k.op.clone()).collect();
    assert_eq!(kernels.len(), ran.len());
    for (record, op) in kernels.iter().zip(&ran) {
        assert_eq!(record.op, op.name());
        let (tenant, class) = match op {
            Op::Unary(UnaryOp::Exp) => ("latency-tenant", PriorityClass::Latency),
            _ => ("batch-tenant", PriorityClass::Batch),
        };
        assert_eq!((&*record.tenant, record.class, &*record.function), (tenant, class, "f"));
        assert_eq!(record.lane, Lane::Whole);
        assert!(!record.sliced);
    }
    let exp = kernels.iter().position(|r| r.tenant.as_ref() == "latency-tenant").expect("the latency kernel");
    assert_eq!(exp, 2, "it overtook the queued best-effort kernels, and the log shows it");
    assert!(kernels[exp].preempting, "it ran ahead of waiting best-effort work");
    assert_eq!(kernels.iter().filter(|r| r.preempting).count(), 1, "only it did");
    // Sequence numbers without gaps; simulated times that do not overlap.
    for pair in batch.records.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq + 1);
        assert!(pair[1].start_us >= pair[0].end_us, "{pair:?}");
    }
    let neg = kernels.iter().find(|r| r.op == "unary" && r.tenant.as_ref() == "batch-tenant").unwrap();
    assert_eq!(neg.end_us - neg.start_us, 2000, "the simulated 2 ms");
    assert!(kernels.iter().all(|r| r.queued_us <= r.start_us));

    // A watcher asking from where it stopped gets only what is new.
    let again = queue.kernels_blocking(batch.next, 100);
    assert!(again.records.is_empty());
    assert_eq!(again.next, batch.next);
}

#[test]
fn the_log_is_bounded() {
    let sim =
        sim(SchedulerConfig { kernel_log: 8, ..Default::default() }, |d| d.cost(|_, _| Duration::from_micros(10)));
    let queue = &sim.queue;
    let _watch = queue.watch_kernels();
    let inv = stream(queue, "t", PriorityClass::Latency, 1);
    let mut last = upload(queue, &inv, &[1], &[0.0]);
    for _ in 0..20 {
        last = unary(queue, &inv, UnaryOp::Neg, &last);
    }
    read_f32(queue, &last);
    let batch = queue.kernels_blocking(0, 100);
    assert_eq!(batch.records.len(), 8, "the newest 8 of 21");
    assert_eq!(batch.records.first().map(|r| r.seq), Some(14));
    assert_eq!((batch.missed, batch.next), (13, 22));
}
