//! Checks a request against the function's declared [`Signature`] before any guest code runs.
//!
//! Every input must be declared, with the declared datatype and a shape of the declared
//! rank whose fixed axes match (`-1` matches any length); every input not marked
//! optional must be present; every requested output must be declared.

use super::{OipError, RequestedOutput, datatype_name, err};
use crate::engine::{IoTensor, Signature, TensorSpec};

/// Refuses `inputs` or `outputs` that do not fit `signature`.
pub fn check_request(signature: &Signature, inputs: &[IoTensor], outputs: &[RequestedOutput]) -> Result<(), OipError> {
    let declared = |specs: &[TensorSpec]| specs.iter().map(|s| format!("{:?}", s.name)).collect::<Vec<_>>().join(", ");
    for input in inputs {
        let Some(spec) = signature.inputs.iter().find(|s| s.name == input.name) else {
            return err(format!(
                "the function has no input named {:?} (its inputs: {})",
                input.name,
                declared(&signature.inputs)
            ));
        };
        let datatype = datatype_name(&input.data);
        if datatype != spec.datatype {
            return err(format!("input {:?}: datatype {datatype}, the function expects {}", input.name, spec.datatype));
        }
        let fits = input.shape.len() == spec.shape.len()
            && input.shape.iter().zip(&spec.shape).all(|(&d, &want)| want == -1 || d as i64 == want);
        if !fits {
            return err(format!(
                "input {:?}: shape {:?}, the function expects {:?}",
                input.name, input.shape, spec.shape
            ));
        }
    }
    if let Some(missing) = signature.inputs.iter().find(|s| !s.optional && !inputs.iter().any(|i| i.name == s.name)) {
        return err(format!("the function needs an input named {:?}", missing.name));
    }
    if let Some(unknown) = outputs.iter().find(|o| !signature.outputs.iter().any(|s| s.name == o.name)) {
        return err(format!(
            "the function has no output named {:?} (its outputs: {})",
            unknown.name,
            declared(&signature.outputs)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::IoData;
    use crate::oip::Parameters;

    fn spec(name: &str, datatype: &str, shape: &[i64], optional: bool) -> TensorSpec {
        TensorSpec { name: name.into(), datatype: datatype.into(), shape: shape.to_vec(), optional }
    }

    fn signature() -> Signature {
        Signature {
            inputs: vec![spec("text", "BYTES", &[-1], false), spec("p", "INT32", &[2, -1], true)],
            outputs: vec![spec("e", "FP32", &[-1, 4], false)],
        }
    }

    fn text(n: usize) -> IoTensor {
        IoTensor { name: "text".into(), shape: vec![n as u64], data: IoData::Bytes(vec![b"a".to_vec(); n]) }
    }

    fn p(shape: &[u64]) -> IoTensor {
        let n = shape.iter().product::<u64>() as usize;
        IoTensor { name: "p".into(), shape: shape.to_vec(), data: IoData::I32(vec![0; n]) }
    }

    fn out(name: &str) -> RequestedOutput {
        RequestedOutput { name: name.into(), parameters: Parameters::new() }
    }

    #[test]
    fn accepts_what_fits() {
        let s = signature();
        check_request(&s, &[text(3)], &[]).unwrap();
        check_request(&s, &[text(0), p(&[2, 7])], &[out("e")]).unwrap();
    }

    #[test]
    fn refuses_what_does_not_fit_and_says_why() {
        let s = signature();
        let mut wrong_type = text(1);
        wrong_type.data = IoData::U8(vec![1]);
        let cases: Vec<(Vec<IoTensor>, Vec<RequestedOutput>, &str)> = vec![
            (vec![], vec![], "needs an input named \"text\""),
            (vec![p(&[2, 1])], vec![], "needs an input named \"text\""),
            (vec![text(1), p(&[3, 1])], vec![], "shape [3, 1], the function expects [2, -1]"),
            (vec![text(1), p(&[2])], vec![], "shape [2]"),
            (vec![wrong_type], vec![], "datatype UINT8, the function expects BYTES"),
            (vec![text(1), IoTensor { name: "zz".into(), ..text(1) }], vec![], "no input named \"zz\""),
            (vec![text(1)], vec![out("nope")], "no output named \"nope\""),
        ];
        for (inputs, outputs, needle) in cases {
            let e = check_request(&s, &inputs, &outputs).unwrap_err();
            assert!(e.0.contains(needle), "{needle:?} not in {e}");
        }
    }
}
