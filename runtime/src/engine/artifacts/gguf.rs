//! GGUF (version 3, also 2) files as artifacts: the header, the typed metadata and the
//! tensor index, read from the mapped bytes without copying tensor data.
//!
//! Everything is checked before it is trusted: the magic and version, every count and
//! length against the bytes that remain (so an absurd count fails at once instead of
//! allocating), value types, UTF-8 of strings, duplicate keys and tensor names, the
//! alignment (`general.alignment`, a power of two, default 32), each tensor's rank,
//! element count, block divisibility, offset alignment and its extent inside the data
//! section. A malformed file is a [`GgufError`], never a panic.
//!
//! The parse is bounded in host memory: arrays are packed (`gguf/value.rs`: a 1-byte element
//! takes a byte), and every part is charged against a cap before it is allocated
//! ([`Gguf::parse_bounded`]; over it, [`GgufError::TooLarge`]). The metadata's JSON for
//! the guest is written into a buffer that stops at the guest's read limit
//! ([`Gguf::metadata_json`]), never rendered whole first.
//!
//! Layout (little-endian): magic `GGUF`, u32 version, u64 tensor count, u64 metadata
//! count, the metadata (key string, u32 value type, value), the tensor infos (name,
//! u32 rank, u64 dims fastest-first, u32 ggml type, u64 offset into the data section),
//! padding to the alignment, the data section. Dims are fastest-first: a GGUF tensor
//! `[ne0, ne1]` is the row-major `[ne1, ne0]` the rest of sluice speaks.

use std::collections::BTreeMap;

mod value;

pub use value::{Array, Strings, Value};

/// The ggml element types sluice knows the block layout of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
}

impl GgmlType {
    /// The type of ggml's numeric code, or `None` for a code sluice does not know.
    pub fn from_code(code: u32) -> Option<GgmlType> {
        use GgmlType::*;
        Some(match code {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            30 => BF16,
            _ => return None,
        })
    }

    /// Elements per block (1 for plain types) and bytes per block.
    pub const fn block(self) -> (u64, u64) {
        use GgmlType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            F64 | I64 => (1, 8),
            I8 => (1, 1),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2K => (256, 84),
            Q3K => (256, 110),
            Q4K => (256, 144),
            Q5K => (256, 176),
            Q6K => (256, 210),
            Q8K => (256, 292),
        }
    }

    /// ggml's name of the type (`q4_1`, `f32`, ...).
    pub const fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "f32",
            F16 => "f16",
            BF16 => "bf16",
            F64 => "f64",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            Q4_0 => "q4_0",
            Q4_1 => "q4_1",
            Q5_0 => "q5_0",
            Q5_1 => "q5_1",
            Q8_0 => "q8_0",
            Q8_1 => "q8_1",
            Q2K => "q2_K",
            Q3K => "q3_K",
            Q4K => "q4_K",
            Q5K => "q5_K",
            Q6K => "q6_K",
            Q8K => "q8_K",
        }
    }
}

/// One entry of the tensor index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions as GGUF stores them, fastest-varying first.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the file (already checked to lie inside it).
    pub offset: u64,
    /// Bytes of the data.
    pub byte_len: u64,
}

