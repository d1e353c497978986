//! GGUF metadata values, kept compact: a scalar as itself, an array as one packed
//! vector of its element type (numbers as a `Vec` of that type, strings as one buffer
//! with their end offsets), so a parsed array takes about the bytes it took in the
//! file instead of a full value per element. [`Value::heap_bytes`] says what a value
//! holds on the heap (the parser charges the same amounts against its cap before it
//! allocates them).
//!
//! Values serialize (serde) as JSON does them for the guest: numbers, booleans, strings
//! and arrays as themselves, a float widened to f64, a non-finite float as `null`.

use serde::ser::{Serialize, Serializer};

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    /// Elements of one type, packed.
    Array(Array),
}

/// A metadata array: its elements packed in one vector of their type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Strings),
    /// An array of arrays (each of its own element type).
    Array(Vec<Array>),
}

/// Strings packed in one buffer, with where each ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Strings {
    text: String,
    ends: Vec<usize>,
}

impl Strings {
    /// Room for `count` strings of `bytes` bytes in all (allocated exactly once).
    pub(super) fn with_capacity(count: usize, bytes: usize) -> Strings {
        Strings { text: String::with_capacity(bytes), ends: Vec::with_capacity(count) }
    }

    pub(super) fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.ends.push(self.text.len());
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th string.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    /// The strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i).expect("in range"))
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * size_of::<usize>()
    }
}

impl Value {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a float or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The value as a string slice, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The array, if it is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Bytes the value holds on the heap (none for a scalar).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Value::String(s) => s.capacity(),
            Value::Array(a) => a.heap_bytes(),
            _ => 0,
        }
    }
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The strings, if it is an array of strings.
    pub fn strings(&self) -> Option<&Strings> {
        match self {
            Array::String(s) => Some(s),
            _ => None,
        }
    }

    /// Bytes held on the heap, nested arrays included.
    pub fn heap_bytes(&self) -> usize {
        fn vec<T>(v: &Vec<T>) -> usize {
            v.capacity() * size_of::<T>()
        }
        match self {
            Array::U8(v) => vec(v),
            Array::I8(v) => vec(v),
            Array::U16(v) => vec(v),
            Array::I16(v) => vec(v),
            Array::U32(v) => vec(v),
            Array::I32(v) => vec(v),
            Array::U64(v) => vec(v),
            Array::I64(v) => vec(v),
            Array::F32(v) => vec(v),
            Array::F64(v) => vec(v),
            Array::Bool(v) => vec(v),
            Array::String(s) => s.heap_bytes(),
            Array::Array(v) => vec(v) + v.iter().map(Array::heap_bytes).sum::<usize>(),
        }
    }
}

/// A float as JSON has it: widened to f64, `null` when not finite.
fn float<S: Serializer>(v: f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() { s.serialize_f64(v) } else { s.serialize_unit() }
}

/// Serializes one float of an array (see [`float`]).
struct Float(f64);

impl Serialize for Float {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        float(self.0, s)
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::U8(v) => s.serialize_u8(*v),
            Value::I8(v) => s.serialize_i8(*v),
            Value::U16(v) => s.serialize_u16(*v),
            Value::I16(v) => s.serialize_i16(*v),
            Value::U32(v) => s.serialize_u32(*v),
            Value::I32(v) => s.serialize_i32(*v),
            Value::U64(v) => s.serialize_u64(*v),
            Value::I64(v) => s.serialize_i64(*v),
            Value::F32(v) => float(f64::from(*v), s),
            Value::F64(v) => float(*v, s),
            Value::Bool(v) => s.serialize_bool(*v),
            Value::String(v) => s.serialize_str(v),
            Value::Array(a) => a.serialize(s),
        }
    }
}

impl Serialize for Array {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Array::U8(v) => s.collect_seq(v),
            Array::I8(v) => s.collect_seq(v),
            Array::U16(v) => s.collect_seq(v),
            Array::I16(v) => s.collect_seq(v),
            Array::U32(v) => s.collect_seq(v),
            Array::I32(v) => s.collect_seq(v),
            Array::U64(v) => s.collect_seq(v),
            Array::I64(v) => s.collect_seq(v),
            Array::F32(v) => s.collect_seq(v.iter().map(|&x| Float(f64::from(x)))),
            Array::F64(v) => s.collect_seq(v.iter().map(|&x| Float(x))),
            Array::Bool(v) => s.collect_seq(v),
            Array::String(v) => s.collect_seq(v.iter()),
            Array::Array(v) => s.collect_seq(v),
        }
    }
}
