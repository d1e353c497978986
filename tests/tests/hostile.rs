//! The hostile-load suite's short form (seconds; `cargo xtask soak` runs it for
//! minutes): a latency-class victim beside flooding, looping, memory-hungry,
//! quota-breaking and trapping tenants, a GGUF bomb, slow uploads, a slot hoarder, an
//! old-version hammer, a status and feed flooder and a disk filler, 64 concurrent
//! clients in all, while the victim also deploys; then SIGKILL during deploys and
//! uploads. Asserts only what holds on any machine: no unexpected 5xx (and no victim
//! error or failed victim deploy), nothing acknowledged lost (the disk filler's uploads,
//! the crash loop's deploys), no temporary file left after a crash. The
//! victim's p99 against solo is printed, not asserted (it depends on the machine's load).

use std::time::Duration;

use sluice_tests::crash_loop::crash_loop;
use sluice_tests::hostile::{Generator, HOSTILE, hostile_load, server_for};

#[test]
fn a_victim_beside_hostile_tenants_gets_no_errors() {
    let server = server_for(&HOSTILE);
    let report = hostile_load(&server, &HOSTILE, Duration::from_secs(3), 64, Generator::SamePriority, 200);
    report.print();
    assert!(report.unexpected.is_empty(), "unexpected responses: {:?}", report.unexpected);
    assert!(report.lost.is_empty(), "acknowledged uploads lost: {:?}", report.lost);
    assert!(report.victim_requests > 0, "the victim was never served");
    let hostile_answers: u64 = report.counts.values().sum();
    assert!(hostile_answers > 0, "the hostile tenants never ran: {report:?}");
    // The server still serves everyone afterwards.
    assert!(server.status(sluice_tests::ADMIN_KEY)["ready"].as_bool().unwrap_or(false));
}

#[test]
fn kill_9_during_deploys_and_uploads_loses_nothing_acknowledged() {
    let report = crash_loop(3, Duration::from_millis(700));
    println!("{report:?}");
    assert!(report.acknowledged > 0, "nothing was acknowledged before the kills: {report:?}");
    assert!(report.lost.is_empty(), "acknowledged but lost: {:?}", report.lost);
    assert_eq!(report.leftover_temp_files, 0, "temporary files left after a crash");
}
