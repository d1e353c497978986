//! Artifacts of one function version on one device, and its shared weights.
//!
//! Artifact files are memory-mapped, not read into the heap: blobs are immutable
//! (content-addressed, written once), so the map is safe to share, and the pages
//! belong to the OS page cache. Raw artifacts (vocabularies, configs) are copied to
//! the guest on demand. Tensors of safetensors and GGUF artifacts ([`gguf`]; the
//! format is told by the file's magic) are loaded on first use,
//! uploaded once (cast to the asked dtype on the device) and shared read-only by every
//! invocation of the version: later `load-tensor` calls get a handle to the same
//! device tensor. The weights are charged once to the account given at creation
//! (the tenant's). A device that was lost and reset since they were loaded
//! ([`DeviceQueue::resets`]) no longer holds them: they are loaded again. The metadata
//! of a GGUF artifact (its tokenizer, chat template, hyper-parameters) reaches the
//! guest as JSON ([`ArtifactSet::metadata`]), at most the guest's read limit of it.
//!
//! A GGUF artifact's metadata and tensor index are parsed once per blob and shared
//! ([`shared`]) by every set, version and invocation that names it; the parse may take
//! at most the set's cap of host memory ([`ArtifactSet::bounded`]), over which the
//! guest gets a `too-large` error.

pub mod gguf;
mod shared;

pub use shared::parsed_bytes as parsed_metadata_bytes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use sluice_host_api::{ApiError, DType, ErrorCode, Op, TensorMeta, infer};

use crate::scheduler::{DeviceQueue, InvocationId, MemoryAccount, TensorLease};

type WeightKey = (String, String, Option<DType>);

/// Counters of an artifact set, for introspection.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ArtifactStats {
    /// Distinct weight tensors uploaded to the device.
    pub weight_tensors_loaded: u64,
    /// Bytes of those tensors.
    pub weight_bytes: u64,
    /// `load-tensor` calls answered from the shared copy.
    pub weight_cache_hits: u64,
    /// GGUF artifacts this set parsed itself (not found already parsed).
    pub metadata_parses: u64,
    /// `metadata` calls this set rendered as JSON (a refusal for length is remembered
    /// per blob, and not rendered again).
    pub metadata_renders: u64,
    /// Host memory the parsed GGUF metadata and tensor indexes of its artifacts take
    /// (shared with other sets naming the same blobs).
    pub metadata_bytes: u64,
}

/// Default cap on the GGUF metadata JSON one guest call may read. Each call renders its
/// own copy in host memory and then in the guest's: a 128k-token vocabulary with its
/// merges (Llama 3) is about 6 MiB of it, and the soak's GGUF bomb 32 MiB, which at
/// eight calls in flight rendered 256 MiB at once and kept both cores busy copying.
pub const DEFAULT_MAX_METADATA_JSON_BYTES: usize = 16 << 20;

/// The named artifacts of one function version, bound to one device.
pub struct ArtifactSet {
    files: HashMap<String, PathBuf>,
    account: Arc<MemoryAccount>,
    maps: Mutex<HashMap<String, Arc<memmap2::Mmap>>>,
    /// The shared parse of each GGUF artifact asked for, and the cap of one parse.
    ggufs: Mutex<HashMap<String, Arc<shared::Slot>>>,
    max_metadata_bytes: usize,
    /// Most bytes of metadata JSON one guest call may read (each call renders its own).
    max_metadata_json_bytes: usize,
    weights: Mutex<HashMap<WeightKey, (Arc<TensorLease>, TensorMeta)>>,
    /// The device's resets when the weights were loaded.
    weights_resets: AtomicU64,
    loaded: AtomicU64,
    loaded_bytes: AtomicU64,
    hits: AtomicU64,
    parses: AtomicU64,
    renders: AtomicU64,
}

impl ArtifactSet {
    /// Artifacts by name → file path; weights are charged to `account`; a GGUF parse
    /// may take [`gguf::DEFAULT_MAX_PARSED_BYTES`].
    pub fn new(files: HashMap<String, PathBuf>, account: Arc<MemoryAccount>) -> Arc<Self> {
        Self::bounded(files, account, gguf::DEFAULT_MAX_PARSED_BYTES, DEFAULT_MAX_METADATA_JSON_BYTES)
    }

