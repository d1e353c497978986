//! `sluice-guest`: the SDK for writing sluice inference functions in Rust.
//!
//! A function is a WebAssembly component (`wasm32-wasip2`) of the `sluice:gpu`
//! `inference` world. It receives named tensors ([`Inputs`]), computes on the host's
//! device through [`Tensor`] handles (every op is one host call that the host's
//! scheduler sees before it runs), and returns named tensors ([`IoTensor`]).
//!
//! ```ignore
//! use sluice_guest::{Function, Inputs, IoTensor, Result, Tensor};
//!
//! struct Scale;
//!
//! impl Function for Scale {
//!     fn run(inputs: Inputs) -> Result<Vec<IoTensor>> {
//!         let x = inputs.get("x")?;            // missing → invalid-input
//!         x.as_f32()?;                          // wrong datatype → invalid-input
//!         let t = x.to_tensor()?;               // upload to the device
//!         let y = (&t + &t)?.relu()?.scale(0.5)?;
//!         Ok(vec![y.to_io("y")?])               // read back as an output
//!     }
//! }
//!
//! sluice_guest::export!(Scale);
//! ```
//!
//! Build it as a `cdylib` with `cargo build --release --target wasm32-wasip2`
//! (`cargo xtask build-functions` does this for the repository's `functions/`).
//! Examples only run inside the sluice host: see `functions/echo` (IO round-trip) and
//! `functions/mlp` (a small classifier) for complete, tested functions.
//!
//! The same API exists for Python over the same WIT world: `guest-sdk/python` (the
//! `sluice_guest` package, built into components by componentize-py; see its README
//! and `functions/echo-py`, `functions/mlp-py`, `functions/minilm-embed-py`).
//!
//! A function may stream its output while it runs ([`streaming::emit`], e.g. a
//! generation's tokens) and learn that its caller has gone ([`streaming::caller_gone`]);
//! `docs/generation.md` is the contract the server's generate and OpenAI-compatible
//! endpoints expect of a text-generation function. A function may also serve many
//! requests at once from a host queue ([`serving`], continuous batching).
//!
//! A function may declare its signature (input and output names, datatypes, shapes)
//! with [`signature!`]; the host then reports it and refuses requests that do not match
//! before the function runs.
//!
//! Fused ops cut host launches (and kernel launches) in real models:
//! [`Tensor::linear`] (matmul + bias + activation), [`Tensor::add_layer_norm`] (residual
//! add + layer norm) and [`Tensor::attention`] (multi-head attention without permutes)
//! compute what their chains of ops compute, in one launch each.
//!
//! Errors: every call returns [`Result`]; host refusals carry the host's
//! [`ErrorCode`] (`shape-mismatch`, …). Returning an [`Error`] from
//! [`Function::run`] becomes the WIT `run-error`: [`Error::invalid_input`] becomes
//! `invalid-input` (the caller's fault), anything else `failed`. A panic traps the
//! instance (the invocation fails; the host is unaffected).

pub mod artifacts;
pub mod bindings;
mod convert;
mod error;
mod fused;
mod io;
mod ops;
pub mod serving;
pub mod signature;
pub mod streaming;
mod tensor;

pub use convert::{bf16_bits_to_f32, f16_bits_to_f32};
pub use error::{Error, ErrorCode, ErrorKind, Result};
pub use fused::{KvSequence, launch_fused};
pub use io::{Inputs, IoData, IoTensor, RunError};
pub use ops::{Conv2d, Pool2d, launch};
pub use sluice_host_api::{DType, UnaryOp};
pub use tensor::Tensor;

/// An inference function: named tensors in, named tensors out.
///
/// Implement it on a unit struct and export it with [`export!`].
pub trait Function {
    /// Runs one inference. An `Err` becomes the WIT `run-error` (see [`Error`]).
    fn run(inputs: Inputs) -> Result<Vec<IoTensor>>;
}

/// Exports a type implementing [`Function`] as the component's `run` export.
///
/// Use it once per function crate, at the crate root: `sluice_guest::export!(MyFunction);`
#[macro_export]
macro_rules! export {
    ($function:ty) => {
        #[doc(hidden)]
        struct __SluiceGuestExport;

        impl $crate::bindings::Guest for __SluiceGuestExport {
            fn run(
                inputs: ::std::vec::Vec<$crate::IoTensor>,
            ) -> ::core::result::Result<::std::vec::Vec<$crate::IoTensor>, $crate::RunError> {
                $crate::__private::run::<$function>(inputs)
            }
        }

        $crate::bindings::export!(__SluiceGuestExport with_types_in $crate::bindings);
    };
}

#[doc(hidden)]
pub mod __private {
    //! Support for [`crate::export!`]; not a public API.

    use crate::{Function, Inputs, IoTensor, RunError};

    /// Runs `F` on the raw inputs and maps its error onto the WIT `run-error`.
    pub fn run<F: Function>(inputs: Vec<IoTensor>) -> Result<Vec<IoTensor>, RunError> {
        F::run(Inputs::new(inputs)).map_err(RunError::from)
    }
}
