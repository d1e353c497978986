//! The two reads of a JSON request (`json_request`), as serde visitors over the text:
//! every field is taken as whatever JSON has there ([`Field`]), so that the checks, and
//! their messages, are the protocol's (`json_request::scan`), not serde's. A tensor's
//! `data` goes to `data`'s walkers: counted in a scan, decoded in the second read.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::data::{Count, Leaves, Typed};
use super::{MAX_PARAMETERS, MAX_TENSORS};
use crate::engine::IoData;
use crate::oip::{OipError, ParamValue, Parameters, RequestedOutput};

/// A field as the request has it: absent, `null`, of the right kind, or another kind.
pub(super) enum Field<T> {
    Missing,
    Null,
    Ok(T),
    Other,
}

/// The top-level fields. In a decoding read, `data` holds each input's elements.
pub(super) struct RequestFields {
    pub(super) id: Field<String>,
    pub(super) inputs: Field<Vec<InputFields>>,
    pub(super) parameters: Option<Result<Parameters, OipError>>,
    pub(super) outputs: Field<Vec<Result<RequestedOutput, OipError>>>,
    pub(super) data: Vec<Option<Result<IoData, String>>>,
}

/// One entry of `inputs`.
pub(super) enum InputFields {
    NotObject,
    Object {
        name: Field<String>,
        shape: Field<Shape>,
        datatype: Field<String>,
        parameters: Option<Result<Parameters, OipError>>,
        /// Its `data`'s elements (counted in a scan), if it has a `data` field.
        data: Option<Leaves>,
    },
}

/// A shape as written: its rank, whether every entry is a non-negative integer, and
/// its dimensions (the first few, past [`sluice_host_api::MAX_RANK`] only counted).
pub(super) struct Shape {
    pub(super) rank: usize,
    pub(super) valid: bool,
    pub(super) dims: Vec<u64>,
}

/// Reads the request: a scan when `plans` is `None`, else a decoding read of every
/// input's elements as `plans` (datatype, element count per input) say.
pub(super) fn read(json: &[u8], plans: Option<&[(&str, u64)]>, hint_binary: bool) -> Result<RequestFields, OipError> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let fields = Top { plans }.deserialize(&mut de).and_then(|f| de.end().map(|()| f));
    match fields {
        Ok(Some(fields)) => Ok(fields),
        Ok(None) => Err(OipError("request body must be a JSON object".into())),
        Err(e) if e.is_data() => {
            // Our own refusals: the message without serde's position.
            let message = e.to_string();
            let position = format!(" at line {} column {}", e.line(), e.column());
            Err(OipError(message.strip_suffix(&position).unwrap_or(&message).to_owned()))
        }
        Err(e) => {
            let hint = if hint_binary && e.is_syntax() && e.to_string().contains("trailing characters") {
                " (binary tensor data needs the Inference-Header-Content-Length header)"
            } else {
                ""
            };
            Err(OipError(format!("request body is not valid JSON: {e}{hint}")))
        }
    }
}

/// Implements a visitor's callbacks for the JSON kinds it does not take: each gives
/// `$value(self)`, arrays and objects drained first.
macro_rules! others {
    ($value:path => $($kind:ident)*) => { $(others!(@ $kind $value);)* };
    (@ bool $v:path) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> { Ok($v(self)) }
    };
    (@ i64 $v:path) => {
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> { Ok($v(self)) }
    };
    (@ u64 $v:path) => {
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> { Ok($v(self)) }
    };
    (@ f64 $v:path) => {
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> { Ok($v(self)) }
    };
    (@ str $v:path) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> { Ok($v(self)) }
    };
    (@ unit $v:path) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> { Ok($v(self)) }
    };
    (@ seq $v:path) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($v(self))
        }
    };
    (@ map $v:path) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($v(self))
        }
    };
}

/// Implements `DeserializeSeed` for a visitor: the value is whatever JSON has.
macro_rules! seed {
    ($t:ty) => {
        impl<'de> DeserializeSeed<'de> for $t {
            type Value = <Self as Visitor<'de>>::Value;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
        }
    };
}

fn other<T, V>(_: V) -> Field<T> {
    Field::Other
}

fn null<T, V>(_: V) -> Field<T> {
    Field::Null
}

fn custom<E: serde::de::Error>(message: impl fmt::Display) -> E {
    E::custom(message)
}