    /// Like [`ArtifactSet::new`], with at most `max_metadata_bytes` of host memory for
    /// each GGUF artifact's parsed metadata and tensor index, and at most
    /// `max_metadata_json_bytes` of its metadata as JSON for one guest call.
    pub fn bounded(
        files: HashMap<String, PathBuf>,
        account: Arc<MemoryAccount>,
        max_metadata_bytes: usize,
        max_metadata_json_bytes: usize,
    ) -> Arc<Self> {
        Arc::new(ArtifactSet {
            files,
            account,
            maps: Mutex::new(HashMap::new()),
            ggufs: Mutex::new(HashMap::new()),
            max_metadata_bytes,
            max_metadata_json_bytes,
            weights: Mutex::new(HashMap::new()),
            weights_resets: AtomicU64::new(0),
            loaded: AtomicU64::new(0),
            loaded_bytes: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            parses: AtomicU64::new(0),
            renders: AtomicU64::new(0),
        })
    }

    /// An empty set.
    pub fn empty() -> Arc<Self> {
        Self::new(HashMap::new(), MemoryAccount::new("weights", None, None))
    }

    /// Counters for introspection.
    pub fn stats(&self) -> ArtifactStats {
        ArtifactStats {
            weight_tensors_loaded: self.loaded.load(Ordering::Relaxed),
            weight_bytes: self.loaded_bytes.load(Ordering::Relaxed),
            weight_cache_hits: self.hits.load(Ordering::Relaxed),
            metadata_parses: self.parses.load(Ordering::Relaxed),
            metadata_renders: self.renders.load(Ordering::Relaxed),
            metadata_bytes: self.ggufs.lock().values().map(|s| s.heap_bytes() as u64).sum(),
        }
    }

