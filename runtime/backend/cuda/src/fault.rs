//! Data-dependent faults the GPU reports like the CPU backend (issue 11, defect 7): an
//! embedding id outside the table, an integer division by zero. The CPU backend fails
//! the launch; a kernel cannot fail a launch, and checking the ids or divisors on the
//! host would mean a device-to-host copy and a synchronize before every such launch.
//! Instead the launch gets a fault record, two zeroed device words `[code, value]` that
//! the kernel sets when it meets a bad element, and the record travels with the output
//! buffer and every buffer computed from it ([`crate::CudaBuffer`] keeps the list). When
//! a result is read ([`crate::CudaDevice::download`]), after the synchronize it does
//! anyway, the records of its lineage are read back (16 bytes each) and a set one
//! becomes the same error the CPU backend gives. Cheap: one pooled 16-byte buffer and a
//! memset per faulting-capable launch, and a small copy per record at download; the
//! records stay with the invocation whose data they describe, never device-wide.

use sluice_host_api::{DType, TensorMeta};

use crate::{CudaBuffer, CudaDevice, CudaError};

/// Fault codes, as `kernels/common.cuh` defines them.
const FAULT_EMBEDDING_ID: u64 = 1;
const FAULT_DIV_BY_ZERO: u64 = 2;

/// What a record's kernel checks, for the error message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// An embedding gather over a table of `vocab` rows with ids of this shape.
    EmbeddingId { vocab: u64, ids_shape: Vec<u32> },
    /// An integer division in `dtype`.
    DivisionByZero { dtype: DType },
}

/// One launch's fault record: the device words and what they check.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) record: CudaBuffer,
    pub(crate) kind: FaultKind,
}

impl Fault {
    /// A zeroed record on the current lane's stream, ordered before the kernel that
    /// will set it.
    pub(crate) fn new(dev: &CudaDevice, kind: FaultKind) -> Result<Fault, CudaError> {
        let record = dev.alloc(16)?;
        dev.memset_zero(&record)?;
        Ok(Fault { record, kind })
    }

    /// The error the CPU backend gives for the record's words, or `None` if unset.
    pub(crate) fn error(&self, words: [u64; 2]) -> Option<CudaError> {
        message(&self.kind, words).map(CudaError::failure)
    }
}

/// The CPU backend's message for a record's words of `kind`, or `None` if unset.
fn message(kind: &FaultKind, words: [u64; 2]) -> Option<String> {
    match (words[0], kind) {
        (0, _) => None,
        (FAULT_EMBEDDING_ID, FaultKind::EmbeddingId { vocab, ids_shape }) => {
            Some(format!("embedding id {} of ids {ids_shape:?} is not in 0..{vocab}", words[1] as i64))
        }
        (FAULT_DIV_BY_ZERO, FaultKind::DivisionByZero { dtype }) => {
            Some(format!("integer division by zero ({dtype} divisor contains 0)"))
        }
        (code, kind) => Some(format!("fault record of {kind:?} holds unknown code {code}")),
    }
}

/// Decodes the 16 bytes of a record.
pub(crate) fn words(bytes: &[u8]) -> [u64; 2] {
    let word = |i: usize| u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    [word(0), word(1)]
}

/// `y` was computed from `inputs`: it carries their fault records too.
pub(crate) fn inherit(y: &CudaBuffer, inputs: &[(&CudaBuffer, &TensorMeta)]) {
    for (x, _) in inputs {
        y.add_faults(&x.faults());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_decode_to_the_cpu_backends_messages() {
        let mut bytes = 1u64.to_ne_bytes().to_vec();
        bytes.extend((-3i64 as u64).to_ne_bytes());
        let w = words(&bytes);
        assert_eq!(w, [1, -3i64 as u64]);
        let emb = FaultKind::EmbeddingId { vocab: 5, ids_shape: vec![4] };
        assert_eq!(message(&emb, w).unwrap(), "embedding id -3 of ids [4] is not in 0..5");
        assert_eq!(message(&emb, [0, 0]), None);
        let div = FaultKind::DivisionByZero { dtype: DType::I32 };
        assert_eq!(message(&div, [2, 0]).unwrap(), "integer division by zero (i32 divisor contains 0)");
        assert!(message(&div, [1, 0]).unwrap().contains("unknown code 1"));
    }
}
