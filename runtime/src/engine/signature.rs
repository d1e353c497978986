//! A function's declared signature, read from its component's `sluice:signature` custom section.
//!
//! The guest SDK's `signature!` macro writes the section (JSON, see
//! `guest-sdk/src/signature.rs`); it sits in the component's core module, so no WIT change
//! was needed and components built before it simply lack it ([`read_signature`] → `None`:
//! the function accepts any inputs). A section that is present but malformed makes the
//! component invalid, so a deploy refuses it.

use serde::{Deserialize, Serialize};
use wasmparser::{Parser, Payload};

use super::ComponentError;

/// The custom section's name.
pub const SIGNATURE_SECTION: &str = "sluice:signature";

/// Every datatype an input or output can have, by its Open Inference Protocol name.
pub const DATATYPES: [&str; 7] = ["FP32", "FP16", "BF16", "INT32", "INT64", "UINT8", "BYTES"];

/// One declared input or output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    pub name: String,
    /// One of [`DATATYPES`].
    pub datatype: String,
    /// `-1` is an axis of any length.
    pub shape: Vec<i64>,
    /// Whether a request may leave it out.
    #[serde(default)]
    pub optional: bool,
}

/// A function's inputs and outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

/// The signature in `wasm`'s custom section, `None` if it has none.
pub fn read_signature(wasm: &[u8]) -> Result<Option<Signature>, ComponentError> {
    let invalid = |msg: String| ComponentError::Invalid(format!("custom section `{SIGNATURE_SECTION}`: {msg}"));
    let mut found: Option<&[u8]> = None;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| ComponentError::Invalid(e.to_string()))?;
        if let Payload::CustomSection(section) = payload
            && section.name() == SIGNATURE_SECTION
        {
            if found.is_some() {
                return Err(invalid("appears more than once".into()));
            }
            found = Some(section.data());
        }
    }
    let Some(data) = found else { return Ok(None) };
    let signature: Signature = serde_json::from_slice(data).map_err(|e| invalid(e.to_string()))?;
    for (kind, specs) in [("input", &signature.inputs), ("output", &signature.outputs)] {
        for (i, spec) in specs.iter().enumerate() {
            if !DATATYPES.contains(&spec.datatype.as_str()) {
                return Err(invalid(format!("{kind} {:?} has unknown datatype {:?}", spec.name, spec.datatype)));
            }
            if spec.shape.iter().any(|&d| d < -1) {
                return Err(invalid(format!("{kind} {:?} has a negative axis other than -1", spec.name)));
            }
            if specs[..i].iter().any(|s| s.name == spec.name) {
                return Err(invalid(format!("{kind} {:?} is declared twice", spec.name)));
            }
        }
    }
    Ok(Some(signature))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module (enough for the parser) with the given custom sections.
    fn module_with(sections: &[(&str, &[u8])]) -> Vec<u8> {
        let mut wasm = vec![0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
        for (name, data) in sections {
            let mut body = vec![name.len() as u8];
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(data);
            assert!(body.len() < 128, "one-byte LEB128 sizes only");
            wasm.push(0);
            wasm.push(body.len() as u8);
            wasm.extend(body);
        }
        wasm
    }

    #[test]
    fn reads_a_declared_signature_and_none_without_one() {
        let json = br#"{"inputs":[{"name":"x","datatype":"FP32","shape":[-1,3]}],"outputs":[]}"#;
        let s = read_signature(&module_with(&[("other", b"x"), (SIGNATURE_SECTION, json)])).unwrap().unwrap();
        assert_eq!(s.inputs[0].shape, [-1, 3]);
        assert!(!s.inputs[0].optional);
        assert_eq!(read_signature(&module_with(&[("other", b"x")])).unwrap(), None);
    }

    #[test]
    fn refuses_malformed_signatures() {
        let cases: &[(&[u8], &str)] = &[
            (b"{", "EOF"),
            (br#"{"inputs":[{"name":"x","datatype":"FP64","shape":[1]}],"outputs":[]}"#, "unknown datatype"),
            (br#"{"inputs":[{"name":"x","datatype":"FP32","shape":[-2]}],"outputs":[]}"#, "negative axis"),
            (br#"{"inputs":[],"outputs":[{"name":"y","datatype":"FP32","shape":[]},{"name":"y","datatype":"FP32","shape":[]}]}"#, "twice"),
            (br#"{"inputs":[],"outputs":[],"extra":1}"#, "unknown field"),
        ];
        for (json, needle) in cases {
            let e = read_signature(&module_with(&[(SIGNATURE_SECTION, json)])).unwrap_err().to_string();
            assert!(e.contains(needle), "{} → {e}", String::from_utf8_lossy(json));
        }
        let twice = module_with(&[(SIGNATURE_SECTION, br#"{"inputs":[],"outputs":[]}"#), (SIGNATURE_SECTION, b"{}")]);
        assert!(read_signature(&twice).unwrap_err().to_string().contains("more than once"));
    }
}
