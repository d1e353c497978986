//! A tensor's `data` as the two reads of a JSON request see it: walked element by
//! element (nested arrays flattened in row-major order), counted in a scan
//! ([`Leaves`]), converted into a buffer of its datatype in a decoding read ([`Typed`]),
//! sized from the shape, without a `serde_json::Value` in between.

use std::fmt;

use half::{bf16, f16};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::engine::IoData;

/// What a scan counts of a tensor's elements.
#[derive(Default)]
pub(in crate::oip) struct Leaves {
    pub(in crate::oip) count: u64,
    pub(in crate::oip) string_bytes: u64,
}

/// One element of a tensor's `data` as JSON has it.
#[derive(Clone, Copy)]
enum Leaf<'s> {
    U(u64),
    I(i64),
    F(f64),
    S(&'s str),
    B(bool),
    Null,
    Object,
}

impl fmt::Display for Leaf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Leaf::U(v) => write!(f, "{v}"),
            Leaf::I(v) => write!(f, "{v}"),
            Leaf::F(v) => match serde_json::Number::from_f64(*v) {
                Some(n) => write!(f, "{n}"),
                None => write!(f, "{v}"),
            },
            Leaf::S(s) => write!(f, "{}", serde_json::Value::from(*s)),
            Leaf::B(b) => write!(f, "{b}"),
            Leaf::Null => f.write_str("null"),
            Leaf::Object => f.write_str("an object"),
        }
    }
}

impl Leaf<'_> {
    /// A floating element: a number, or one of the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
    fn float(self) -> Option<f64> {
        match self {
            Leaf::U(v) => Some(v as f64),
            Leaf::I(v) => Some(v as f64),
            Leaf::F(v) => Some(v),
            Leaf::S("NaN") => Some(f64::NAN),
            Leaf::S("Infinity") => Some(f64::INFINITY),
            Leaf::S("-Infinity") => Some(f64::NEG_INFINITY),
            _ => None,
        }
    }

    fn as_i64(self) -> Option<i64> {
        match self {
            Leaf::U(v) => i64::try_from(v).ok(),
            Leaf::I(v) => Some(v),
            _ => None,
        }
    }

    fn as_u64(self) -> Option<u64> {
        match self {
            Leaf::U(v) => Some(v),
            Leaf::I(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
}

/// Walks a `data` value (nested arrays, flattened in row-major order), handing each
/// element to `leaf`.
trait Elements {
    fn leaf(&mut self, leaf: Leaf<'_>);
}

struct Walk<'e, E>(&'e mut E);

impl<'de, E: Elements> DeserializeSeed<'de> for Walk<'_, E> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, E: Elements> Visitor<'de> for Walk<'_, E> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("tensor data")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Walk(&mut *self.0))?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        self.0.leaf(Leaf::Object);
        Ok(())
    }
    fn visit_u64<Er: serde::de::Error>(self, v: u64) -> Result<(), Er> {
        self.0.leaf(Leaf::U(v));
        Ok(())
    }
    fn visit_i64<Er: serde::de::Error>(self, v: i64) -> Result<(), Er> {
        self.0.leaf(Leaf::I(v));
        Ok(())
    }
    fn visit_f64<Er: serde::de::Error>(self, v: f64) -> Result<(), Er> {
        self.0.leaf(Leaf::F(v));
        Ok(())
    }
    fn visit_str<Er: serde::de::Error>(self, v: &str) -> Result<(), Er> {
        self.0.leaf(Leaf::S(v));
        Ok(())
    }
    fn visit_bool<Er: serde::de::Error>(self, v: bool) -> Result<(), Er> {
        self.0.leaf(Leaf::B(v));
        Ok(())
    }
    fn visit_unit<Er: serde::de::Error>(self) -> Result<(), Er> {
        self.0.leaf(Leaf::Null);
        Ok(())
    }
}

/// The scan's count of a tensor's elements.
pub(super) struct Count(pub(super) Leaves);

impl Elements for Leaves {
    fn leaf(&mut self, leaf: Leaf<'_>) {
        self.count += 1;
        if let Leaf::S(s) = leaf {
            self.string_bytes += s.len() as u64;
        }
    }
}