    /// Names of the artifacts.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    fn bytes(&self, artifact: &str) -> Result<Arc<memmap2::Mmap>, ApiError> {
        if let Some(b) = self.maps.lock().get(artifact) {
            return Ok(b.clone());
        }
        let path = self.files.get(artifact).ok_or_else(|| {
            let mut names: Vec<&str> = self.names().collect();
            names.sort();
            ApiError::new(ErrorCode::NotFound, format!("no artifact named {artifact:?} (this function has: {names:?})"))
        })?;
        let failed =
            |e: std::io::Error| ApiError::new(ErrorCode::DeviceFailure, format!("reading artifact {artifact:?}: {e}"));
        let file = std::fs::File::open(path).map_err(failed)?;
        // SAFETY: artifact files are content-addressed blobs, written once (temporary
        // file, fsync, rename) and never modified or truncated while referenced, so
        // the mapped bytes cannot change under us.
        let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.map_err(failed)?);
        self.maps.lock().insert(artifact.to_owned(), map.clone());
        Ok(map)
    }

    /// The raw bytes of an artifact, up to `limit` bytes.
    pub fn read(&self, artifact: &str, limit: usize) -> Result<Vec<u8>, ApiError> {
        let path = self.files.get(artifact);
        if let Some(size) = path.and_then(|p| std::fs::metadata(p).ok()).map(|m| m.len())
            && size > limit as u64
        {
            return Err(ApiError::new(
                ErrorCode::TooLarge,
                format!(
                    "artifact {artifact:?} has {size} bytes, more than the {limit} a guest may read; load its tensors instead"
                ),
            ));
        }
        Ok(self.bytes(artifact)?.to_vec())
    }

    /// The shared device tensor `name` of safetensors artifact `artifact`,
    /// converted to `as_dtype` if given; loaded on first use.
    pub fn load_tensor(
        &self,
        queue: &DeviceQueue,
        artifact: &str,
        name: &str,
        as_dtype: Option<DType>,
    ) -> Result<(Arc<TensorLease>, TensorMeta), ApiError> {
        let key = (artifact.to_owned(), name.to_owned(), as_dtype);
        // Holding the lock while loading makes concurrent first loads wait for one copy.
        let mut weights = self.weights.lock();
        // Read before anything is queued: a reset after this fails what is queued
        // now, and the next load sees the count changed.
        let resets = queue.resets();
        if self.weights_resets.swap(resets, Ordering::Relaxed) != resets {
            // The device was reset: the copies on it are gone.
            weights.clear();
        }
        if let Some((a, m)) = weights.get(&key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok((a.clone(), m.clone()));
        }
        let bytes = self.bytes(artifact)?;
        let (stored, shape, data) = if is_gguf(&bytes) {
            let file = self.gguf(artifact, &bytes)?;
            let info = file.tensor(name).ok_or_else(|| {
                ApiError::new(ErrorCode::NotFound, format!("artifact {artifact:?} has no tensor named {name:?}"))
            })?;
            let stored = gguf_dtype(info.ggml_type).ok_or_else(|| {
                ApiError::dtype(format!(
                    "tensor {name:?} has ggml type {}, which sluice cannot load",
                    info.ggml_type.name()
                ))
            })?;
            let shape = gguf_shape(name, info)?;
            (stored, shape, file.data(&bytes, info))
        } else {
            safetensors_tensor(&bytes, artifact, name)?
        };
        let mut meta = TensorMeta::new(stored, shape)?;
        let lease = match as_dtype {
            Some(to) if to != stored => {
                // Cast on the device, as the runtime's own work: upload the stored
                // elements, cast them into the shared tensor, free the upload.
                let out = infer(&Op::Cast(to), &[&meta])?;
                let lease = Arc::new(TensorLease::reserve(queue, &self.account, &out)?);
                let source = queue.new_tensor_id();
                queue.upload(InvocationId::SYSTEM, source, meta.clone(), data.to_vec());
                queue.launch(InvocationId::SYSTEM, lease.id(), Op::Cast(to), vec![(source, meta)], out.clone());
                queue.free(source);
                meta = out;
                lease
            }
            _ => {
                let lease = Arc::new(TensorLease::reserve(queue, &self.account, &meta)?);
                // Shared weights are the runtime's own work: never cancelled with an invocation.
                queue.upload(InvocationId::SYSTEM, lease.id(), meta.clone(), data.to_vec());
                lease
            }
        };
        self.loaded.fetch_add(1, Ordering::Relaxed);
        self.loaded_bytes.fetch_add(meta.byte_len() as u64, Ordering::Relaxed);
        weights.insert(key, (lease.clone(), meta.clone()));
        Ok((lease, meta))
    }

    /// The metadata of GGUF artifact `artifact` as one JSON object (key → value;
    /// arrays as arrays, non-finite floats as `null`), at most `limit` bytes of it and
    /// at most the set's cap for one call.
    pub fn metadata(&self, artifact: &str, limit: usize) -> Result<String, ApiError> {
        let limit = limit.min(self.max_metadata_json_bytes);
        let bytes = self.bytes(artifact)?;
        if !is_gguf(&bytes) {
            return Err(ApiError::arg(format!("artifact {artifact:?} is not a GGUF file, so it has no metadata")));
        }
        let slot = self.slot(artifact)?;
        let file = self.parse(artifact, &bytes, &slot)?;
        let (json, rendered) = slot.metadata_json(&file, limit);
        if rendered {
            self.renders.fetch_add(1, Ordering::Relaxed);
        }
        json.ok_or_else(|| {
            ApiError::new(
                ErrorCode::TooLarge,
                format!(
                    "the metadata of {artifact:?} is more than the {limit} bytes of JSON a guest call may read \
                     (the server's --max-metadata-json-bytes, or the function's artifact read limit)"
                ),
            )
        })
    }

    /// The parsed index of GGUF artifact `artifact` (whose bytes are `bytes`): parsed
    /// once per blob, by the first caller, shared with every later and concurrent one.
    fn gguf(&self, artifact: &str, bytes: &[u8]) -> Result<Arc<gguf::Gguf>, ApiError> {
        let slot = self.slot(artifact)?;
        self.parse(artifact, bytes, &slot)
    }

    /// The shared slot of GGUF artifact `artifact`.
    fn slot(&self, artifact: &str) -> Result<Arc<shared::Slot>, ApiError> {
        let mut ggufs = self.ggufs.lock();
        if let Some(slot) = ggufs.get(artifact) {
            return Ok(slot.clone());
        }
        let path = self
            .files
            .get(artifact)
            .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no artifact named {artifact:?}")))?;
        let slot = shared::slot(path, self.max_metadata_bytes);
        ggufs.insert(artifact.to_owned(), slot.clone());
        Ok(slot)
    }

    /// The parse in `slot` of `artifact` (whose bytes are `bytes`), done here if it is the first.
    fn parse(&self, artifact: &str, bytes: &[u8], slot: &shared::Slot) -> Result<Arc<gguf::Gguf>, ApiError> {
        let (parsed, parsed_here) = slot.get_or_parse(bytes, self.max_metadata_bytes);
        if parsed_here {
            self.parses.fetch_add(1, Ordering::Relaxed);
        }
        parsed.clone().map_err(|e| match e {
            gguf::GgufError::TooLarge { .. } => {
                ApiError::new(ErrorCode::TooLarge, format!("artifact {artifact:?} cannot be read: {e}"))
            }
            e => ApiError::arg(format!("artifact {artifact:?} is not a valid GGUF file: {e}")),
        })
    }
}

