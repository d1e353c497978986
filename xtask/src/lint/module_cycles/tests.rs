//! Tests of the module-cycle check on small crates written to a temporary folder.

use std::path::PathBuf;

use super::*;

/// Writes `files` (path, text) under a fresh folder and checks the crate rooted at `lib.rs`.
fn check_files(name: &str, files: &[(&str, &str)]) -> Report {
    let dir = std::env::temp_dir().join(format!("xtask-module-cycles-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    for (path, text) in files {
        let path = dir.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    let report = check(&dir.join("lib.rs"), &dir).unwrap();
    fs::remove_dir_all(&dir).unwrap();
    report
}

/// Each cycle as "parent: a <-> b".
fn cycles(report: &Report) -> Vec<String> {
    report.cycles.iter().map(|c| format!("{}: {}", c.parent.join("::"), c.members.join(" <-> "))).collect()
}

#[test]
fn two_siblings_that_use_each_other_are_a_cycle() {
    let report = check_files(
        "pair",
        &[
            ("lib.rs", "mod a;\nmod b;\nmod c { pub fn f() { crate::a::g(); } }\n"),
            ("a.rs", "use crate::b::X;\npub fn g() {}\n"),
            ("b.rs", "use super::a;\npub struct X;\nfn h() { a::g() }\n"),
        ],
    );
    assert_eq!(cycles(&report), [": a <-> b"]);
    let edges: Vec<_> = report.cycles[0].edges.iter().map(|(a, b, s)| (a.as_str(), b.as_str(), s[0].line)).collect();
    assert_eq!(edges, [("a", "b", 1), ("b", "a", 1)]);
    assert_eq!(report.cycles[0].edges[0].2[0].file, PathBuf::from("a.rs"));
}

#[test]
fn a_reexport_counts_against_the_module_that_defines_the_item() {
    let report = check_files(
        "reexport",
        &[
            ("lib.rs", "pub mod p;\n"),
            ("p/mod.rs", "mod x;\nmod y;\npub use x::Thing;\n"),
            ("p/x.rs", "pub struct Thing(super::y::Other);\n"),
            ("p/y.rs", "use super::Thing;\npub struct Other;\n"),
        ],
    );
    assert_eq!(cycles(&report), ["p: x <-> y"]);
}

#[test]
fn parents_children_and_test_modules_are_no_cycle() {
    let report = check_files(
        "tree",
        &[
            ("lib.rs", "mod q;\npub struct Root;\nfn f() -> q::Q { q::Q }\n"),
            (
                "q.rs",
                "use crate::Root;\npub struct Q;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use self::inner::I;\n    mod inner { pub struct I(super::super::Q); }\n}\n",
            ),
        ],
    );
    assert!(report.cycles.is_empty(), "{:?}", report.cycles);
    assert_eq!(report.modules, 4);
}

#[test]
fn deep_modules_make_their_top_level_ancestors_depend_on_each_other() {
    let report = check_files(
        "deep",
        &[
            ("lib.rs", "mod engine;\nmod scheduler;\n"),
            ("engine/mod.rs", "mod component;\nmod state;\npub use component::Image;\n"),
            ("engine/component.rs", "pub struct Image;\n"),
            ("engine/state.rs", "fn f(_: &crate::scheduler::memory::Lease) {}\n"),
            ("scheduler/mod.rs", "pub mod memory;\nmod pool;\n"),
            ("scheduler/memory.rs", "pub struct Lease;\n// crate::engine::Image in a comment\n"),
            ("scheduler/pool.rs", "use crate::engine::{self as e};\nfn g(_: e::Image) {}\n"),
        ],
    );
    assert_eq!(cycles(&report), [": engine <-> scheduler"]);
}

#[test]
fn a_ring_of_three_siblings_is_one_cycle() {
    let report = check_files(
        "ring",
        &[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n#[path = \"elsewhere/d.rs\"]\nmod d;\n"),
            ("a.rs", "use crate::b;\n"),
            ("b.rs", "fn f() { super::c::g() }\n"),
            ("c.rs", "pub fn g() {}\nuse crate::a as _;\nuse crate::d::*;\n"),
            ("elsewhere/d.rs", "pub struct D;\n"),
        ],
    );
    assert_eq!(cycles(&report), [": a <-> b <-> c"]);
}

#[test]
fn use_trees_are_read_with_groups_renames_and_globs() {
    let mut items = Vec::new();
    let tokens = tokenize("use crate::{a::{self, B as C}, d::*, e::F};");
    use_tree(&tokens, &mut 1, Vec::new(), &mut items);
    let shown: Vec<_> = items.iter().map(|i| (i.path.join("::"), i.name(), i.glob)).collect();
    assert_eq!(
        shown,
        [
            ("crate::a".into(), Some("a".into()), false),
            ("crate::a::B".into(), Some("C".into()), false),
            ("crate::d".into(), None, true),
            ("crate::e::F".into(), Some("F".into()), false),
        ]
    );
}
