//! NVRTC compilation of kernel modules to CUBIN, with an on-disk cache.
//!
//! A module is compiled for the device's real architecture (`--gpu-architecture=sm_XY`),
//! so the driver loads machine code without a PTX JIT step. The CUBIN is stored as
//! `<dir>/<module>-<key>.cubin` where the key is the SHA-256 of everything that decides
//! its bytes ([`cache_key`]): the full source, the architecture, the compile options, the
//! driver version and the NVRTC version. A restart finds the file and skips NVRTC; a new
//! driver, NVRTC or source simply misses. Files are written to a temporary name and
//! renamed, so a crash never leaves a truncated entry under the final name.

use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};
use sha2::{Digest, Sha256};

use crate::CudaError;

/// Bumped when the cache layout or the meaning of the key changes.
const CACHE_FORMAT: &str = "sluice-cubin-v1";

/// What a compiled module depends on besides its source.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// `sm_90` and the like.
    pub arch: String,
    pub driver_version: i32,
    pub nvrtc_version: (i32, i32),
}

impl Target {
    /// The NVRTC options used for every module.
    pub fn options(&self) -> Vec<String> {
        vec![format!("--gpu-architecture={}", self.arch), "--std=c++17".to_string()]
    }
}

/// `sm_XY` for a compute capability.
pub fn arch_for(major: u32, minor: u32) -> String {
    format!("sm_{major}{minor}")
}

/// Hex SHA-256 over the source and everything in `target`, each field length-prefixed.
pub fn cache_key(source: &str, target: &Target) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(CACHE_FORMAT.as_bytes());
    field(source.as_bytes());
    field(target.arch.as_bytes());
    field(&target.driver_version.to_le_bytes());
    field(&target.nvrtc_version.0.to_le_bytes());
    field(&target.nvrtc_version.1.to_le_bytes());
    for o in target.options() {
        field(o.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Where the CUBIN of `module` with `key` lives in `dir`.
pub fn cache_path(dir: &Path, module: &str, key: &str) -> PathBuf {
    dir.join(format!("{module}-{key}.cubin"))
}

/// The installed NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: two out-pointers to live integers.
    unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| CudaError::failure(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// Reads a cached CUBIN if present (a missing or unreadable file is a miss).
pub fn read_cached(path: &Path) -> Option<Vec<u8>> {
    match std::fs::read(path) {
        Ok(bytes) if !bytes.is_empty() => Some(bytes),
        _ => None,
    }
}

/// Stores a CUBIN atomically; failures are logged, never fatal (the cache is an optimisation).
pub fn write_cached(path: &Path, cubin: &[u8]) {
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, cubin)?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        tracing::warn!(path = %path.display(), error = %e, "kernel cache: could not store module");
    }
}

/// Destroys an NVRTC program when dropped.
struct Program(nvrtc_sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by create_program and destroyed once, here.
        let _ = unsafe { nvrtc::destroy_program(self.0) };
    }
}

/// Compiles `source` (named `name` in messages) to CUBIN for `target`.
pub fn compile_cubin(name: &str, source: &str, target: &Target) -> Result<Vec<u8>, CudaError> {
    let src = CString::new(source).map_err(|_| CudaError::failure(format!("{name}: NUL in source")))?;
    let file = CString::new(format!("{name}.cu")).expect("module names have no NUL");
    let prog = Program(
        nvrtc::create_program(&src, Some(&file))
            .map_err(|e| CudaError::failure(format!("nvrtcCreateProgram({name}): {e:?}")))?,
    );
    let options = target.options();
    // SAFETY: `prog` is a live program; options are plain strings.
    if let Err(e) = unsafe { nvrtc::compile_program(prog.0, &options) } {
        // SAFETY: as above.
        let log = unsafe { nvrtc::get_program_log(prog.0) }
            .map(|raw| {
                let bytes: Vec<u8> = raw.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        return Err(CudaError::failure(format!(
            "NVRTC could not compile {name}.cu for {} ({e:?}, options {options:?}):\n{log}",
            target.arch
        )));
    }
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; `size` is a live out-pointer.
    unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog.0, &mut size) }
        .result()
        .map_err(|e| CudaError::failure(format!("nvrtcGetCUBINSize({name}): {e:?}")))?;
    if size == 0 {
        return Err(CudaError::failure(format!(
            "NVRTC produced no CUBIN for {name}.cu ({} is not a real architecture?)",
            target.arch
        )));
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has the size NVRTC reported.
    unsafe { nvrtc_sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut c_char) }
        .result()
        .map_err(|e| CudaError::failure(format!("nvrtcGetCUBIN({name}): {e:?}")))?;
    Ok(cubin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target { arch: arch_for(9, 0), driver_version: 13000, nvrtc_version: (13, 0) }
    }

    #[test]
    fn arch_names() {
        assert_eq!(arch_for(9, 0), "sm_90");
        assert_eq!(arch_for(8, 6), "sm_86");
        assert_eq!(target().options()[0], "--gpu-architecture=sm_90");
    }

    #[test]
    fn key_depends_on_everything() {
        let t = target();
        let k = cache_key("src", &t);
        assert_eq!(k.len(), 64);
        assert_eq!(k, cache_key("src", &t), "deterministic");
        assert_ne!(k, cache_key("src ", &t));
        assert_ne!(k, cache_key("src", &Target { arch: arch_for(8, 0), ..t.clone() }));
        assert_ne!(k, cache_key("src", &Target { driver_version: 12080, ..t.clone() }));
        assert_ne!(k, cache_key("src", &Target { nvrtc_version: (13, 1), ..t.clone() }));
        // Length prefixes keep field boundaries apart.
        let a = Target { arch: "sm_9".into(), ..t.clone() };
        assert_ne!(cache_key("x0", &a), cache_key("x", &Target { arch: "0sm_9".into(), ..t }));
    }

    #[test]
    fn cache_files_round_trip() {
        let dir = std::env::temp_dir().join(format!("sluice-cuda-cache-test-{}", std::process::id()));
        let path = cache_path(&dir, "unary", &cache_key("s", &target()));
        assert!(read_cached(&path).is_none());
        write_cached(&path, b"\x7fELF...");
        assert_eq!(read_cached(&path).as_deref(), Some(&b"\x7fELF..."[..]));
        assert!(path.file_name().unwrap().to_str().unwrap().starts_with("unary-"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