/// Whether `bytes` start with GGUF's magic (safetensors start with a header length).
fn is_gguf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"GGUF")
}

/// The dtype, shape and data of tensor `name` of a safetensors file.
fn safetensors_tensor<'a>(
    bytes: &'a [u8],
    artifact: &str,
    name: &str,
) -> Result<(DType, Vec<u32>, &'a [u8]), ApiError> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| ApiError::arg(format!("artifact {artifact:?} is not a valid safetensors file: {e}")))?;
    let view = st.tensor(name).map_err(|_| {
        ApiError::new(ErrorCode::NotFound, format!("artifact {artifact:?} has no tensor named {name:?}"))
    })?;
    let stored = dtype_of(view.dtype())
        .ok_or_else(|| ApiError::dtype(format!("tensor {name:?} has unsupported dtype {:?}", view.dtype())))?;
    let shape = view.shape().iter().map(|&d| d as u32).collect();
    Ok((stored, shape, view.data()))
}

/// The device dtype a GGUF tensor of `t` loads as.
fn gguf_dtype(t: gguf::GgmlType) -> Option<DType> {
    use gguf::GgmlType as G;
    Some(match t {
        G::F32 => DType::F32,
        G::F16 => DType::F16,
        G::BF16 => DType::BF16,
        G::I32 => DType::I32,
        G::I64 => DType::I64,
        // Block formats stay quantized on the device (blocks along ne0, the last axis).
        G::Q4_1 => DType::Q4_1,
        G::Q8_0 => DType::Q8_0,
        _ => return None,
    })
}

/// The row-major shape of a GGUF tensor, checked to fit a device tensor's dimensions.
fn gguf_shape(name: &str, info: &gguf::TensorInfo) -> Result<Vec<u32>, ApiError> {
    info.shape()
        .into_iter()
        .map(|d| {
            u32::try_from(d)
                .map_err(|_| ApiError::new(ErrorCode::TooLarge, format!("tensor {name:?} has a dimension of {d}")))
        })
        .collect()
}

