//! The tensor side of dynamic batching: which requests can share an invocation, how
//! their inputs are joined along the first axis and how the outputs are cut back.
//!
//! Requests share a batch only when their inputs have the same names, data types and
//! trailing dimensions ([`BatchShape`]); only the first axis (the rows) may differ.
//! [`concat`] joins the inputs of such requests in order, and [`split`] cuts every output
//! into the same row counts, so request *i* gets rows *i* of each output. An output whose
//! first axis does not hold one row per input row cannot be split: the batch fails with
//! a message saying so, since the function broke its batching contract.

use crate::engine::{IoData, IoTensor, element_count};

/// The part of a request's inputs a batch must agree on: each input's name, data type
/// and dimensions after the first, in request order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BatchShape(Vec<(String, u8, Vec<u64>)>);

/// Why a request cannot join a batch.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unbatchable {
    /// An input has no first axis (a scalar).
    Scalar(String),
    /// Inputs disagree on their number of rows.
    Rows { first: u64, name: String, rows: u64 },
}

impl std::fmt::Display for Unbatchable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unbatchable::Scalar(name) => {
                write!(f, "input {name:?} is a scalar; a batched function needs a first (batch) axis on every input")
            }
            Unbatchable::Rows { first, name, rows } => write!(
                f,
                "input {name:?} has {rows} rows where the first input has {first}; \
                 a batched function needs the same first dimension on every input"
            ),
        }
    }
}

fn dtype_tag(data: &IoData) -> u8 {
    match data {
        IoData::F32(_) => 0,
        IoData::F16(_) => 1,
        IoData::Bf16(_) => 2,
        IoData::I32(_) => 3,
        IoData::I64(_) => 4,
        IoData::U8(_) => 5,
        IoData::Bytes(_) => 6,
    }
}

/// The batch shape of a request and its row count (0 for a request without inputs).
pub(crate) fn batch_shape(inputs: &[IoTensor]) -> Result<(BatchShape, u64), Unbatchable> {
    let mut rows = None;
    let mut shape = Vec::with_capacity(inputs.len());
    for t in inputs {
        let Some((&r, rest)) = t.shape.split_first() else {
            return Err(Unbatchable::Scalar(t.name.clone()));
        };
        match rows {
            None => rows = Some(r),
            Some(first) if first != r => return Err(Unbatchable::Rows { first, name: t.name.clone(), rows: r }),
            Some(_) => {}
        }
        shape.push((t.name.clone(), dtype_tag(&t.data), rest.to_vec()));
    }
    Ok((BatchShape(shape), rows.unwrap_or(0)))
}

fn append(into: &mut IoData, from: IoData) {
    match (into, from) {
        (IoData::F32(a), IoData::F32(b)) => a.extend(b),
        (IoData::F16(a), IoData::F16(b)) | (IoData::Bf16(a), IoData::Bf16(b)) => a.extend(b),
        (IoData::I32(a), IoData::I32(b)) => a.extend(b),
        (IoData::I64(a), IoData::I64(b)) => a.extend(b),
        (IoData::U8(a), IoData::U8(b)) => a.extend(b),
        (IoData::Bytes(a), IoData::Bytes(b)) => a.extend(b),
        // Requests of one batch have one `BatchShape`, so their data types agree.
        _ => unreachable!("requests of one batch share their data types"),
    }
}

/// Joins the inputs of requests with one [`BatchShape`] along the first axis, in order.
pub(crate) fn concat(requests: Vec<Vec<IoTensor>>) -> Vec<IoTensor> {
    let mut requests = requests.into_iter();
    let Some(mut joined) = requests.next() else { return Vec::new() };
    for inputs in requests {
        for (into, t) in joined.iter_mut().zip(inputs) {
            into.shape[0] += t.shape[0];
            append(&mut into.data, t.data);
        }
    }
    joined
}

/// Cuts `data` into consecutive pieces of `counts` elements.
fn cut(data: IoData, counts: &[usize]) -> Vec<IoData> {
    fn pieces<T>(v: Vec<T>, counts: &[usize]) -> Vec<Vec<T>> {
        let mut rest = v.into_iter();
        counts.iter().map(|&n| rest.by_ref().take(n).collect()).collect()
    }
    match data {
        IoData::F32(v) => pieces(v, counts).into_iter().map(IoData::F32).collect(),
        IoData::F16(v) => pieces(v, counts).into_iter().map(IoData::F16).collect(),
        IoData::Bf16(v) => pieces(v, counts).into_iter().map(IoData::Bf16).collect(),
        IoData::I32(v) => pieces(v, counts).into_iter().map(IoData::I32).collect(),
        IoData::I64(v) => pieces(v, counts).into_iter().map(IoData::I64).collect(),
        IoData::U8(v) => pieces(v, counts).into_iter().map(IoData::U8).collect(),
        IoData::Bytes(v) => pieces(v, counts).into_iter().map(IoData::Bytes).collect(),
    }
}