impl TensorInfo {
    /// The row-major shape, outermost first (GGUF's dims reversed).
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// Why a GGUF file could not be read.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum GgufError {
    #[error("not a GGUF file (magic {0:02x?}, expected \"GGUF\")")]
    BadMagic([u8; 4]),
    #[error("GGUF version {0} is not supported (2 and 3 are)")]
    UnsupportedVersion(u32),
    #[error("the file ends at byte {len} while reading {what} at byte {at}")]
    Truncated { what: String, at: u64, len: u64 },
    #[error("{what} count {count} is impossible for a file of {len} bytes")]
    AbsurdCount { what: String, count: u64, len: u64 },
    #[error("metadata value of key {key:?} has unknown type {code}")]
    BadValueType { key: String, code: u32 },
    #[error("metadata value of key {key:?} is a bool stored as {byte} (not 0 or 1)")]
    BadBool { key: String, byte: u8 },
    #[error("metadata arrays nest deeper than {MAX_DEPTH} levels (key {0:?})")]
    TooDeep(String),
    #[error("{0} is not valid UTF-8")]
    NotUtf8(String),
    #[error("duplicate {what} {name:?}")]
    Duplicate { what: &'static str, name: String },
    #[error("general.alignment {0} is not a power of two")]
    BadAlignment(u64),
    #[error("the parsed metadata and tensor index would take more than {limit} bytes of host memory (at {what})")]
    TooLarge { what: String, limit: usize },
    #[error("tensor {name:?}: {problem}")]
    BadTensor { name: String, problem: String },
}

/// The metadata's JSON would be longer than the limit.
#[derive(Debug, PartialEq, Eq)]
pub struct JsonTooLarge {
    pub limit: usize,
}

/// Deepest nesting of metadata arrays accepted.
pub const MAX_DEPTH: usize = 4;
/// Largest rank of a GGUF tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// The alignment of tensor data when the file does not set `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Default of the cap on the host memory one parse may take
/// ([`Gguf::parse_bounded`]): real models' metadata (a 128k-token vocabulary with its
/// merges) takes 10–20 MiB parsed.
pub const DEFAULT_MAX_PARSED_BYTES: usize = 64 << 20;

/// Heap charged per metadata entry besides its key and value: the map's entry, with
/// room for the B-tree's half-empty nodes.
const ENTRY_BYTES: usize = 2 * size_of::<(String, Value)>();
/// Heap charged per tensor besides its name and dims: its info and its place in the
/// name index.
const TENSOR_BYTES: usize = size_of::<TensorInfo>() + size_of::<usize>();

/// A parsed GGUF file: metadata and tensor index (the data stays in the caller's bytes).
#[derive(Clone, Debug)]
pub struct Gguf {
    pub version: u32,
    /// Metadata by key (sorted, for stable output).
    pub metadata: BTreeMap<String, Value>,
    /// Tensors in file order.
    pub tensors: Vec<TensorInfo>,
    /// Indices into `tensors`, sorted by name.
    by_name: Vec<usize>,
    /// Alignment of the data section and of every tensor in it.
    pub alignment: u64,
    /// Offset of the data section from the start of the file.
    pub data_offset: u64,
}

impl Gguf {
    /// Parses the header, metadata and tensor index of `bytes` (the whole file), with
    /// at most [`DEFAULT_MAX_PARSED_BYTES`] of host memory.
    pub fn parse(bytes: &[u8]) -> Result<Gguf, GgufError> {
        Self::parse_bounded(bytes, DEFAULT_MAX_PARSED_BYTES)
    }

    /// Parses like [`Gguf::parse`], refusing ([`GgufError::TooLarge`]) a file whose
    /// parsed metadata and tensor index would take more than `max_bytes` of host memory;
    /// each part is charged before it is allocated.
    pub fn parse_bounded(bytes: &[u8], max_bytes: usize) -> Result<Gguf, GgufError> {
        let mut r = Reader { bytes, at: 0, charged: 0, limit: max_bytes };
        let magic: [u8; 4] = r.take(4, "the magic")?.try_into().expect("4 bytes");
        if &magic != b"GGUF" {
            return Err(GgufError::BadMagic(magic));
        }
        let version = r.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = r.u64("the tensor count")?;
        let n_kv = r.u64("the metadata count")?;
        // Each metadata entry takes ≥ 12 bytes (key length, type, a 1-byte value is
        // still ≥ 1), each tensor info ≥ 24 (name length, rank, type, offset).
        r.check_count("metadata", n_kv, 13)?;
        r.check_count("tensor", n_tensors, 24)?;

        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = r.string("a metadata key")?;
            r.charge(ENTRY_BYTES + key.len(), &key)?;
            let code = r.u32("a metadata value type")?;
            let value = r.value(&key, code)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(GgufError::Duplicate { what: "metadata key", name: key });
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() => a,
                _ => return Err(GgufError::BadAlignment(v.as_u64().unwrap_or(0))),
            },
        };

