//! The per-device cache of loaded kernel modules and functions: a module is compiled by
//! NVRTC (or read from the disk cache, see [`crate::nvrtc_cache`]) and loaded on the first
//! launch that needs one of its kernels, then kept for the device's lifetime.
//!
//! A partitioned device has one cache per lane context (a module must be loaded in the
//! green context it launches in); those caches share a [`CubinStore`] so each module is
//! compiled (or read from disk) once per device, not once per lane.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;

use crate::CudaError;
use crate::kernels::Module;
use crate::nvrtc_cache::{self, Target};

/// Compiled CUBINs shared by the module caches of one device's contexts.
pub(crate) type CubinStore = Arc<Mutex<HashMap<Module, Vec<u8>>>>;

/// Modules loaded in one context, compiled on first use (or read from the disk cache).
pub(crate) struct ModuleCache {
    ctx: Arc<CudaContext>,
    target: Target,
    dir: Option<PathBuf>,
    /// Set when several contexts share compiled modules.
    shared: Option<CubinStore>,
    modules: Mutex<HashMap<Module, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl ModuleCache {
    pub(crate) fn new(ctx: Arc<CudaContext>, target: Target, dir: Option<PathBuf>, shared: Option<CubinStore>) -> Self {
        ModuleCache { ctx, target, dir, shared, modules: Mutex::default(), functions: Mutex::default() }
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// The function `symbol` of `module`, loading the module if needed.
    pub(crate) fn function(&self, module: Module, symbol: &str) -> Result<CudaFunction, CudaError> {
        if let Some(f) = self.functions.lock().unwrap_or_else(|p| p.into_inner()).get(symbol) {
            return Ok(f.clone());
        }
        let m = self.module(module)?;
        let f = m
            .load_function(symbol)
            .map_err(|e| CudaError::driver(&format!("kernel {symbol} not found in module {}", module.name()), e))?;
        self.functions.lock().unwrap_or_else(|p| p.into_inner()).insert(symbol.to_string(), f.clone());
        Ok(f)
    }

    /// The loaded module, compiling or reading it from the disk cache on first use.
    pub(crate) fn module(&self, module: Module) -> Result<Arc<CudaModule>, CudaError> {
        // Held across compilation: two threads never compile the same module twice.
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = modules.get(&module) {
            return Ok(m.clone());
        }
        let m = self.load(module)?;
        modules.insert(module, m.clone());
        Ok(m)
    }

    fn load(&self, module: Module) -> Result<Arc<CudaModule>, CudaError> {
        let Some(store) = &self.shared else {
            return self.load_fresh(module, &mut |_| {});
        };
        // Held across compilation: the lanes never compile the same module twice.
        let mut cubins = store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cubin) = cubins.get(&module) {
            return self
                .ctx
                .load_module(Ptx::from_binary(cubin.clone()))
                .map_err(|e| CudaError::driver(&format!("loading module {}", module.name()), e));
        }
        self.load_fresh(module, &mut |cubin| {
            cubins.insert(module, cubin.to_vec());
        })
    }

    /// Reads the module from the disk cache or compiles it, hands the CUBIN to `keep`
    /// and loads it.
    fn load_fresh(&self, module: Module, keep: &mut dyn FnMut(&[u8])) -> Result<Arc<CudaModule>, CudaError> {
        let source = module.source();
        let key = nvrtc_cache::cache_key(&source, &self.target);
        let path = self.dir.as_ref().map(|d| nvrtc_cache::cache_path(d, module.name(), &key));
        let t0 = Instant::now();
        if let Some(cubin) = path.as_deref().and_then(nvrtc_cache::read_cached) {
            match self.ctx.load_module(Ptx::from_binary(cubin.clone())) {
                Ok(m) => {
                    keep(&cubin);
                    tracing::debug!(
                        module = module.name(),
                        ms = t0.elapsed().as_secs_f64() * 1e3,
                        "cuda module loaded from disk cache"
                    );
                    return Ok(m);
                }
                Err(e) => {
                    tracing::warn!(module = module.name(), error = ?e, "cached CUBIN did not load; recompiling");
                    if let Some(p) = &path {
                        let _ = std::fs::remove_file(p);
                    }
                }
            }
        }
        let cubin = nvrtc_cache::compile_cubin(module.name(), &source, &self.target)?;
        let compiled = t0.elapsed();
        if let Some(p) = &path {
            nvrtc_cache::write_cached(p, &cubin);
        }
        keep(&cubin);
        let m = self
            .ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(|e| CudaError::driver(&format!("loading module {}", module.name()), e))?;
        tracing::info!(
            module = module.name(),
            arch = %self.target.arch,
            compile_ms = compiled.as_secs_f64() * 1e3,
            total_ms = t0.elapsed().as_secs_f64() * 1e3,
            "cuda module compiled"
        );
        Ok(m)
    }
}