impl<'de> DeserializeSeed<'de> for Count {
    type Value = Leaves;
    fn deserialize<D: Deserializer<'de>>(mut self, d: D) -> Result<Leaves, D::Error> {
        Walk(&mut self.0).deserialize(d)?;
        Ok(self.0)
    }
}

/// A decoding read of a tensor's elements into a buffer of its datatype.
pub(super) struct Typed<'p> {
    pub(super) datatype: &'p str,
    pub(super) expected: u64,
}

/// Elements converted into `out` by `convert`; the first that does not convert is
/// remembered, and no more are kept after it.
struct Buffer<T> {
    out: Vec<T>,
    /// Elements it keeps at most (the scan's count).
    limit: usize,
    kind: &'static str,
    convert: fn(Leaf<'_>) -> Option<T>,
    seen: u64,
    refused: Option<String>,
}

impl<T> Elements for Buffer<T> {
    fn leaf(&mut self, leaf: Leaf<'_>) {
        let index = self.seen;
        self.seen += 1;
        if self.refused.is_some() || self.out.len() == self.limit {
            return;
        }
        match (self.convert)(leaf) {
            Some(v) => self.out.push(v),
            None => self.refused = Some(format!("element {index} ({leaf}) is not a valid {}", self.kind)),
        }
    }
}

fn buffer<'de, D: Deserializer<'de>, T>(
    d: D,
    expected: u64,
    kind: &'static str,
    convert: fn(Leaf<'_>) -> Option<T>,
) -> Result<Result<Vec<T>, String>, D::Error> {
    // The scan counted exactly `expected` elements: the buffer never grows.
    let capacity =
        usize::try_from(expected).map_err(|_| <D::Error as serde::de::Error>::custom("the tensor is too large"))?;
    let mut b = Buffer { out: Vec::with_capacity(capacity), limit: capacity, kind, convert, seen: 0, refused: None };
    Walk(&mut b).deserialize(d)?;
    Ok(match b.refused {
        Some(why) => Err(why),
        None => Ok(b.out),
    })
}

/// A finite number that rounds to infinity is out of the datatype's range.
fn fp32(leaf: Leaf<'_>) -> Option<f32> {
    let x = leaf.float()?;
    let y = x as f32;
    (y.is_finite() || !x.is_finite()).then_some(y)
}

fn fp16(leaf: Leaf<'_>) -> Option<u16> {
    let x = leaf.float()?;
    let y = f16::from_f64(x);
    (y.is_finite() || !x.is_finite()).then_some(y.to_bits())
}

fn bf16_bits(leaf: Leaf<'_>) -> Option<u16> {
    let x = leaf.float()?;
    let y = bf16::from_f64(x);
    (y.is_finite() || !x.is_finite()).then_some(y.to_bits())
}

impl<'de> DeserializeSeed<'de> for Typed<'_> {
    type Value = Result<IoData, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let n = self.expected;
        Ok(match self.datatype {
            "FP32" => buffer(d, n, "FP32", fp32)?.map(IoData::F32),
            "FP16" => buffer(d, n, "FP16", fp16)?.map(IoData::F16),
            "BF16" => buffer(d, n, "BF16", bf16_bits)?.map(IoData::Bf16),
            "INT32" => buffer(d, n, "INT32", |l| l.as_i64().and_then(|x| i32::try_from(x).ok()))?.map(IoData::I32),
            "INT64" => buffer(d, n, "INT64", |l| l.as_i64())?.map(IoData::I64),
            "UINT8" => buffer(d, n, "UINT8", |l| l.as_u64().and_then(|x| u8::try_from(x).ok()))?.map(IoData::U8),
            "BYTES" => buffer(d, n, "BYTES string", |l| match l {
                Leaf::S(s) => Some(s.as_bytes().to_vec()),
                _ => None,
            })?
            .map(IoData::Bytes),
            other => return Err(<D::Error as serde::de::Error>::custom(format!("datatype {other:?} was checked"))),
        })
    }
}