        r.charge(n_tensors as usize * TENSOR_BYTES, "the tensor index")?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = r.string("a tensor name")?;
            let rank = r.u32("a tensor rank")?;
            if rank > MAX_DIMS {
                return Err(GgufError::BadTensor { name, problem: format!("rank {rank} exceeds {MAX_DIMS}") });
            }
            r.charge(rank as usize * size_of::<u64>(), &name)?;
            let mut dims = Vec::with_capacity(rank as usize);
            for _ in 0..rank {
                dims.push(r.u64("a tensor dimension")?);
            }
            let code = r.u32("a tensor type")?;
            let offset = r.u64("a tensor offset")?;
            let Some(ggml_type) = GgmlType::from_code(code) else {
                return Err(GgufError::BadTensor { name, problem: format!("unknown ggml type {code}") });
            };
            // The offset is relative to the data section until it is checked below.
            tensors.push(TensorInfo { name, dims, ggml_type, offset, byte_len: 0 });
        }
        let data_offset = r.at.div_ceil(alignment).saturating_mul(alignment);
        let len = bytes.len() as u64;
        if data_offset > len && n_tensors > 0 {
            return Err(GgufError::Truncated { what: "the data section".into(), at: data_offset, len });
        }
        let data_len = len.saturating_sub(data_offset);

        for info in &mut tensors {
            let bad = |problem: String| GgufError::BadTensor { name: info.name.clone(), problem };
            let dims = &info.dims;
            let numel = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
            let numel = numel.ok_or_else(|| bad(format!("dims {dims:?} overflow")))?;
            let (block, block_bytes) = info.ggml_type.block();
            let row = dims.first().copied().unwrap_or(1);
            if !row.is_multiple_of(block) {
                return Err(bad(format!(
                    "the first dimension {row} is not a multiple of the {} block size {block}",
                    info.ggml_type.name()
                )));
            }
            let byte_len =
                (numel / block).checked_mul(block_bytes).ok_or_else(|| bad(format!("dims {dims:?} overflow")))?;
            let offset = info.offset;
            if !offset.is_multiple_of(alignment) {
                return Err(bad(format!("offset {offset} is not a multiple of the alignment {alignment}")));
            }
            match offset.checked_add(byte_len) {
                Some(end) if end <= data_len => {}
                _ => {
                    return Err(bad(format!(
                        "data at {offset}..+{byte_len} lies past the end of the {data_len}-byte data section"
                    )));
                }
            }
            info.offset = data_offset + offset;
            info.byte_len = byte_len;
        }
        let mut by_name: Vec<usize> = (0..tensors.len()).collect();
        // Stable: of two tensors with one name, the later in the file is the duplicate.
        by_name.sort_by(|&a, &b| tensors[a].name.cmp(&tensors[b].name));
        if let Some(pair) = by_name.windows(2).find(|p| tensors[p[0]].name == tensors[p[1]].name) {
            return Err(GgufError::Duplicate { what: "tensor name", name: tensors[pair[1]].name.clone() });
        }
        Ok(Gguf { version, metadata, tensors, by_name, alignment, data_offset })
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        let i = self.by_name.binary_search_by(|&i| self.tensors[i].name.as_str().cmp(name)).ok()?;
        Some(&self.tensors[self.by_name[i]])
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// The data of `info` inside `bytes` (the file `self` was parsed from).
    pub fn data<'a>(&self, bytes: &'a [u8], info: &TensorInfo) -> &'a [u8] {
        &bytes[info.offset as usize..(info.offset + info.byte_len) as usize]
    }

    /// Host memory the parsed metadata and tensor index take: what the parser charged
    /// against its cap, measured from the parts (their capacities).
    pub fn heap_bytes(&self) -> usize {
        let metadata: usize = self.metadata.iter().map(|(k, v)| ENTRY_BYTES + k.capacity() + v.heap_bytes()).sum();
        let tensors: usize =
            self.tensors.iter().map(|t| TENSOR_BYTES + t.name.capacity() + t.dims.capacity() * size_of::<u64>()).sum();
        metadata + tensors
    }

    /// Every metadata entry as one JSON object, key → value, written straight into a
    /// buffer that refuses to grow past `limit` bytes (so a guest's call costs at most
    /// that, however much the metadata would expand).
    pub fn metadata_json(&self, limit: usize) -> Result<String, JsonTooLarge> {
        let mut out = Bounded { bytes: Vec::new(), limit };
        serde_json::to_writer(&mut out, &self.metadata).map_err(|_| JsonTooLarge { limit })?;
        Ok(String::from_utf8(out.bytes).expect("serde_json writes UTF-8"))
    }
}

/// Bytes of JSON rendered between chances to give the core away (on a background thread).
const GIVE_WAY_BYTES: usize = 64 << 10;

/// A byte buffer that fails a write taking it past `limit`.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        // Long renderings (megabytes for a batch guest) give the core away now and then.
        if (self.bytes.len() + buf.len()) / GIVE_WAY_BYTES != self.bytes.len() / GIVE_WAY_BYTES {
            crate::background::give_way_if_due();
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A bounds-checked little-endian cursor over the file, charging what it allocates.
struct Reader<'a> {
    bytes: &'a [u8],
    at: u64,
    /// Heap bytes charged so far, against `limit`.
    charged: usize,
    limit: usize,
}

