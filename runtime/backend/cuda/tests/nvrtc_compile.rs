//! Every kernel module compiles with NVRTC, no GPU needed.
//!
//! NVRTC is a compiler library: it needs neither a GPU nor a driver. When `libnvrtc` can
//! be loaded, each [`Module`] of `kernels.rs` is compiled to CUBIN for `sm_90` (the
//! H200) and `sm_80` with the options the device uses, and each CUBIN must be a CUDA
//! ELF whose symbol table holds every symbol of [`Module::instances`] as a global
//! function. Compile time and CUBIN size are printed per module (`--nocapture`).
//!
//! cudarc finds `libnvrtc` by name through the dynamic loader (`libnvrtc.so`,
//! `libnvrtc.so.13`, ...; no path override), so `LD_LIBRARY_PATH` decides.
//! `cargo xtask test` fetches NVRTC 13.0 from PyPI into `~/.cache/sluice/nvrtc-<version>`
//! (`cargo xtask fetch-nvrtc`), puts its `lib/` first on `LD_LIBRARY_PATH` and sets
//! `SLUICE_REQUIRE_NVRTC=1`. Without NVRTC the tests print why, record the skip in the
//! run's skip log (`tests/src/skip.rs`) and pass, unless `SLUICE_REQUIRE_NVRTC=1` (or
//! `SLUICE_REQUIRE_CUDA=1`) turns that into a failure.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::Instant;

#[path = "../../../../tests/src/skip.rs"]
mod skip;

use sluice_backend_cuda::kernels::Module;
use sluice_backend_cuda::nvrtc_cache::{Target, arch_for, compile_cubin, nvrtc_version};

/// The loaded NVRTC's version, or `None` (after printing why) when the test should skip.
fn nvrtc() -> Option<(i32, i32)> {
    static VERSION: OnceLock<Result<(i32, i32), String>> = OnceLock::new();
    let version = VERSION.get_or_init(|| {
        // SAFETY: only tries to dlopen the candidate names (and closes the library again);
        // cudarc would panic on first use of a missing library, so this probe goes first.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(format!(
                "libnvrtc cannot be loaded (cudarc looks for {:?} via the dynamic loader; set LD_LIBRARY_PATH, \
                 or run `cargo xtask fetch-nvrtc`)",
                cudarc::get_lib_name_candidates("nvrtc")
                    .into_iter()
                    .filter(|n| n.starts_with("libnvrtc.so"))
                    .collect::<Vec<_>>()
            ));
        }
        nvrtc_version().map_err(|e| format!("libnvrtc loaded but nvrtcVersion failed: {e}"))
    });
    let required =
        ["SLUICE_REQUIRE_NVRTC", "SLUICE_REQUIRE_CUDA"].into_iter().find(|v| std::env::var(v).as_deref() == Ok("1"));
    match (version, required) {
        (Ok(v), _) => Some(*v),
        (Err(e), Some(var)) => panic!("{var}=1 but NVRTC is unavailable: {e}"),
        (Err(e), None) => {
            skip::skip("NVRTC", e);
            None
        }
    }
}

/// A minimal ELF64 little-endian reader: the names of the global function symbols.
fn global_functions(elf: &[u8]) -> Result<BTreeSet<String>, String> {
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]])).ok_or("truncated");
    let u32_at = |o: usize| elf.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).ok_or("truncated");
    let u64_at = |o: usize| elf.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).ok_or("truncated");
    if elf.len() < 64 || !elf.starts_with(b"\x7fELF") {
        return Err("no ELF header".into());
    }
    if elf[4] != 2 || elf[5] != 1 {
        return Err(format!("not ELF64 little-endian (class {}, data {})", elf[4], elf[5]));
    }
    const EM_CUDA: u16 = 190;
    if u16_at(18)? != EM_CUDA {
        return Err(format!("e_machine {} is not EM_CUDA", u16_at(18)?));
    }
    let (shoff, shentsize, shnum) = (u64_at(0x28)? as usize, u16_at(0x3a)? as usize, u16_at(0x3c)? as usize);
    let section = |i: usize| -> Result<(u32, usize, usize, u32, usize), String> {
        let h = shoff + i * shentsize;
        let (kind, link) = (u32_at(h + 4)?, u32_at(h + 0x28)?);
        let (offset, size, entsize) = (u64_at(h + 0x18)?, u64_at(h + 0x20)?, u64_at(h + 0x38)?);
        // (sh_type, sh_offset, sh_size, sh_link, sh_entsize)
        Ok((kind, offset as usize, size as usize, link, entsize as usize))
    };
    const SHT_SYMTAB: u32 = 2;
    let mut names = BTreeSet::new();
    for i in 0..shnum {
        let (kind, off, size, link, entsize) = section(i)?;
        if kind != SHT_SYMTAB {
            continue;
        }
        let (_, str_off, str_size, _, _) = section(link as usize)?;
        let strtab = elf.get(str_off..str_off + str_size).ok_or("string table out of bounds")?;
        for s in (off..off + size).step_by(entsize.max(24)) {
            let (name, info) = (u32_at(s)? as usize, *elf.get(s + 4).ok_or("truncated")?);
            const STB_GLOBAL: u8 = 1;
            const STT_FUNC: u8 = 2;
            if info >> 4 != STB_GLOBAL || info & 0xf != STT_FUNC {
                continue;
            }
            let tail = strtab.get(name..).ok_or("symbol name out of bounds")?;
            let end = tail.iter().position(|&c| c == 0).ok_or("unterminated symbol name")?;
            names.insert(String::from_utf8_lossy(&tail[..end]).into_owned());
        }
    }
    Ok(names)
}