/// The request object (`None`: the body is another kind of JSON).
struct Top<'p> {
    plans: Option<&'p [(&'p str, u64)]>,
}

fn not_an_object<V>(_: V) -> Option<RequestFields> {
    None
}

seed!(Top<'_>);

impl<'de> Visitor<'de> for Top<'_> {
    type Value = Option<RequestFields>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = RequestFields {
            id: Field::Missing,
            inputs: Field::Missing,
            parameters: None,
            outputs: Field::Missing,
            data: Vec::new(),
        };
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match &*key {
                "id" => fields.id = map.next_value_seed(Text)?,
                "inputs" => (fields.inputs, fields.data) = map.next_value_seed(Inputs { plans: self.plans })?,
                "parameters" => fields.parameters = Some(map.next_value_seed(Params { of: "request".into() })?),
                "outputs" => fields.outputs = map.next_value_seed(Outputs)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(fields))
    }

    others!(not_an_object => bool i64 u64 f64 str unit seq);
}

/// A string field.
struct Text;

seed!(Text);

impl<'de> Visitor<'de> for Text {
    type Value = Field<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Field::Ok(s.to_owned()))
    }
    others!(other => bool i64 u64 f64 seq map);
    others!(null => unit);
}

/// The `inputs` array: each input's fields, and in a decoding read its elements.
struct Inputs<'p> {
    plans: Option<&'p [(&'p str, u64)]>,
}

type InputsValue = (Field<Vec<InputFields>>, Vec<Option<Result<IoData, String>>>);

fn not_inputs<V>(_: V) -> InputsValue {
    (Field::Other, Vec::new())
}

fn null_inputs<V>(_: V) -> InputsValue {
    (Field::Null, Vec::new())
}

seed!(Inputs<'_>);

impl<'de> Visitor<'de> for Inputs<'_> {
    type Value = InputsValue;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of inputs")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (mut inputs, mut data) = (Vec::new(), Vec::new());
        loop {
            if inputs.len() == MAX_TENSORS {
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    return Err(custom(format!("a request may have at most {MAX_TENSORS} inputs")));
                }
                break;
            }
            let plan = self.plans.and_then(|p| p.get(inputs.len()).copied());
            let Some((fields, elements)) = seq.next_element_seed(Input { plan })? else { break };
            inputs.push(fields);
            data.push(elements);
        }
        Ok((Field::Ok(inputs), data))
    }
    others!(not_inputs => bool i64 u64 f64 str map);
    others!(null_inputs => unit);
}

/// One input object; `plan` (its datatype and element count) in a decoding read.
struct Input<'p> {
    plan: Option<(&'p str, u64)>,
}

type InputValue = (InputFields, Option<Result<IoData, String>>);

fn not_an_input<V>(_: V) -> InputValue {
    (InputFields::NotObject, None)
}

seed!(Input<'_>);

impl<'de> Visitor<'de> for Input<'_> {
    type Value = InputValue;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an input object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut name, mut shape, mut datatype, mut parameters) =
            (Field::Missing, Field::Missing, Field::Missing, None);
        let (mut data, mut elements) = (None, None);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match &*key {
                "name" => name = map.next_value_seed(Text)?,
                "shape" => shape = map.next_value_seed(ShapeSeed)?,
                "datatype" => datatype = map.next_value_seed(Text)?,
                "parameters" => parameters = Some(map.next_value_seed(Params { of: "input".into() })?),
                "data" => match self.plan {
                    None => data = Some(map.next_value_seed(Count(Leaves::default()))?),
                    Some((datatype, expected)) => {
                        data = Some(Leaves::default());
                        elements = Some(map.next_value_seed(Typed { datatype, expected })?);
                    }
                },
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // The parameters' messages name the input, whatever the order of its fields.
        if let (Some(Err(e)), Field::Ok(n)) = (&mut parameters, &name) {
            e.0 = e.0.replacen("input:", &format!("input {n:?}:"), 1);
        }
        Ok((InputFields::Object { name, shape, datatype, parameters, data }, elements))
    }
    others!(not_an_input => bool i64 u64 f64 str unit seq);
}

/// A `shape` array.
struct ShapeSeed;

seed!(ShapeSeed);