fn dtype_of(d: safetensors::Dtype) -> Option<DType> {
    use safetensors::Dtype as S;
    Some(match d {
        S::F32 => DType::F32,
        S::F16 => DType::F16,
        S::BF16 => DType::BF16,
        S::I32 => DType::I32,
        S::I64 => DType::I64,
        S::U8 => DType::U8,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::CpuDevice;
    use safetensors::tensor::TensorView;

    #[test]
    fn weights_in_another_dtype_are_cast_on_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let values = [0.5f32, -3.0, 1e-3, 65504.0];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = TensorView::new(safetensors::Dtype::F32, vec![2, 2], &bytes).unwrap();
        let path = dir.path().join("model.safetensors");
        safetensors::serialize_to_file([("w", view)], None, &path).unwrap();
        let account = MemoryAccount::new("weights", None, None);
        let set = ArtifactSet::new(HashMap::from([("model".to_owned(), path)]), account.clone());
        let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(1)));
        let (lease, meta) = set.load_tensor(&queue, "model", "w", Some(DType::F16)).unwrap();
        assert_eq!((meta.dtype, meta.shape.to_vec()), (DType::F16, vec![2, 2]));
        assert_eq!(account.used(), 8, "the f16 copy is charged, not the f32 upload");
        let got = queue.read_blocking(lease.id(), meta).unwrap();
        let want: Vec<u8> = values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
        assert_eq!(got, want);
        let status = queue.status_blocking();
        assert_eq!((status.kernels, status.resident_tensors), (1, 1), "one cast; the upload is freed");
    }

    /// A GGUF file whose metadata holds `n` u8 elements, at `dir/name.gguf`.
    fn gguf_with_array(dir: &std::path::Path, name: &str, n: usize) -> PathBuf {
        let key = b"blob";
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend((key.len() as u64).to_le_bytes());
        b.extend(key);
        b.extend(9u32.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend((n as u64).to_le_bytes());
        b.resize(b.len() + n, 1);
        let path = dir.join(format!("{name}.gguf"));
        std::fs::write(&path, b).unwrap();
        path
    }

    #[test]
    fn concurrent_and_repeated_metadata_calls_share_one_parse() {
        let dir = tempfile::tempdir().unwrap();
        let path = gguf_with_array(dir.path(), "model", 4 << 20);
        let files = HashMap::from([("model".to_owned(), path)]);
        let set = ArtifactSet::new(files.clone(), MemoryAccount::new("weights", None, None));
        let start = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    start.wait();
                    assert!(set.metadata("model", 1000).is_err(), "more than 1000 bytes of JSON");
                });
            }
        });
        let first = set.gguf("model", &set.bytes("model").unwrap()).unwrap();
        let again = set.gguf("model", &set.bytes("model").unwrap()).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(set.stats().metadata_parses, 1, "8 concurrent calls and 2 more parsed the file once");
        // Another version's set with the same blob shares the parse too.
        let other = ArtifactSet::new(files, MemoryAccount::new("weights", None, None));
        let theirs = other.gguf("model", &other.bytes("model").unwrap()).unwrap();
        assert!(Arc::ptr_eq(&first, &theirs), "one parse per blob, shared between sets");
        assert_eq!(other.stats().metadata_parses, 0);
    }

    #[test]
    fn metadata_too_long_for_a_guest_is_rendered_once_per_blob() {
        let dir = tempfile::tempdir().unwrap();
        let path = gguf_with_array(dir.path(), "model", 64 << 10);
        let files = HashMap::from([("model".to_owned(), path)]);
        let set = ArtifactSet::new(files.clone(), MemoryAccount::new("weights", None, None));
        for _ in 0..3 {
            let Err(e) = set.metadata("model", 1000) else { panic!("64 KiB of metadata in 1000 bytes of JSON") };
            assert_eq!(e.code, ErrorCode::TooLarge, "{e:?}");
        }
        assert_eq!(set.stats().metadata_renders, 1, "the first refusal is remembered");
        // Another version's set naming the same blob knows it too.
        let other = ArtifactSet::new(files, MemoryAccount::new("weights", None, None));
        assert!(other.metadata("model", 500).is_err());
        assert_eq!(other.stats().metadata_renders, 0);
        // A larger limit is rendered, and gets the metadata.
        let json: serde_json::Value = serde_json::from_str(&set.metadata("model", 1 << 20).unwrap()).unwrap();
        assert_eq!(json["blob"].as_array().map(Vec::len), Some(64 << 10));
        assert_eq!(set.stats().metadata_renders, 2);
    }

    #[test]
    fn one_calls_metadata_json_is_held_to_the_sets_cap_below_the_guests_limit() {
        let dir = tempfile::tempdir().unwrap();
        // 64 Ki one-byte elements: at least 128 KiB of JSON.
        let path = gguf_with_array(dir.path(), "model", 64 << 10);
        let files = HashMap::from([("model".to_owned(), path)]);
        let account = || MemoryAccount::new("weights", None, None);
        let capped = ArtifactSet::bounded(files.clone(), account(), 1 << 20, 100 << 10);
        let Err(e) = capped.metadata("model", 64 << 20) else { panic!("over the set's 100 KiB cap") };
        assert_eq!(e.code, ErrorCode::TooLarge, "{e:?}");
        assert!(e.message.contains("102400 bytes"), "the cap that refused it: {e:?}");
        let roomy = ArtifactSet::bounded(files, account(), 1 << 20, 1 << 20);
        assert!(roomy.metadata("model", 64 << 20).is_ok(), "within a 1 MiB cap");
    }

    #[test]
    fn metadata_over_the_cap_is_a_typed_guest_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = gguf_with_array(dir.path(), "model", 2 << 20);
        let files = HashMap::from([("model".to_owned(), path)]);
        let set = ArtifactSet::bounded(files, MemoryAccount::new("weights", None, None), 1 << 20, 64 << 20);
        let e = match set.metadata("model", 64 << 20) {
            Ok(json) => panic!("2 MiB of metadata under a 1 MiB cap: {} bytes of JSON", json.len()),
            Err(e) => e,
        };
        assert_eq!(e.code, ErrorCode::TooLarge, "{e:?}");
        assert!(e.message.contains("1048576 bytes of host memory"), "{e:?}");
        let queue = DeviceQueue::start(Box::new(CpuDevice::with_threads(1)));
        let Err(e) = set.load_tensor(&queue, "model", "w", None) else { panic!("loaded past the cap") };
        assert_eq!(e.code, ErrorCode::TooLarge, "{e:?}");
        assert_eq!(set.stats().metadata_parses, 1, "the refusal is kept, not parsed again");
    }

    #[test]
    fn weights_are_loaded_again_after_the_device_was_reset() {
        use crate::device::sim::SimDevice;
        use crate::scheduler::{Clock, PriorityClass, SchedulerConfig, SchedulingInfo};
        use sluice_host_api::UnaryOp;

        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = TensorView::new(safetensors::Dtype::F32, vec![2], &bytes).unwrap();
        let path = dir.path().join("model.safetensors");
        safetensors::serialize_to_file([("w", view)], None, &path).unwrap();
        let account = MemoryAccount::new("weights", None, None);
        let set = ArtifactSet::new(HashMap::from([("model".to_owned(), path)]), account.clone());
        let clock = Clock::simulated();
        let device = SimDevice::builder(clock.clone()).build();
        let loss = device.loss();
        let queue = DeviceQueue::start_with(Box::new(device), SchedulerConfig { clock, ..Default::default() });
        // An invocation negating the shared weight.
        let negate = |w: &TensorLease, meta: &TensorMeta| {
            let inv = queue.begin(SchedulingInfo {
                tenant: "t".into(),
                function: "f".into(),
                class: PriorityClass::Latency,
                weight: 1,
            });
            let y = queue.new_tensor_id();
            queue.launch(inv.id(), y, Op::Unary(UnaryOp::Neg), vec![(w.id(), meta.clone())], meta.clone());
            queue.read_blocking(y, meta.clone())
        };
        let (w, meta) = set.load_tensor(&queue, "model", "w", None).unwrap();
        let want: Vec<u8> = [-1.5f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(negate(&w, &meta).unwrap(), want);
        loss.at_launch(1);
        let e = negate(&w, &meta).unwrap_err();
        assert!(e.message.contains("device lost"), "{e:?}");
        drop(w);
        // The next invocation loads the weight again, onto the reset device.
        let (w, meta) = set.load_tensor(&queue, "model", "w", None).unwrap();
        assert_eq!((set.stats().weight_tensors_loaded, set.stats().weight_cache_hits), (2, 0));
        assert_eq!(negate(&w, &meta).unwrap(), want);
        let (_again, _) = set.load_tensor(&queue, "model", "w", None).unwrap();
        assert_eq!(set.stats().weight_cache_hits, 1, "cached again until the next reset");
        assert_eq!((queue.status_blocking().resets, account.used()), (1, 8));
    }
}
