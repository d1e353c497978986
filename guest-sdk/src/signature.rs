//! A function's signature: the names, datatypes and shapes of its inputs and outputs.
//!
//! An author declares it once with [`crate::signature!`]; the macro encodes it at
//! compile time as JSON into the component's custom section `sluice:signature`
//! ([`SECTION`]). The host reads that section when the component is deployed, reports the
//! signature in the Open Inference Protocol's model metadata, and refuses a request that
//! does not match it before any guest code runs. A component without the section (built
//! before signatures existed, or by an author who declares none) accepts any inputs.
//!
//! The JSON is `{"inputs":[T…],"outputs":[T…]}` with
//! `T = {"name":"…","datatype":"FP32","shape":[-1,384],"optional":false}`; `-1` is an axis
//! of any length. No WIT change: the section travels inside the component's core module.

/// The custom section the signature is stored in.
pub const SECTION: &str = "sluice:signature";

/// A tensor datatype, by its Open Inference Protocol name.
#[allow(clippy::upper_case_acronyms, non_camel_case_types, missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    FP32,
    FP16,
    BF16,
    INT32,
    INT64,
    UINT8,
    BYTES,
}

impl DataType {
    /// The protocol's name (`"FP32"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::FP32 => "FP32",
            DataType::FP16 => "FP16",
            DataType::BF16 => "BF16",
            DataType::INT32 => "INT32",
            DataType::INT64 => "INT64",
            DataType::UINT8 => "UINT8",
            DataType::BYTES => "BYTES",
        }
    }
}

/// One declared input or output.
#[derive(Clone, Copy, Debug)]
pub struct TensorSpec {
    /// Its name (plain text: no `"` or `\`).
    pub name: &'static str,
    /// Its datatype.
    pub datatype: DataType,
    /// Its shape; `-1` is an axis of any length.
    pub shape: &'static [i64],
    /// Whether a request may leave it out (inputs only).
    pub optional: bool,
}

/// A function's declared inputs and outputs.
#[derive(Clone, Copy, Debug)]
pub struct Signature {
    /// The inputs.
    pub inputs: &'static [TensorSpec],
    /// The outputs.
    pub outputs: &'static [TensorSpec],
}

/// A byte sink that either counts (`N == 0` callers) or writes, usable in `const fn`.
struct Writer<const N: usize> {
    out: [u8; N],
    len: usize,
    write: bool,
}

impl<const N: usize> Writer<N> {
    const fn byte(mut self, b: u8) -> Self {
        if self.write {
            self.out[self.len] = b;
        }
        self.len += 1;
        self
    }

    const fn str(mut self, s: &str) -> Self {
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            self = self.byte(bytes[i]);
            i += 1;
        }
        self
    }

    const fn int(mut self, v: i64) -> Self {
        if v < 0 {
            self = self.byte(b'-');
        }
        let mut magnitude = v.unsigned_abs();
        let mut digits = [0u8; 20];
        let mut n = 0;
        loop {
            digits[n] = b'0' + (magnitude % 10) as u8;
            n += 1;
            magnitude /= 10;
            if magnitude == 0 {
                break;
            }
        }
        while n > 0 {
            n -= 1;
            self = self.byte(digits[n]);
        }
        self
    }

    const fn specs(mut self, specs: &[TensorSpec]) -> Self {
        self = self.byte(b'[');
        let mut i = 0;
        while i < specs.len() {
            if i > 0 {
                self = self.byte(b',');
            }
            let spec = specs[i];
            self = self.str("{\"name\":\"").str(spec.name).str("\",\"datatype\":\"").str(spec.datatype.name());
            self = self.str("\",\"shape\":[");
            let mut d = 0;
            while d < spec.shape.len() {
                if d > 0 {
                    self = self.byte(b',');
                }
                self = self.int(spec.shape[d]);
                d += 1;
            }
            self = self.str("],\"optional\":").str(if spec.optional { "true" } else { "false" }).byte(b'}');
            i += 1;
        }
        self.byte(b']')
    }

    const fn signature(self, s: &Signature) -> Self {
        self.str("{\"inputs\":").specs(s.inputs).str(",\"outputs\":").specs(s.outputs).byte(b'}')
    }
}

