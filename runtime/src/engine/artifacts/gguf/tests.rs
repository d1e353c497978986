//! The GGUF reader on hand-built files: a valid one read back exactly, and each kind
//! of malformed file refused with its typed error (never a panic), including every
//! truncation of a valid file.

use super::*;

/// Builds GGUF files byte by byte.
#[derive(Default)]
struct Builder {
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    data: Vec<u8>,
    alignment: u64,
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl Builder {
    fn new() -> Self {
        Builder { alignment: 32, ..Default::default() }
    }

    /// A raw metadata entry: key, type code, value bytes.
    fn kv_raw(mut self, key: &str, code: u32, value: &[u8]) -> Self {
        string(&mut self.kv, key);
        self.kv.extend(code.to_le_bytes());
        self.kv.extend(value);
        self.n_kv += 1;
        self
    }

    fn kv_u32(self, key: &str, v: u32) -> Self {
        self.kv_raw(key, 4, &v.to_le_bytes())
    }

    fn kv_str(self, key: &str, v: &str) -> Self {
        let mut b = Vec::new();
        string(&mut b, v);
        self.kv_raw(key, 8, &b)
    }

    fn kv_strs(self, key: &str, vs: &[&str]) -> Self {
        let mut b = Vec::new();
        b.extend(8u32.to_le_bytes());
        b.extend((vs.len() as u64).to_le_bytes());
        for v in vs {
            string(&mut b, v);
        }
        self.kv_raw(key, 9, &b)
    }

    /// A tensor with explicit offset (relative to the data section).
    fn tensor_at(mut self, name: &str, dims: &[u64], code: u32, offset: u64) -> Self {
        string(&mut self.infos, name);
        self.infos.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            self.infos.extend(d.to_le_bytes());
        }
        self.infos.extend(code.to_le_bytes());
        self.infos.extend(offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }

    /// A tensor whose data `bytes` is appended (aligned) to the data section.
    fn tensor(mut self, name: &str, dims: &[u64], code: u32, bytes: &[u8]) -> Self {
        let offset = (self.data.len() as u64).div_ceil(self.alignment) * self.alignment;
        self.data.resize(offset as usize, 0);
        self.data.extend(bytes);
        self.tensor_at(name, dims, code, offset)
    }

    fn build(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(self.n_tensors.to_le_bytes());
        out.extend(self.n_kv.to_le_bytes());
        out.extend(&self.kv);
        out.extend(&self.infos);
        let pad = (out.len() as u64).div_ceil(self.alignment) * self.alignment;
        out.resize(pad as usize, 0);
        out.extend(&self.data);
        out
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn valid() -> Builder {
    Builder::new()
        .kv_str("general.architecture", "llama")
        .kv_u32("llama.block_count", 2)
        .kv_raw("llama.rope.freq_base", 6, &100000f32.to_le_bytes())
        .kv_raw("flag", 7, &[1])
        .kv_strs("tokenizer.ggml.tokens", &["a", "b", "ab"])
        .tensor("w", &[3, 2], 0, &f32_bytes(&[1., 2., 3., 4., 5., 6.]))
        .tensor("q", &[32, 2], 3, &[7u8; 40])
}

#[test]
fn a_valid_file_is_read_back() {
    let bytes = valid().build();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!((g.version, g.alignment, g.tensors.len(), g.metadata.len()), (3, 32, 2, 5));
    assert_eq!(g.get("general.architecture").and_then(Value::as_str), Some("llama"));
    assert_eq!(g.get("llama.block_count").and_then(Value::as_u64), Some(2));
    assert_eq!(g.get("llama.rope.freq_base").and_then(Value::as_f64), Some(100000.0));
    assert_eq!(g.get("flag"), Some(&Value::Bool(true)));
    let tokens = g.get("tokenizer.ggml.tokens").and_then(Value::as_array).and_then(Array::strings).unwrap();
    assert_eq!(tokens.iter().collect::<Vec<_>>(), ["a", "b", "ab"]);
    assert_eq!((tokens.get(2), tokens.get(3)), (Some("ab"), None));
    let w = g.tensor("w").unwrap();
    assert_eq!((w.shape(), w.ggml_type, w.byte_len), (vec![2, 3], GgmlType::F32, 24));
    assert_eq!(g.data(&bytes, w), f32_bytes(&[1., 2., 3., 4., 5., 6.]));
    let q = g.tensor("q").unwrap();
    assert_eq!((q.shape(), q.ggml_type, q.byte_len, q.numel()), (vec![2, 32], GgmlType::Q4_1, 40, 64));
    assert_eq!(q.offset % 32, 0);
    assert_eq!(g.data(&bytes, q), [7u8; 40]);
    let json: serde_json::Value = serde_json::from_str(&g.metadata_json(1 << 20).unwrap()).unwrap();
    assert_eq!(json["tokenizer.ggml.tokens"], serde_json::json!(["a", "b", "ab"]));
    assert_eq!(json["llama.rope.freq_base"], serde_json::json!(100000.0));
    assert_eq!(json["flag"], serde_json::json!(true));
}

#[test]
fn a_custom_alignment_is_honoured_and_checked() {
    let mut b = Builder::new().kv_u32("general.alignment", 64);
    b.alignment = 64;
    let bytes = b.tensor("a", &[4], 0, &[0; 16]).tensor("b", &[4], 0, &[0; 16]).build();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!((g.alignment, g.data_offset % 64, g.tensor("b").unwrap().offset % 64), (64, 0, 0));
    let bytes = Builder::new().kv_u32("general.alignment", 48).build();
    assert_eq!(Gguf::parse(&bytes).unwrap_err(), GgufError::BadAlignment(48));
    let bytes = Builder::new().kv_str("general.alignment", "x").build();
    assert_eq!(Gguf::parse(&bytes).unwrap_err(), GgufError::BadAlignment(0));
}

#[test]
fn every_truncation_is_a_typed_error() {
    let bytes = valid().build();
    for len in 0..bytes.len() {
        match Gguf::parse(&bytes[..len]) {
            Err(GgufError::Truncated { .. } | GgufError::AbsurdCount { .. } | GgufError::BadTensor { .. }) => {}
            other => panic!("cut at {len} of {}: {other:?}", bytes.len()),
        }
    }
}

#[test]
fn bad_headers_are_refused() {
    let mut bytes = valid().build();
    bytes[0] = b'X';
    assert!(matches!(Gguf::parse(&bytes), Err(GgufError::BadMagic(_))));
    let mut bytes = valid().build();
    bytes[4..8].copy_from_slice(&7u32.to_le_bytes());
    assert_eq!(Gguf::parse(&bytes).unwrap_err(), GgufError::UnsupportedVersion(7));
    // Absurd tensor and metadata counts fail before anything is allocated.
    for field in [8..16, 16..24] {
        let mut bytes = valid().build();
        bytes[field].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(Gguf::parse(&bytes), Err(GgufError::AbsurdCount { .. })), "{:?}", Gguf::parse(&bytes));
    }
}

#[test]
fn bad_metadata_is_refused() {
    let parse = |b: Builder| Gguf::parse(&b.build()).unwrap_err();
    assert!(matches!(parse(Builder::new().kv_raw("k", 13, &[])), GgufError::BadValueType { code: 13, .. }));
    assert!(matches!(parse(Builder::new().kv_raw("k", 7, &[2])), GgufError::BadBool { byte: 2, .. }));
    // An array claiming 2^60 strings.
    let mut arr = 8u32.to_le_bytes().to_vec();
    arr.extend((1u64 << 60).to_le_bytes());
    assert!(matches!(parse(Builder::new().kv_raw("k", 9, &arr)), GgufError::AbsurdCount { .. }));
    // An array of an unknown element type.
    let mut arr = 99u32.to_le_bytes().to_vec();
    arr.extend(1u64.to_le_bytes());
    assert!(matches!(parse(Builder::new().kv_raw("k", 9, &arr)), GgufError::BadValueType { code: 99, .. }));
    // Arrays nested past the limit.
    let mut nested = Vec::new();
    for _ in 0..=MAX_DEPTH {
        nested.extend(9u32.to_le_bytes());
        nested.extend(1u64.to_le_bytes());
    }
    nested.extend(0u32.to_le_bytes());
    nested.extend(0u64.to_le_bytes());
    assert!(matches!(parse(Builder::new().kv_raw("k", 9, &nested)), GgufError::TooDeep(_)));
    // A string that is not UTF-8, a string longer than the file.
    let mut s = 2u64.to_le_bytes().to_vec();
    s.extend([0xff, 0xfe]);
    assert!(matches!(parse(Builder::new().kv_raw("k", 8, &s)), GgufError::NotUtf8(_)));
    let long = u64::MAX.to_le_bytes();
    assert!(matches!(parse(Builder::new().kv_raw("k", 8, &long)), GgufError::Truncated { .. }));
    let dup = Builder::new().kv_u32("k", 1).kv_u32("k", 2);
    assert_eq!(parse(dup), GgufError::Duplicate { what: "metadata key", name: "k".into() });
}

#[test]
fn bad_tensor_infos_are_refused() {
    let bad = |b: Builder| match Gguf::parse(&b.build()) {
        Err(GgufError::BadTensor { problem, .. }) => problem,
        other => panic!("{other:?}"),
    };
    let base = || Builder::new().tensor("ok", &[8], 0, &[0; 32]);
    assert!(bad(base().tensor_at("t", &[1, 1, 1, 1, 1], 0, 0)).contains("rank 5"));
    assert!(bad(base().tensor_at("t", &[8], 77, 0)).contains("unknown ggml type 77"));
    assert!(bad(base().tensor_at("t", &[u64::MAX, 2], 0, 0)).contains("overflow"));
    assert!(bad(base().tensor_at("t", &[31], 3, 0)).contains("block size 32"));
    assert!(bad(base().tensor_at("t", &[8], 0, 4)).contains("alignment"));
    assert!(bad(base().tensor_at("t", &[16], 0, 0)).contains("past the end"));
    assert!(bad(base().tensor_at("t", &[1], 0, u64::MAX - 31)).contains("past the end"));
    let dup = base().tensor_at("ok", &[8], 0, 0);
    assert_eq!(Gguf::parse(&dup.build()).unwrap_err(), GgufError::Duplicate { what: "tensor name", name: "ok".into() });
}

/// A metadata entry holding `n` u8 elements (all 7).
fn u8_array(n: usize) -> Vec<u8> {
    let mut arr = 0u32.to_le_bytes().to_vec();
    arr.extend((n as u64).to_le_bytes());
    arr.resize(arr.len() + n, 7);
    arr
}

#[test]
fn a_large_u8_array_takes_about_its_own_bytes_once_parsed() {
    let n = 8 << 20;
    let bytes = Builder::new().kv_raw("blob", 9, &u8_array(n)).kv_strs("tokens", &["a", "bc"]).build();
    let g = Gguf::parse(&bytes).unwrap();
    let heap = g.heap_bytes();
    assert!(heap <= n * 3 / 2, "an array of {n} bytes parsed into {heap} bytes ({}x)", heap / n);
    let json: serde_json::Value = serde_json::from_str(&g.metadata_json(64 << 20).unwrap()).unwrap();
    assert_eq!((json["blob"].as_array().map(Vec::len), json["blob"][n - 1].as_u64()), (Some(n), Some(7)));
    assert_eq!(json["tokens"], serde_json::json!(["a", "bc"]));
}

#[test]
fn metadata_over_the_cap_is_refused_before_it_is_allocated() {
    let bytes = Builder::new().kv_raw("blob", 9, &u8_array(1 << 20)).build();
    match Gguf::parse_bounded(&bytes, 512 << 10) {
        Err(GgufError::TooLarge { limit, .. }) => assert_eq!(limit, 512 << 10),
        other => panic!("a 1 MiB array under a 512 KiB cap: {:?}", other.map(|g| g.heap_bytes())),
    }
    assert!(Gguf::parse_bounded(&bytes, 2 << 20).is_ok());
    // Many small strings are counted too (each has its offset).
    let many: Vec<String> = (0..20_000).map(|i| i.to_string()).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let bytes = Builder::new().kv_strs("tokens", &many).build();
    assert!(matches!(Gguf::parse_bounded(&bytes, 64 << 10), Err(GgufError::TooLarge { .. })));
    assert!(Gguf::parse_bounded(&bytes, 1 << 20).is_ok());
}

#[test]
fn the_json_for_the_guest_stops_at_its_limit() {
    let bytes = Builder::new().kv_raw("blob", 9, &u8_array(1 << 20)).build();
    let g = Gguf::parse(&bytes).unwrap();
    // 1 Mi elements are ~2 MiB of JSON: refused at the limit, not rendered first.
    assert_eq!(g.metadata_json(1000), Err(JsonTooLarge { limit: 1000 }));
    assert!(g.metadata_json(4 << 20).is_ok());
}
