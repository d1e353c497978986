//! The sluice host runtime.
//!
//! - `background`: threads in the idle scheduling class (batch guests, compilation);
//! - [`clock`]: the time every scheduling decision reads (monotonic, or simulated in tests);
//! - [`device`]: the [`device::Device`] trait, its CPU and CUDA implementations (over the
//!   backend crates) and a simulated device for tests and benchmarks;
//! - [`scheduler`]: one actor per device, the single dispatch point of every kernel;
//! - [`engine`]: wasmtime, the host side of the WIT API, and invocations;
//! - [`oip`]: the Open Inference Protocol's JSON tensor format;
//! - [`platform`]: the service layer (registry, engine, loaded functions, admission);
//! - [`server`]: the HTTP API over the platform.

mod background;
pub mod cli;
pub mod clock;
pub mod device;
pub mod engine;
pub mod oip;
pub mod platform;
pub mod scheduler;
pub mod server;
