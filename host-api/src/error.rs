//! Guest-visible error codes: the Rust mirror of the WIT `error-code` and `error`.

use std::fmt;

/// Machine-readable reason a host call was refused; mirrors WIT `error-code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    ShapeMismatch,
    DtypeMismatch,
    InvalidArgument,
    NotFound,
    QuotaExceeded,
    OutOfMemory,
    TooLarge,
    DeviceFailure,
    Cancelled,
}

impl ErrorCode {
    /// Stable kebab-case name, as in WIT.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorCode::ShapeMismatch => "shape-mismatch",
            ErrorCode::DtypeMismatch => "dtype-mismatch",
            ErrorCode::InvalidArgument => "invalid-argument",
            ErrorCode::NotFound => "not-found",
            ErrorCode::QuotaExceeded => "quota-exceeded",
            ErrorCode::OutOfMemory => "out-of-memory",
            ErrorCode::TooLarge => "too-large",
            ErrorCode::DeviceFailure => "device-failure",
            ErrorCode::Cancelled => "cancelled",
        }
    }
}

/// An error returned to the guest by a host call: a code and a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.name())]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError { code, message: message.into() }
    }
    pub fn shape(message: impl fmt::Display) -> Self {
        Self::new(ErrorCode::ShapeMismatch, message.to_string())
    }
    pub fn dtype(message: impl fmt::Display) -> Self {
        Self::new(ErrorCode::DtypeMismatch, message.to_string())
    }
    pub fn arg(message: impl fmt::Display) -> Self {
        Self::new(ErrorCode::InvalidArgument, message.to_string())
    }
}
