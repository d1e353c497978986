//! The sluice host GPU API, target-independent half.
//!
//! The contract itself is the WIT package in `wit/` (see [`WIT_DIR`]); this crate holds
//! the rules both sides agree on and that need no device: element types ([`DType`]),
//! the op catalog ([`Op`]), shape and dtype inference ([`infer`]), the guest-visible
//! error codes ([`ErrorCode`], [`ApiError`]), the conversions between the WIT's generated
//! types and these ([`wit_conversions!`], invoked once by the host and once by the guest
//! SDK), the HTTP API's stable error codes ([`Code`]) and the package's version rules
//! ([`version`]). The host checks every launch
//! with [`infer`] before anything is queued; the guest SDK may use the same rules to fail
//! early. Nothing here allocates device memory or knows about wasmtime.

mod code;
mod dtype;
mod error;
mod infer;
mod op;
mod rows;
mod shape;
pub mod version;
mod wit;

pub use code::Code;
pub use dtype::{DType, QUANT_BLOCK};
pub use error::{ApiError, ErrorCode};
pub use infer::{GQA_MAX_HEAD_DIM, infer};
pub use op::{
    BinaryOp, Conv2dArgs, KvAttentionArgs, KvSpan, MatmulArgs, Op, Pool2dArgs, PoolKind, ReduceArgs, ReduceOp,
    SampleArgs, SliceArgs, UnaryOp,
};
pub use rows::RowSplit;
pub use shape::{MAX_ELEMENTS, MAX_RANK, Shape, TensorMeta, broadcast_shapes};

/// Folder of the WIT package: the one place the contract lives.
///
/// `bindgen!` (runtime) and `generate!` (guest SDK) need a string literal relative to
/// their own crate; each of them has a test that its literal names this folder.
pub const WIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/wit");
