//! The sluice host GPU API, target-independent half.
//!
//! The contract itself is the WIT package in `wit/` (see [`WIT_DIR`]); this crate holds
//! the rules both sides agree on and that need no device: element types ([`DType`]),
//! the op catalog ([`Op`]), shape and dtype inference ([`infer`]) and the guest-visible
//! error codes ([`ErrorCode`], [`ApiError`]). The host checks every launch with
//! [`infer`] before anything is queued; the guest SDK may use the same rules to fail
//! early. Nothing here allocates device memory or knows about wasmtime.

mod dtype;
mod error;
mod infer;
mod op;
mod rows;
mod shape;

pub use dtype::DType;
pub use error::{ApiError, ErrorCode};
pub use infer::infer;
pub use op::{BinaryOp, Conv2dArgs, MatmulArgs, Op, Pool2dArgs, PoolKind, ReduceArgs, ReduceOp, SliceArgs, UnaryOp};
pub use rows::RowSplit;
pub use shape::{MAX_ELEMENTS, MAX_RANK, Shape, TensorMeta, broadcast_shapes};

/// Folder of the WIT package, for `bindgen!`/`generate!` path arguments.
pub const WIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/wit");

/// Version of the WIT package (`sluice:gpu@VERSION`).
pub const API_VERSION: &str = "0.1.0";
