//! The SDK's error type: a host error code with its message, or a function-level
//! failure, and its conversion to the WIT `run-error` a function returns.

use std::fmt;

use crate::bindings::sluice::gpu::{io::RunError, types as wit};
pub use sluice_host_api::ErrorCode;

/// Result of every fallible SDK call.
pub type Result<T> = core::result::Result<T, Error>;

/// What kind of failure an [`Error`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The host (or the SDK, applying the host's rules) refused a call with this code.
    Host(ErrorCode),
    /// The request's inputs are wrong: becomes the WIT `invalid-input` run error.
    InvalidInput,
    /// Any other failure of the function: becomes the WIT `failed` run error.
    Failed,
}

/// An error of an SDK call or of a function.
///
/// Converting it into the WIT `run-error` ([`From<Error> for RunError`](RunError))
/// maps [`ErrorKind::InvalidInput`] to `invalid-input` and everything else to
/// `failed`, with the [`Display`](fmt::Display) text as the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error with a host error code (also used by the SDK for checks it makes
    /// locally, e.g. reading an f32 tensor as integers is a `dtype-mismatch`).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error { kind: ErrorKind::Host(code), message: message.into() }
    }

    /// The caller's inputs are wrong (missing, wrong dtype or shape).
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Error { kind: ErrorKind::InvalidInput, message: message.into() }
    }

    /// The function failed for a reason other than its inputs.
    pub fn failed(message: impl Into<String>) -> Self {
        Error { kind: ErrorKind::Failed, message: message.into() }
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The host error code, if this error came from (or mirrors) a host call.
    pub fn code(&self) -> Option<ErrorCode> {
        match self.kind {
            ErrorKind::Host(code) => Some(code),
            _ => None,
        }
    }

    /// Whether this error carries the host error code `code`.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code() == Some(code)
    }

    /// Whether this error becomes an `invalid-input` run error.
    pub fn is_invalid_input(&self) -> bool {
        self.kind == ErrorKind::InvalidInput
    }

    /// The message, without the code prefix that [`Display`](fmt::Display) adds.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prefixes the message with `context` (`"{context}: {message}"`), keeping the kind.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::Host(code) => write!(f, "{}: {}", code.name(), self.message),
            ErrorKind::InvalidInput | ErrorKind::Failed => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for RunError {
    fn from(e: Error) -> RunError {
        match e.kind {
            ErrorKind::InvalidInput => RunError::InvalidInput(e.message),
            ErrorKind::Host(_) | ErrorKind::Failed => RunError::Failed(e.to_string()),
        }
    }
}

impl From<wit::Error> for Error {
    fn from(e: wit::Error) -> Error {
        Error::new(e.code.into(), e.message)
    }
}