impl Signature {
    /// The length of [`Signature::encode`]'s JSON.
    pub const fn encoded_len(&self) -> usize {
        Writer::<0> { out: [], len: 0, write: false }.signature(self).len
    }

    /// The JSON the host reads; `N` must be [`Signature::encoded_len`].
    pub const fn encode<const N: usize>(&self) -> [u8; N] {
        let w = Writer::<N> { out: [0; N], len: 0, write: true }.signature(self);
        assert!(w.len == N, "N must be the signature's encoded length");
        w.out
    }
}

/// Declares the function's signature (once per function crate, next to [`crate::export!`]):
///
/// ```
/// sluice_guest::signature! {
///     inputs: ["text": BYTES[-1], "precision": BYTES[1] optional],
///     outputs: ["embedding": FP32[-1, 384]],
/// }
/// ```
///
/// Datatypes are the [`DataType`] names; `-1` is an axis of any length; `optional`
/// marks an input a request may leave out.
#[macro_export]
macro_rules! signature {
    (
        inputs: [$($iname:literal : $idt:ident [$($idim:expr),* $(,)?] $($iopt:ident)?),* $(,)?],
        outputs: [$($oname:literal : $odt:ident [$($odim:expr),* $(,)?]),* $(,)?] $(,)?
    ) => {
        const _: () = {
            const SIGNATURE: $crate::signature::Signature = $crate::signature::Signature {
                inputs: &[$($crate::signature::TensorSpec {
                    name: $iname,
                    datatype: $crate::signature::DataType::$idt,
                    shape: &[$($idim),*],
                    optional: $crate::__signature_optional!($($iopt)?),
                }),*],
                outputs: &[$($crate::signature::TensorSpec {
                    name: $oname,
                    datatype: $crate::signature::DataType::$odt,
                    shape: &[$($odim),*],
                    optional: false,
                }),*],
            };
            const LEN: usize = SIGNATURE.encoded_len();
            #[unsafe(link_section = "sluice:signature")]
            #[used]
            static ENCODED: [u8; LEN] = SIGNATURE.encode::<LEN>();
        };
    };
}

/// `optional` → `true`, nothing → `false`; any other word is a compile error.
#[doc(hidden)]
#[macro_export]
macro_rules! __signature_optional {
    () => {
        false
    };
    (optional) => {
        true
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIG: Signature = Signature {
        inputs: &[
            TensorSpec { name: "text", datatype: DataType::BYTES, shape: &[-1], optional: false },
            TensorSpec { name: "p", datatype: DataType::FP16, shape: &[], optional: true },
        ],
        outputs: &[TensorSpec { name: "e", datatype: DataType::FP32, shape: &[-1, 384, 0, 10], optional: false }],
    };

    #[test]
    fn encodes_json_at_compile_time() {
        const LEN: usize = SIG.encoded_len();
        const BYTES: [u8; LEN] = SIG.encode::<LEN>();
        assert_eq!(
            std::str::from_utf8(&BYTES).unwrap(),
            concat!(
                r#"{"inputs":[{"name":"text","datatype":"BYTES","shape":[-1],"optional":false},"#,
                r#"{"name":"p","datatype":"FP16","shape":[],"optional":true}],"#,
                r#""outputs":[{"name":"e","datatype":"FP32","shape":[-1,384,0,10],"optional":false}]}"#
            )
        );
    }

    #[test]
    fn encodes_extreme_integers() {
        const S: Signature = Signature {
            inputs: &[TensorSpec {
                name: "x",
                datatype: DataType::INT64,
                shape: &[i64::MIN, i64::MAX],
                optional: false,
            }],
            outputs: &[],
        };
        const LEN: usize = S.encoded_len();
        let json = String::from_utf8(S.encode::<LEN>().to_vec()).unwrap();
        assert!(json.contains("[-9223372036854775808,9223372036854775807]"), "{json}");
        assert!(json.ends_with(r#""outputs":[]}"#), "{json}");
    }
}