/// Cuts each output of a batch into one piece per request, `rows[i]` rows for request
/// *i*; every output must have `rows.iter().sum()` rows.
pub(crate) fn split(outputs: Vec<IoTensor>, rows: &[u64]) -> Result<Vec<Vec<IoTensor>>, String> {
    let total: u64 = rows.iter().sum();
    let mut per_request: Vec<Vec<IoTensor>> = rows.iter().map(|_| Vec::with_capacity(outputs.len())).collect();
    for t in outputs {
        let first = t.shape.first().copied();
        if first != Some(total) {
            return Err(format!(
                "output {:?} has shape {:?}, not {total} rows (one per input row of the batch); \
                 a function deployed with batching must keep the first axis as its batch",
                t.name, t.shape
            ));
        }
        let per_row: u64 = t.shape[1..].iter().product();
        if (element_count(&t.data) as u64) != total * per_row {
            return Err(format!("output {:?} holds fewer or more elements than its shape {:?}", t.name, t.shape));
        }
        let counts: Vec<usize> = rows.iter().map(|&r| (r * per_row) as usize).collect();
        for ((request, data), &r) in per_request.iter_mut().zip(cut(t.data, &counts)).zip(rows) {
            let mut shape = t.shape.clone();
            shape[0] = r;
            request.push(IoTensor { name: t.name.clone(), shape, data });
        }
    }
    Ok(per_request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(name: &str, shape: &[u64], start: f32) -> IoTensor {
        let n = shape.iter().product::<u64>() as usize;
        IoTensor {
            name: name.into(),
            shape: shape.to_vec(),
            data: IoData::F32((0..n).map(|i| start + i as f32).collect()),
        }
    }

    fn texts(name: &str, items: &[&str]) -> IoTensor {
        IoTensor {
            name: name.into(),
            shape: vec![items.len() as u64],
            data: IoData::Bytes(items.iter().map(|s| s.as_bytes().to_vec()).collect()),
        }
    }

    #[test]
    fn requests_with_other_trailing_dims_or_types_have_other_shapes() {
        let (a, rows) = batch_shape(&[f32s("x", &[2, 3], 0.0)]).unwrap();
        assert_eq!(rows, 2);
        let (b, _) = batch_shape(&[f32s("x", &[5, 3], 0.0)]).unwrap();
        assert_eq!(a, b, "only the rows differ");
        let (c, _) = batch_shape(&[f32s("x", &[2, 4], 0.0)]).unwrap();
        assert_ne!(a, c);
        let (d, _) = batch_shape(&[texts("x", &["a", "b"])]).unwrap();
        let (e, _) = batch_shape(&[f32s("x", &[2], 0.0)]).unwrap();
        assert_ne!(d, e, "the data type is part of the shape");
    }

    #[test]
    fn scalars_and_ragged_rows_cannot_batch() {
        assert_eq!(batch_shape(&[f32s("s", &[], 0.0)]), Err(Unbatchable::Scalar("s".into())));
        let err = batch_shape(&[f32s("a", &[2, 1], 0.0), f32s("b", &[3, 1], 0.0)]).unwrap_err();
        assert_eq!(err, Unbatchable::Rows { first: 2, name: "b".into(), rows: 3 });
        assert!(err.to_string().contains("\"b\" has 3 rows"), "{err}");
    }

    #[test]
    fn concat_then_split_gives_each_request_its_rows_back() {
        let requests = vec![
            vec![f32s("x", &[1, 2], 0.0), texts("t", &["a"])],
            vec![f32s("x", &[3, 2], 10.0), texts("t", &["b", "c", "d"])],
            vec![f32s("x", &[2, 2], 100.0), texts("t", &["e", "f"])],
        ];
        let rows: Vec<u64> = requests.iter().map(|r| batch_shape(r).unwrap().1).collect();
        assert_eq!(rows, [1, 3, 2]);
        let joined = concat(requests.clone());
        assert_eq!(joined[0].shape, [6, 2]);
        assert_eq!(joined[1].shape, [6]);
        // An echo: the outputs are the inputs.
        let back = split(joined, &rows).unwrap();
        assert_eq!(back, requests);
    }

    #[test]
    fn an_output_without_one_row_per_input_row_fails_the_batch() {
        let summed = vec![f32s("sum", &[1], 0.0)];
        let err = split(summed, &[2, 3]).unwrap_err();
        assert!(err.contains("not 5 rows"), "{err}");
        let scalar = vec![f32s("s", &[], 0.0)];
        assert!(split(scalar, &[1]).is_err());
        let short = vec![IoTensor { name: "y".into(), shape: vec![2, 2], data: IoData::F32(vec![0.0; 3]) }];
        assert!(split(short, &[1, 1]).unwrap_err().contains("elements"));
    }
}
