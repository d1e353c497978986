//! sluice runtime.