impl<'a> Reader<'a> {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Counts `bytes` of heap about to be allocated for `what`; fails past the limit.
    fn charge(&mut self, bytes: usize, what: &str) -> Result<(), GgufError> {
        self.charged = self.charged.saturating_add(bytes);
        if self.charged > self.limit {
            return Err(GgufError::TooLarge { what: what.to_owned(), limit: self.limit });
        }
        Ok(())
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], GgufError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.len());
        let Some(end) = end else {
            return Err(GgufError::Truncated { what: what.to_owned(), at: self.at, len: self.len() });
        };
        let s = &self.bytes[self.at as usize..end as usize];
        self.at = end;
        Ok(s)
    }

    /// Fails when `count` items of at least `min_bytes` each cannot fit in what remains.
    fn check_count(&self, what: &str, count: u64, min_bytes: u64) -> Result<(), GgufError> {
        let remaining = self.len() - self.at;
        if count.checked_mul(min_bytes).is_none_or(|need| need > remaining) {
            return Err(GgufError::AbsurdCount { what: what.to_owned(), count, len: self.len() });
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        Ok(self.take(N as u64, what)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A length-prefixed UTF-8 string, borrowed from the file.
    fn str(&mut self, what: &str) -> Result<&'a str, GgufError> {
        let n = self.u64(what)?;
        let bytes = self.take(n, what)?;
        std::str::from_utf8(bytes).map_err(|_| GgufError::NotUtf8(format!("{what} at byte {}", self.at - n)))
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        Ok(self.str(what)?.to_owned())
    }

    /// A value of type `code` for metadata key `key`.
    fn value(&mut self, key: &str, code: u32) -> Result<Value, GgufError> {
        let what = key;
        Ok(match code {
            0 => Value::U8(u8::from_le_bytes(self.array(what)?)),
            1 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            2 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            4 => Value::U32(u32::from_le_bytes(self.array(what)?)),
            5 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            7 => Value::Bool(self.bools(key, 1)?[0]),
            8 => {
                let s = self.str(&format!("the value of {key:?}"))?;
                self.charge(s.len(), key)?;
                Value::String(s.to_owned())
            }
            9 => Value::Array(self.packed(key, 0)?),
            10 => Value::U64(u64::from_le_bytes(self.array(what)?)),
            11 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            _ => return Err(GgufError::BadValueType { key: key.to_owned(), code }),
        })
    }

    /// `n` booleans, each a byte of 0 or 1.
    fn bools(&mut self, key: &str, n: u64) -> Result<Vec<bool>, GgufError> {
        let raw = self.take(n, key)?;
        raw.iter()
            .map(|&byte| match byte {
                0 => Ok(false),
                1 => Ok(true),
                byte => Err(GgufError::BadBool { key: key.to_owned(), byte }),
            })
            .collect()
    }

    /// An array (element type, count, elements) for key `key`, nested `depth` arrays
    /// deep, packed into one vector of its element type.
    fn packed(&mut self, key: &str, depth: usize) -> Result<Array, GgufError> {
        if depth >= MAX_DEPTH {
            return Err(GgufError::TooDeep(key.to_owned()));
        }
        let elem = self.u32(key)?;
        let n = self.u64(key)?;
        let min = match elem {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 | 10..=12 => 8,
            9 => 12,
            _ => return Err(GgufError::BadValueType { key: key.to_owned(), code: elem }),
        };
        self.check_count(&format!("array {key:?} element"), n, min)?;
        // The count fits in the file, so it fits in memory's index type.
        let count = n as usize;
        macro_rules! numbers {
            ($t:ty, $variant:ident) => {{
                self.charge(count * size_of::<$t>(), key)?;
                let raw = self.take(n * size_of::<$t>() as u64, key)?;
                let elements = raw.chunks_exact(size_of::<$t>());
                Array::$variant(elements.map(|c| <$t>::from_le_bytes(c.try_into().expect("one element"))).collect())
            }};
        }
        Ok(match elem {
            0 => numbers!(u8, U8),
            1 => numbers!(i8, I8),
            2 => numbers!(u16, U16),
            3 => numbers!(i16, I16),
            4 => numbers!(u32, U32),
            5 => numbers!(i32, I32),
            6 => numbers!(f32, F32),
            10 => numbers!(u64, U64),
            11 => numbers!(i64, I64),
            12 => numbers!(f64, F64),
            7 => {
                self.charge(count, key)?;
                Array::Bool(self.bools(key, n)?)
            }
            8 => Array::String(self.strings(key, count)?),
            _ => {
                self.charge(count * size_of::<Array>(), key)?;
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(self.packed(key, depth + 1)?);
                }
                Array::Array(items)
            }
        })
    }

    /// `count` strings packed in one buffer: a first pass over their lengths sizes
    /// it (and charges it) exactly, a second copies them in.
    fn strings(&mut self, key: &str, count: usize) -> Result<Strings, GgufError> {
        let what = format!("the value of {key:?}");
        let start = self.at;
        let mut bytes = 0usize;
        for _ in 0..count {
            let n = self.u64(&what)?;
            self.take(n, &what)?;
            bytes += n as usize;
        }
        self.charge(bytes.saturating_add(count * size_of::<usize>()), key)?;
        self.at = start;
        let mut strings = Strings::with_capacity(count, bytes);
        for _ in 0..count {
            strings.push(self.str(&what)?);
        }
        Ok(strings)
    }
}

#[cfg(test)]
mod tests;
