//! A process's resident memory from `/proc`: the total, and by kind of mapping, so the
//! hostile-load suite can say what grew (the heap, glibc's per-thread arenas, Wasm
//! linear memories, thread stacks, mapped files) rather than only that something did.

use std::collections::BTreeMap;

/// The process's resident set in KiB (0 where `/proc` is not there).
pub fn rss_kib(pid: u32) -> u64 {
    status_number(pid, "VmRSS:")
}

/// The process's threads (0 where `/proc` is not there).
pub fn threads(pid: u32) -> u64 {
    status_number(pid, "Threads:")
}

/// The number after `field` in `/proc/<pid>/status` (0 where there is none).
fn status_number(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or("");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Resident KiB by kind of mapping (empty where `/proc` is not there). Anonymous
/// mappings are told apart by their size and neighbours only, so the kinds are hints: a
/// Wasm linear memory is the used, writable front of a slot whose inaccessible rest (its
/// reservation and guard, gigabytes) follows it at once; thread stacks (2 MiB and up),
/// large allocations and the used parts of glibc's per-thread arenas (64 MiB
/// reservations, split where their used part ends) fall between 1 and 8 MiB or below.
pub fn resident_by_kind(pid: u32) -> BTreeMap<&'static str, u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    kinds_of(&mappings(&smaps))
}

/// One mapping of `/proc/<pid>/smaps`.
#[derive(Debug, Default)]
struct Mapping<'a> {
    start: u64,
    end: u64,
    perms: &'a str,
    path: Option<&'a str>,
    rss_kib: u64,
}

fn mappings(smaps: &str) -> Vec<Mapping<'_>> {
    let mut out: Vec<Mapping<'_>> = Vec::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if let Some((start, end)) = first.split_once('-').filter(|(s, _)| s.chars().all(|c| c.is_ascii_hexdigit())) {
            let hex = |h: &str| u64::from_str_radix(h, 16).unwrap_or(0);
            let perms = fields.next().unwrap_or("");
            out.push(Mapping { start: hex(start), end: hex(end), perms, path: fields.nth(3), rss_kib: 0 });
        } else if first == "Rss:"
            && let Some(last) = out.last_mut()
        {
            last.rss_kib += fields.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    out
}

fn kinds_of(mappings: &[Mapping<'_>]) -> BTreeMap<&'static str, u64> {
    const GIB: u64 = 1 << 30;
    let mut by_kind = BTreeMap::new();
    for (i, m) in mappings.iter().enumerate() {
        let size = m.end.saturating_sub(m.start);
        let reserved_after = mappings.get(i + 1).is_some_and(|next| {
            next.start == m.end && next.path.is_none() && next.perms == "---p" && next.end - next.start >= GIB
        });
        let kind = if m.path.is_none() && (size >= GIB || reserved_after) {
            WASM_MEMORIES
        } else {
            mapping_kind(m.path, size)
        };
        *by_kind.entry(kind).or_default() += m.rss_kib;
    }
    by_kind
}

/// The kind of Wasm linear memories (of warm instances and running ones).
pub const WASM_MEMORIES: &str = "Wasm linear memories";

fn mapping_kind(path: Option<&str>, size: u64) -> &'static str {
    const MIB: u64 = 1 << 20;
    match path {
        Some("[heap]") => "heap (brk)",
        Some("[stack]") => "main stack",
        Some(p) if p.starts_with('/') => "mapped files",
        Some(_) => "other",
        None if (MIB..=8 * MIB + 64 * 1024).contains(&size) => "anonymous 1–8 MiB (stacks, arenas, large allocations)",
        None => "anonymous, other (arenas, small maps)",
    }
}

/// The kinds whose resident size changed from `before` to `after`, largest change first.
pub fn growth(before: &BTreeMap<&'static str, u64>, after: &BTreeMap<&'static str, u64>) -> Vec<(&'static str, i64)> {
    let mut kinds: Vec<&'static str> = before.keys().chain(after.keys()).copied().collect();
    kinds.sort_unstable();
    kinds.dedup();
    let mut changes: Vec<(&'static str, i64)> = kinds
        .into_iter()
        .map(|k| (k, after.get(k).copied().unwrap_or(0) as i64 - before.get(k).copied().unwrap_or(0) as i64))
        .filter(|&(_, d)| d != 0)
        .collect();
    changes.sort_by_key(|&(_, d)| std::cmp::Reverse(d.abs()));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_resident_memory_by_kind() {
        let pid = std::process::id();
        let kinds = resident_by_kind(pid);
        if kinds.is_empty() {
            crate::skip::skip("resident_by_kind", "no /proc/<pid>/smaps on this system");
            return;
        }
        assert!(kinds.contains_key("mapped files"), "{kinds:?}");
        let total: u64 = kinds.values().sum();
        // smaps and status are read at different moments; both count the same pages.
        let rss = rss_kib(pid);
        assert!(total.abs_diff(rss) * 10 <= rss, "smaps {total} KiB vs VmRSS {rss} KiB");
    }

    #[test]
    fn a_writable_front_before_a_reservation_is_a_wasm_memory() {
        let smaps = "\
7d90c4102000-7d90c6110000 rw-p 00000000 00:00 0 \nRss: 32784 kB
7d90c6110000-7d91c6000000 ---p 00000000 00:00 0 \nRss: 0 kB
7f3204000000-7f32050e9000 rw-p 00000000 00:00 0 \nRss: 17316 kB
7f32050e9000-7f3208000000 ---p 00000000 00:00 0 \nRss: 0 kB
";
        let kinds = kinds_of(&mappings(smaps));
        // The second pair is an arena: its reservation (48 MiB) is no Wasm slot's.
        assert_eq!(kinds.get(WASM_MEMORIES), Some(&32784), "{kinds:?}");
        assert_eq!(kinds.get("anonymous, other (arenas, small maps)"), Some(&17316), "{kinds:?}");
    }

    #[test]
    fn growth_lists_changes_largest_first() {
        let before = BTreeMap::from([("a", 10), ("b", 5)]);
        let after = BTreeMap::from([("a", 11), ("b", 1), ("c", 2)]);
        assert_eq!(growth(&before, &after), vec![("b", -4), ("c", 2), ("a", 1)]);
    }
}
