//! The hostile-load suite, long form (`cargo xtask soak [-- --seconds S --clients C
//! --kills K --tenants flood,looper,… --generator same|idle]`): see
//! `sluice_tests::hostile`. `--tenants` keeps some of the hostile tenants only, to see
//! which of them hurts the victim; `--generator idle` runs the hostile clients' threads
//! in the idle class, standing in for clients on other machines (by default they share
//! the cores with the server at its priority). Runs the hostile load twice, each on a
//! fresh server: with the hostile tenants at their admission limits (as many clients as
//! they may have invocations in flight: the bar is about this one) and beyond
//! them (`--clients`, default 64: the rest is refused with 429 and the refusals cost the
//! server work too). For each it prints the victim's p50/p99 alone (a short run, and a
//! run as long as the load) and beside the hostile tenants, every response by tenant,
//! status and code, the server's RSS before and after and what grew. Then the crash
//! loop's acknowledged/lost counts. Exits non-zero on an unexpected 5xx, a lost
//! acknowledgement or a leftover temporary file; the bars (victim p99 ≤ 2× its p99 alone
//! over as long a window, RSS settled within 20 % of the load's start) are reported, not
//! enforced (they are measurements of this machine).

use std::process::ExitCode;
use std::time::Duration;

use sluice_tests::crash_loop::crash_loop;
use sluice_tests::hostile::{
    Generator, HOSTILE, HOSTILE_CONCURRENCY, Hostile, HostileReport, hostile_load, server_for,
};
use sluice_tests::wakeup::wakeup_floor;

/// The victim's requests in its short solo run, printed beside the bar's baseline (the
/// victim alone for as long as the load lasts): over half a second, its p99 moved
/// between 0.11 and 0.21 ms from run to run of the same binary.
const SOLO_REQUESTS: usize = 5000;

/// What the command line asked for.
struct Args {
    seconds: u64,
    clients: usize,
    kills: usize,
    tenants: Vec<Hostile>,
    generator: Generator,
}

const USAGE: &str = "usage: soak [--seconds S (60)] [--clients C (64)] [--kills K (20)] [--tenants flood,looper,hungry,quota,trapper,bomber,trickler,hoarder,hammer,watcher,filler] [--generator same|idle (same)]";

impl Args {
    /// Parses `args` (without the program name); `Ok(None)` for `--help`.
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
        let mut parsed =
            Args { seconds: 60, clients: 64, kills: 20, tenants: HOSTILE.to_vec(), generator: Generator::SamePriority };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            if flag == "--help" || flag == "-h" {
                return Ok(None);
            }
            // `cargo xtask soak -- …` passes the separator on.
            if flag == "--" {
                continue;
            }
            let value = match flag.as_str() {
                "--seconds" | "--clients" | "--kills" | "--tenants" | "--generator" => {
                    args.next().ok_or_else(|| format!("{flag} needs a value"))?
                }
                other => return Err(format!("unknown argument {other:?}")),
            };
            let number = || value.parse::<u64>().map_err(|_| format!("{flag}: {value:?} is not a whole number"));
            match flag.as_str() {
                "--seconds" => parsed.seconds = number()?,
                "--clients" => parsed.clients = number()? as usize,
                "--kills" => parsed.kills = number()? as usize,
                "--generator" => {
                    parsed.generator = match value.as_str() {
                        "idle" => Generator::IdleClass,
                        "same" => Generator::SamePriority,
                        _ => return Err(format!("--generator: {value:?} is neither `idle` nor `same`")),
                    }
                }
                _ => parsed.tenants = tenants(&value)?,
            }
        }
        Ok(Some(parsed))
    }
}

/// The hostile tenants named in `list` (comma-separated).
fn tenants(list: &str) -> Result<Vec<Hostile>, String> {
    list.split(',')
        .map(|name| {
            HOSTILE.iter().find(|h| h.tenant == name).copied().ok_or_else(|| {
                let known: Vec<&str> = HOSTILE.iter().map(|h| h.tenant).collect();
                format!("no hostile tenant {name:?} (there are {})", known.join(", "))
            })
        })
        .collect()
}

fn main() -> ExitCode {
    let Args { seconds, clients: beyond, kills, tenants: hostile, generator } =
        match Args::parse(std::env::args().skip(1)) {
            Ok(Some(args)) => args,
            Ok(None) => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Err(e) => {
                eprintln!("soak: {e}\n{USAGE}");
                return ExitCode::from(2);
            }
        };
    // The kernel's own floor under the victim's tail on this machine, before any load.
    wakeup_floor().print();
    println!();
    match generator {
        Generator::IdleClass => println!(
            "load generator: the hostile clients' threads run in the idle class, standing in for clients on other machines"
        ),
        Generator::SamePriority => println!(
            "load generator: the hostile clients' threads run at this process's priority, taking cores from the server as remote clients could not (`--generator idle` runs them in the idle class)"
        ),
    }
    let within = hostile.len() * HOSTILE_CONCURRENCY;
    let mut reports: Vec<HostileReport> = Vec::new();
    let mut scenarios = vec![("within their admission limits", within)];
    if beyond > within {
        scenarios.push(("beyond their admission limits", beyond));
    } else {
        println!("hostile load beyond the admission limits: skipped (--clients {beyond} is not above {within})");
    }
    for (scenario, clients) in scenarios {
        let names: Vec<&str> = hostile.iter().map(|h| h.tenant).collect();
        println!(
            "hostile load, {scenario}: {seconds} s, {clients} hostile clients ({}), one victim client",
            names.join(", ")
        );
        let server = server_for(&hostile);
        let report = hostile_load(&server, &hostile, Duration::from_secs(seconds), clients, generator, SOLO_REQUESTS);
        report.print();
        let ratio = report.p99_ratio();
        let yes = |b: bool| if b { "holds" } else { "DOES NOT hold" };
        println!("bar ({scenario}): victim p99 ≤ 2× solo over as long a window ({ratio:.2}×): {}", yes(ratio <= 2.0));
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
    let ok = reports.iter().all(|r| r.unexpected.is_empty() && r.lost.is_empty())
        && crashes.lost.is_empty()
        && crashes.leftover_temp_files == 0;
    println!("{}", if ok { "soak: OK" } else { "soak: FAILED" });
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
