//! The released host API stays as released: every file under `host-api/wit-released/`
//! must have the sha256 recorded for it in `host-api/wit-released/FROZEN` (the format
//! `sha256sum` writes), and the working WIT (`host-api/wit/sluice.wit`) must either be
//! the newest release byte for byte or carry a newer version.
//!
//! Releasing a version: copy `host-api/wit/sluice.wit` to `wit-released/VERSION/`,
//! append its line to `FROZEN` (`cd host-api/wit-released && sha256sum
//! VERSION/sluice.wit >> FROZEN`) and add the version to
//! `sluice_host_api::version::RELEASED` (see `docs/host-api.md`).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::cmd;

const RELEASED: &str = "host-api/wit-released";
const WORKING: &str = "host-api/wit/sluice.wit";
const PACKAGE_LINE: &str = "package sluice:gpu@";

pub fn run() -> Result<()> {
    let root = cmd::repo_root();
    let (files, problems) = check(&root.join(RELEASED), &root.join(WORKING))?;
    if !problems.is_empty() {
        bail!("the frozen host API versions:\n  {}", problems.join("\n  "));
    }
    println!("xtask: {files} frozen host API files unchanged");
    Ok(())
}

/// The files checked under `released`, and what is wrong with them and with `working`.
fn check(released: &Path, working: &Path) -> Result<(usize, Vec<String>)> {
    let recorded = read_recorded(released)?;
    let mut problems = Vec::new();
    let mut on_disk = Vec::new();
    list_files(released, released, &mut on_disk)?;
    for rel in &on_disk {
        match recorded.get(rel) {
            None => problems.push(format!("{RELEASED}/{rel} is not recorded in FROZEN")),
            Some(want) => {
                let got = hex::encode(Sha256::digest(fs::read(released.join(rel))?));
                if &got != want {
                    problems.push(format!(
                        "{RELEASED}/{rel} was edited after its release (sha256 {got}, released as {want}): a released version is frozen; add a new version instead"
                    ));
                }
            }
        }
    }
    for rel in recorded.keys().filter(|r| !on_disk.contains(r)) {
        problems.push(format!("{RELEASED}/{rel} is recorded in FROZEN but missing"));
    }
    if let Err(e) = check_working(working, released, &recorded) {
        problems.push(format!("{e:#}"));
    }
    Ok((on_disk.len(), problems))
}

/// `FROZEN`: relative path → sha256 (hex).
fn read_recorded(released: &Path) -> Result<BTreeMap<String, String>> {
    let text = fs::read_to_string(released.join("FROZEN")).context("reading host-api/wit-released/FROZEN")?;
    let mut recorded = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Some((sha, rel)) = line.split_once("  ") else {
            bail!("FROZEN: `{line}` is not `<sha256>  <path>`");
        };
        recorded.insert(rel.to_owned(), sha.to_owned());
    }
    Ok(recorded)
}

/// Every file under `dir` but `FROZEN`, as paths relative to `base` with `/`.
fn list_files(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            list_files(base, &path, out)?;
        } else if path.file_name().is_some_and(|n| n != "FROZEN") {
            let rel =
                path.strip_prefix(base)?.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>();
            out.push(rel.join("/"));
        }
    }
    Ok(())
}

/// The working WIT is the newest release, unchanged, or a version after it.
fn check_working(working: &Path, released: &Path, recorded: &BTreeMap<String, String>) -> Result<()> {
    let text = fs::read_to_string(working).with_context(|| format!("reading {WORKING}"))?;
    let version = package_version(&text).with_context(|| format!("{WORKING} has no `{PACKAGE_LINE}…;` line"))?;
    let newest = recorded
        .keys()
        .filter_map(|rel| rel.split_once('/').map(|(v, _)| v))
        .filter_map(|v| parse_version(v).map(|p| (p, v)))
        .max()
        .map(|(_, v)| v.to_owned())
        .context("FROZEN records no released version")?;
    let (working_v, newest_v) = (parse_version(&version), parse_version(&newest));
    if working_v < newest_v {
        bail!("{WORKING} is at {version}, older than the newest release {newest}");
    }
    if working_v == newest_v && text.as_bytes() != fs::read(released.join(&newest).join("sluice.wit"))? {
        bail!(
            "{WORKING} is at the released version {newest} but differs from {RELEASED}/{newest}: bump its version (and mark additions `@since`)"
        );
    }
    Ok(())
}

fn package_version(wit: &str) -> Option<String> {
    wit.lines().find_map(|l| l.trim().strip_prefix(PACKAGE_LINE)?.strip_suffix(';').map(str::to_owned))
}

/// `major.minor.patch` as numbers, for ordering (no pre-releases are released).
fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order_numerically() {
        assert!(parse_version("1.10.0") > parse_version("1.9.0"));
        assert_eq!(parse_version("1.0"), None);
        assert_eq!(parse_version("1.0.0.0"), None);
        assert_eq!(package_version("/// x\npackage sluice:gpu@1.2.3;\n"), Some("1.2.3".into()));
    }

    #[test]
    fn an_edited_release_an_unrecorded_file_and_an_unbumped_working_wit_are_found() {
        let dir = tempfile_dir();
        let released = dir.join("released");
        fs::create_dir_all(released.join("1.0.0")).unwrap();
        let v1 = "package sluice:gpu@1.0.0;\ninterface a {}\n";
        fs::write(released.join("1.0.0/sluice.wit"), v1).unwrap();
        fs::write(released.join("FROZEN"), format!("{}  1.0.0/sluice.wit\n", hex::encode(Sha256::digest(v1)))).unwrap();
        let working = dir.join("sluice.wit");
        let problems = || check(&released, &working).unwrap().1;

        fs::write(&working, v1).unwrap();
        assert_eq!(problems(), Vec::<String>::new());
        fs::write(&working, "package sluice:gpu@1.0.0;\ninterface a { f: func(); }\n").unwrap();
        assert!(problems()[0].contains("bump its version"), "a change without a new version");
        fs::write(&working, "package sluice:gpu@1.1.0;\ninterface a { f: func(); }\n").unwrap();
        assert_eq!(problems(), Vec::<String>::new());
        fs::write(&working, "package sluice:gpu@0.9.0;\ninterface a {}\n").unwrap();
        assert!(problems()[0].contains("older than the newest release"));
        fs::write(&working, v1).unwrap();

        fs::write(released.join("1.0.0/sluice.wit"), "package sluice:gpu@1.0.0;\ninterface a { g: func(); }\n")
            .unwrap();
        assert!(problems().iter().any(|p| p.contains("edited after its release")));
        fs::write(released.join("1.0.0/sluice.wit"), v1).unwrap();
        fs::write(released.join("1.0.0/extra.wit"), "").unwrap();
        assert_eq!(problems(), vec![format!("{RELEASED}/1.0.0/extra.wit is not recorded in FROZEN")]);
        fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-frozen-wit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
