//! The guest's handle on a served request: the WIT `request` resource's host type, an
//! id into its invocation's served requests (`InvocationState::served`; see `serving`).

/// A served request's id in its invocation.
pub struct RequestHandle(pub(super) u64);
