//! The hostile-load suite, long form (`cargo xtask soak [-- --seconds S --clients C
//! --kills K]`): see `sluice_tests::hostile`. Prints the victim's p50/p99 alone and
//! beside the hostile tenants, every response by tenant, status and code, the server's
//! RSS before and after, the crash loop's acknowledged/lost counts, and whether the
//! isolation bar holds (victim p99 ≤ 2× solo, RSS settled within 20 % of the load's
//! start). Exits non-zero on an unexpected 5xx, a lost acknowledgement or a leftover
//! temporary file; the bar is reported, not enforced (it is a measurement of this
//! machine).

use std::process::ExitCode;
use std::time::Duration;

use sluice_tests::Server;
use sluice_tests::hostile::{crash_loop, hostile_load};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

fn main() -> ExitCode {
    let seconds = arg("--seconds", 60);
    let clients = arg("--clients", 64) as usize;
    let kills = arg("--kills", 20) as usize;
    println!("hostile load: {seconds} s, {clients} hostile clients, one victim client");
    let server = Server::start();
    let report = hostile_load(&server, Duration::from_secs(seconds), clients, 2000);
    report.print();
    let ratio = report.loaded.1.as_secs_f64() / report.solo.1.as_secs_f64().max(1e-6);
    let yes = |b: bool| if b { "holds" } else { "DOES NOT hold" };
    println!("bar: victim p99 ≤ 2× solo ({ratio:.2}×): {}", yes(ratio <= 2.0));
    let rss = report.rss.settled_ratio();
    println!("bar: RSS settled within 20 % of the load's start ({rss:.2}×): {}", yes(rss <= 1.2));
    drop(server);
    println!("crash loop: {kills} kills during deploys and uploads");
    let crashes = crash_loop(kills, Duration::from_millis(900));
    println!(
        "crash loop: {} kills, {} acknowledged, {} lost, {} temporary files left",
        crashes.kills,
        crashes.acknowledged,
        crashes.lost.len(),
        crashes.leftover_temp_files
    );
    let ok = report.unexpected.is_empty() && crashes.lost.is_empty() && crashes.leftover_temp_files == 0;
    println!("{}", if ok { "soak: OK" } else { "soak: FAILED" });
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
