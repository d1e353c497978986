//! The sources of the functions built by an outside tool (Python's componentize-py,
//! JavaScript's componentize-js): which directories hold one, and whether a built
//! component is older than what it was built from.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};

/// The directories under `functions` that hold a file named `app`, sorted.
pub fn functions_with(functions: &Path, app: &str) -> Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for entry in fs::read_dir(functions).with_context(|| format!("reading {}", functions.display()))? {
        let path = entry?.path();
        if path.join(app).is_file() {
            dirs.push(path);
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// The latest modification time of any file under `roots`, skipping directories named
/// `skip` (a tool's caches: `__pycache__`, `node_modules`).
pub fn newest(roots: &[&Path], skip: &str) -> Result<SystemTime> {
    let mut latest = SystemTime::UNIX_EPOCH;
    let mut stack: Vec<PathBuf> = roots.iter().map(|p| p.to_path_buf()).collect();
    while let Some(path) = stack.pop() {
        let meta = fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        if meta.is_dir() {
            if path.file_name().is_some_and(|n| n == skip) {
                continue;
            }
            for entry in fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        } else {
            latest = latest.max(meta.modified()?);
        }
    }
    if latest == SystemTime::UNIX_EPOCH {
        bail!("no files under {roots:?}");
    }
    Ok(latest)
}
