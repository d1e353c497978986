//! The hostile-load suite, long form (`cargo xtask soak [-- --seconds S --clients C
//! --kills K --tenants flood,looper,…]`): see `sluice_tests::hostile`. `--tenants` keeps
//! some of the hostile tenants only, to see which of them hurts the victim. Runs the hostile load twice, each on a
//! fresh server: with the hostile tenants at their admission limits (as many clients as
//! they may have invocations in flight: the bar is about this one) and beyond
//! them (`--clients`, default 64: the rest is refused with 429 and the refusals cost the
//! server work too). For each it prints the victim's p50/p99 alone and beside the hostile
//! tenants, every response by tenant, status and code, the server's RSS before and after
//! and what grew. Then the crash loop's acknowledged/lost counts. Exits non-zero on an
//! unexpected 5xx, a lost acknowledgement or a leftover temporary file; the bars (victim
//! p99 ≤ 2× solo, RSS settled within 20 % of the load's start) are reported, not
//! enforced (they are measurements of this machine).

use std::process::ExitCode;
use std::time::Duration;

use sluice_tests::Server;
use sluice_tests::hostile::{HOSTILE, HOSTILE_CONCURRENCY, Hostile, HostileReport, crash_loop, hostile_load};
use sluice_tests::wakeup::wakeup_floor;

/// The victim's requests alone: its p99 is the 50th slowest, steadier than the 20th of
/// 2,000 on a VM whose solo tail moves with whatever else it runs.
const SOLO_REQUESTS: usize = 5000;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

/// The hostile tenants named by `--tenants` (all by default).
fn tenants() -> Result<Vec<Hostile>, String> {
    let args: Vec<String> = std::env::args().collect();
    let Some(list) = args.iter().position(|a| a == "--tenants").and_then(|i| args.get(i + 1)) else {
        return Ok(HOSTILE.to_vec());
    };
    list.split(',')
        .map(|name| {
            HOSTILE.iter().find(|h| h.0 == name).copied().ok_or_else(|| {
                let known: Vec<&str> = HOSTILE.iter().map(|h| h.0).collect();
                format!("no hostile tenant {name:?} (there are {})", known.join(", "))
            })
        })
        .collect()
}

fn main() -> ExitCode {
    let seconds = arg("--seconds", 60);
    let beyond = arg("--clients", 64) as usize;
    let kills = arg("--kills", 20) as usize;
    let hostile = match tenants() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The kernel's own floor under the victim's tail on this machine, before any load.
    wakeup_floor().print();
    println!();
    let within = hostile.len() * HOSTILE_CONCURRENCY;
    let mut reports: Vec<HostileReport> = Vec::new();
    let mut scenarios = vec![("within their admission limits", within)];
    if beyond > within {
        scenarios.push(("beyond their admission limits", beyond));
    } else {
        println!("hostile load beyond the admission limits: skipped (--clients {beyond} is not above {within})");
    }
    for (scenario, clients) in scenarios {
        let names: Vec<&str> = hostile.iter().map(|h| h.0).collect();
        println!(
            "hostile load, {scenario}: {seconds} s, {clients} hostile clients ({}), one victim client",
            names.join(", ")
        );
        let server = Server::start();
        let report = hostile_load(&server, &hostile, Duration::from_secs(seconds), clients, SOLO_REQUESTS);
        report.print();
        let ratio = report.loaded.1.as_secs_f64() / report.solo.1.as_secs_f64().max(1e-6);
        let yes = |b: bool| if b { "holds" } else { "DOES NOT hold" };
        println!("bar ({scenario}): victim p99 ≤ 2× solo ({ratio:.2}×): {}", yes(ratio <= 2.0));
        let rss = report.rss.settled_ratio();
        println!("bar ({scenario}): RSS settled within 20 % of the load's start ({rss:.2}×): {}", yes(rss <= 1.2));
        println!();
        reports.push(report);
    }
    println!("crash loop: {kills} kills during deploys and uploads");
    let crashes = crash_loop(kills, Duration::from_millis(900));
    println!(
        "crash loop: {} kills, {} acknowledged, {} lost, {} temporary files left",
        crashes.kills,
        crashes.acknowledged,
        crashes.lost.len(),
        crashes.leftover_temp_files
    );
    let ok =
        reports.iter().all(|r| r.unexpected.is_empty()) && crashes.lost.is_empty() && crashes.leftover_temp_files == 0;
    println!("{}", if ok { "soak: OK" } else { "soak: FAILED" });
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
