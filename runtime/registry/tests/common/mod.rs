//! Helpers shared by the registry's integration tests.

#![allow(dead_code)]

use std::path::Path;

use sluice_registry::{Registry, TenantSettings};

pub fn open(dir: &Path) -> Registry {
    Registry::open(dir).expect("open registry")
}

pub fn with_tenant(dir: &Path, id: &str) -> Registry {
    let reg = open(dir);
    reg.create_tenant(id, TenantSettings::default()).unwrap();
    reg
}

/// Every byte of every file under `dir`.
pub fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(all_bytes(&path));
        } else {
            out.extend(std::fs::read(&path).unwrap());
        }
    }
    out
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