impl<'de> Visitor<'de> for ShapeSeed {
    type Value = Field<Shape>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a shape array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut shape = Shape { rank: 0, valid: true, dims: Vec::new() };
        while let Some(dim) = seq.next_element_seed(Dim)? {
            shape.rank += 1;
            match dim {
                Some(d) if shape.dims.len() <= sluice_host_api::MAX_RANK => shape.dims.push(d),
                Some(_) => {}
                None => shape.valid = false,
            }
        }
        Ok(Field::Ok(shape))
    }
    others!(other => bool i64 u64 f64 str map);
    others!(null => unit);
}

/// One entry of a shape: a non-negative integer, or `None`.
struct Dim;

fn no_dim<V>(_: V) -> Option<u64> {
    None
}

seed!(Dim);

impl<'de> Visitor<'de> for Dim {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a non-negative integer")
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(u64::try_from(v).ok())
    }
    others!(no_dim => bool f64 str unit seq map);
}

/// A `parameters` object of `of`: each value a bool, a number or a string.
struct Params {
    of: String,
}

impl Params {
    fn not_an_object(self) -> Result<Parameters, OipError> {
        Err(OipError(format!("{}: \"parameters\" must be an object", self.of)))
    }

    fn none(self) -> Result<Parameters, OipError> {
        Ok(Parameters::new())
    }
}

seed!(Params);

impl<'de> Visitor<'de> for Params {
    type Value = Result<Parameters, OipError>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a parameters object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut parameters = Parameters::new();
        let mut refused = None;
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Param)?;
            if refused.is_some() {
                continue;
            }
            match value {
                Ok(v) if parameters.len() < MAX_PARAMETERS || parameters.contains_key(&key) => {
                    parameters.insert(key, v);
                }
                Ok(_) => refused = Some(OipError(format!("{}: more than {MAX_PARAMETERS} parameters", self.of))),
                Err(why) => refused = Some(OipError(format!("{}: parameter {key:?} {why}", self.of))),
            }
        }
        Ok(refused.map_or(Ok(parameters), Err))
    }
    others!(Params::not_an_object => bool i64 u64 f64 str seq);
    others!(Params::none => unit);
}

/// One parameter's value, or why it is none.
struct Param;

fn not_a_parameter<V>(_: V) -> Result<ParamValue, &'static str> {
    Err("must be a bool, a number or a string")
}

seed!(Param);

impl<'de> Visitor<'de> for Param {
    type Value = Result<ParamValue, &'static str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a bool, a number or a string")
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Ok(ParamValue::Bool(v)))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Ok(ParamValue::Int(v)))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Ok(i64::try_from(v).map_or(ParamValue::Uint(v), ParamValue::Int)))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Ok(ParamValue::Double(v)))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Ok(ParamValue::String(v.to_owned())))
    }
    others!(not_a_parameter => unit seq map);
}

/// The `outputs` array.
struct Outputs;

seed!(Outputs);

impl<'de> Visitor<'de> for Outputs {
    type Value = Field<Vec<Result<RequestedOutput, OipError>>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of outputs")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut outputs = Vec::new();
        while let Some(output) = seq.next_element_seed(Output { index: outputs.len() })? {
            if outputs.len() == MAX_TENSORS {
                return Err(custom(format!("a request may ask for at most {MAX_TENSORS} outputs")));
            }
            outputs.push(output);
        }
        Ok(Field::Ok(outputs))
    }
    others!(other => bool i64 u64 f64 str map);
    others!(null => unit);
}

/// One requested output.
struct Output {
    index: usize,
}

impl Output {
    fn not_an_object(self) -> Result<RequestedOutput, OipError> {
        Err(OipError(format!("outputs[{}] must be an object", self.index)))
    }
}

seed!(Output);

impl<'de> Visitor<'de> for Output {
    type Value = Result<RequestedOutput, OipError>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an output object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut name, mut parameters) = (Field::Missing, None);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match &*key {
                "name" => name = map.next_value_seed(Text)?,
                "parameters" => parameters = Some(map.next_value_seed(Params { of: "output".into() })?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let Field::Ok(name) = name else {
            return Ok(Err(OipError(format!("outputs[{}] needs a string \"name\"", self.index))));
        };
        Ok(match parameters.unwrap_or_else(|| Ok(Parameters::new())) {
            Ok(parameters) => Ok(RequestedOutput { name, parameters }),
            Err(e) => Err(OipError(e.0.replacen("output:", &format!("output {name:?}:"), 1))),
        })
    }
    others!(Output::not_an_object => bool i64 u64 f64 str unit seq);
}
