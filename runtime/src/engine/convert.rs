//! The host's side of the WIT glue: the shared conversions between the generated
//! bindings and the host API's types ([`sluice_host_api::wit_conversions!`], the same
//! code the guest SDK uses), and [`HostError::into_wit`], the one place that decides
//! whether the guest of a failed import gets the WIT `error` record or traps.

use super::bindings::WitError;
use super::host_error::HostError;

sluice_host_api::wit_conversions!(super::bindings::sluice::gpu);

impl HostError {
    /// What the guest gets: its WIT `error`, or a trap of its instance.
    pub(crate) fn into_wit(self) -> wasmtime::Result<WitError> {
        match self {
            HostError::Guest(e) => Ok(e.into()),
            HostError::Trap(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_host_api as api;
    use sluice_host_api::ApiError;
    use sluice_host_api::{DType, ErrorCode};

    use super::super::bindings::WitDtype;
    use super::super::bindings::sluice::gpu::fused as wit_fused;
    use super::super::bindings::sluice::gpu::ops as wit;
    use super::super::bindings::sluice::gpu::types::ErrorCode as WitErrorCode;
    use super::*;

    #[test]
    fn fused_ops_keep_their_parameters() {
        let lin = wit_fused::FusedOp::Linear(wit_fused::LinearArgs {
            transpose_w: true,
            activation: Some(wit::UnaryOp::GeluTanh),
        });
        assert_eq!(api::Op::from(lin), api::Op::Linear { transpose_w: true, activation: Some(api::UnaryOp::GeluTanh) });
        let plain = wit_fused::FusedOp::Linear(wit_fused::LinearArgs { transpose_w: false, activation: None });
        assert_eq!(api::Op::from(plain), api::Op::Linear { transpose_w: false, activation: None });
        let aln = wit_fused::FusedOp::AddLayerNorm(wit::LayerNormArgs { eps: 1e-12 });
        assert_eq!(api::Op::from(aln), api::Op::AddLayerNorm { eps: 1e-12 });
        let att = wit_fused::FusedOp::Attention(wit_fused::AttentionArgs { heads: 12, scale: 0.125 });
        assert_eq!(api::Op::from(att), api::Op::Attention { heads: 12, scale: 0.125 });
        // Every activation maps onto the op of the same name.
        assert_eq!(api::UnaryOp::from(wit::UnaryOp::Rsqrt), api::UnaryOp::Rsqrt);
        assert_eq!(api::UnaryOp::from(wit::UnaryOp::Relu), api::UnaryOp::Relu);
    }

    #[test]
    fn enums_map_in_wit_order_both_ways() {
        for (i, d) in DType::ALL.into_iter().chain(DType::QUANTIZED).enumerate() {
            let w = WitDtype::from(d);
            assert_eq!(w as usize, i, "{d:?}");
            assert_eq!(DType::from(w), d);
        }
        for (i, u) in api::UnaryOp::ALL.into_iter().enumerate() {
            let w = wit::UnaryOp::from(u);
            assert_eq!(w as usize, i, "{u:?}");
            assert_eq!(api::UnaryOp::from(w), u);
        }
        let code = WitErrorCode::from(ErrorCode::DeviceFailure);
        assert_eq!(code, WitErrorCode::DeviceFailure);
        assert_eq!(ErrorCode::from(code), ErrorCode::DeviceFailure);
    }

    #[test]
    fn refusals_reach_the_guest_and_faults_trap() {
        let refused = HostError::from(ApiError::shape("bad")).into_wit().expect("a refusal is not a trap");
        assert_eq!(refused.code, WitErrorCode::ShapeMismatch);
        assert_eq!(refused.message, "bad");
        let fault = HostError::from(wasmtime::component::ResourceTableError::NotPresent);
        assert!(fault.into_wit().is_err(), "a bad handle traps");
    }
}
