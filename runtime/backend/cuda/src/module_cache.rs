//! The per-device cache of loaded kernel modules and functions: a module is compiled by
//! NVRTC (or read from the disk cache, see [`crate::nvrtc_cache`]) and loaded on the first
//! launch that needs one of its kernels, then kept for the device's lifetime.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;

use crate::CudaError;
use crate::kernels::Module;
use crate::nvrtc_cache::{self, Target};

/// Modules loaded on one device, compiled on first use (or read from the disk cache).
pub(crate) struct ModuleCache {
    ctx: Arc<CudaContext>,
    target: Target,
    dir: Option<PathBuf>,
    modules: Mutex<HashMap<Module, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl ModuleCache {
    pub(crate) fn new(ctx: Arc<CudaContext>, target: Target, dir: Option<PathBuf>) -> Self {
        ModuleCache { ctx, target, dir, modules: Mutex::default(), functions: Mutex::default() }
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
        let source = module.source();
        let key = nvrtc_cache::cache_key(&source, &self.target);
        let path = self.dir.as_ref().map(|d| nvrtc_cache::cache_path(d, module.name(), &key));
        let t0 = Instant::now();
        if let Some(cubin) = path.as_deref().and_then(nvrtc_cache::read_cached) {
            match self.ctx.load_module(Ptx::from_binary(cubin)) {
                Ok(m) => {
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