/// Compiles every module for `arch`, checks each CUBIN, prints a line per module and
/// fails with every problem found (all modules are tried).
fn compile_all(major: u32, minor: u32) {
    let Some(version) = nvrtc() else { return };
    let target = Target { arch: arch_for(major, minor), driver_version: 0, nvrtc_version: version };
    eprintln!("NVRTC {}.{}, {}, options {:?}", version.0, version.1, target.arch, target.options());
    let mut failures = String::new();
    for m in Module::ALL {
        let source = m.source();
        let start = Instant::now();
        let result = compile_cubin(m.name(), &source, &target);
        let ms = start.elapsed().as_millis();
        let cubin = match result {
            Ok(c) => c,
            Err(e) => {
                eprintln!("  {:<9} {}: FAILED after {ms} ms", m.name(), target.arch);
                let _ = writeln!(failures, "{e}\n");
                continue;
            }
        };
        let symbols = match global_functions(&cubin) {
            Ok(s) => s,
            Err(e) => {
                let _ = writeln!(failures, "{}.cu for {}: the CUBIN is not a CUDA ELF: {e}", m.name(), target.arch);
                continue;
            }
        };
        let wanted: BTreeSet<String> = m.instances().into_iter().map(|(s, _)| s).collect();
        let missing: Vec<_> = wanted.difference(&symbols).collect();
        let extra: Vec<_> = symbols.difference(&wanted).collect();
        eprintln!(
            "  {:<9} {}: {ms:>6} ms, {:>8} bytes of CUBIN, {} kernels",
            m.name(),
            target.arch,
            cubin.len(),
            wanted.len()
        );
        if !missing.is_empty() || !extra.is_empty() {
            let _ = writeln!(
                failures,
                "{}.cu for {}: kernels missing from the CUBIN {missing:?}, unexpected global functions {extra:?}",
                m.name(),
                target.arch
            );
        }
    }
    assert!(failures.is_empty(), "kernel modules that failed for {}:\n{failures}", target.arch);
}

#[test]
fn every_module_compiles_for_sm_90_h200() {
    compile_all(9, 0);
}

#[test]
fn every_module_compiles_for_sm_80() {
    compile_all(8, 0);
}

/// The checks above can fail: a broken source reports NVRTC's log, and the symbol table
/// reader sees exactly the C-linkage kernels of a source.
#[test]
fn compile_errors_and_symbols_are_reported() {
    let Some(version) = nvrtc() else { return };
    let target = Target { arch: arch_for(9, 0), driver_version: 0, nvrtc_version: version };
    let err = compile_cubin("broken", "extern \"C\" __global__ void k() { no_such_fn(); }", &target).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("broken.cu") && msg.contains("no_such_fn"), "{msg}");
    let src = "__device__ float twice(float v) { return 2.0f * v; }\n\
               extern \"C\" __global__ void k1(float* x) { x[0] = twice(x[0]); }\n\
               extern \"C\" __global__ void k2(float* x) { x[1] = 0.0f; }\n";
    let cubin = compile_cubin("two", src, &target).unwrap();
    let names: Vec<String> = global_functions(&cubin).unwrap().into_iter().collect();
    assert_eq!(names, ["k1", "k2"]);
}

#[test]
fn elf_reader_rejects_non_elf() {
    assert!(global_functions(b"").is_err());
    assert!(global_functions(b"\x7fELF\x01\x01").is_err());
    assert!(global_functions(b"PTX").is_err());
}
