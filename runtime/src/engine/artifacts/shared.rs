//! Parsed GGUF indexes, shared by every artifact set whose artifact is the same file.
//!
//! Artifact files are content-addressed blobs, so one path is one content: its parse
//! (metadata and tensor index) is done once, by the first caller, while concurrent
//! callers wait for it, and then shared by every version, device and invocation that
//! names the blob, a refusal included (the file and the cap do not change). The sets
//! hold the slots; this table only points at them, so a blob no set uses is forgotten.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, OnceLock, Weak};

use parking_lot::Mutex;

use super::gguf::{Gguf, GgufError};

/// The outcome of one parse.
pub(super) type Parsed = Result<Arc<Gguf>, GgufError>;

/// One blob's parse under one cap, done at most once, with the heap it holds, and
/// the largest JSON limit its metadata is known to exceed.
#[derive(Default)]
pub(super) struct Slot {
    parsed: OnceLock<(Parsed, usize)>,
    /// 0 until a [`Slot::metadata_json`] call found the JSON longer than its limit.
    json_over: AtomicUsize,
}

/// Slots by blob path and cap.
type Slots = HashMap<(PathBuf, usize), Weak<Slot>>;

/// Every slot alive.
static SLOTS: LazyLock<Mutex<Slots>> = LazyLock::new(Default::default);

/// The slot of the file at `path` parsed with at most `max_bytes` of host memory.
pub(super) fn slot(path: &Path, max_bytes: usize) -> Arc<Slot> {
    let mut slots = SLOTS.lock();
    let key = (path.to_owned(), max_bytes);
    if let Some(slot) = slots.get(&key).and_then(Weak::upgrade) {
        return slot;
    }
    slots.retain(|_, slot| slot.strong_count() > 0);
    let slot = Arc::new(Slot::default());
    slots.insert(key, Arc::downgrade(&slot));
    slot
}

/// Host memory held by every parse alive.
pub fn parsed_bytes() -> usize {
    let slots: Vec<Arc<Slot>> = SLOTS.lock().values().filter_map(Weak::upgrade).collect();
    slots.iter().map(|s| s.heap_bytes()).sum()
}

impl Slot {
    /// The parse of `bytes` (the slot's file) with at most `max_bytes`, and whether
    /// this call did it.
    pub fn get_or_parse(&self, bytes: &[u8], max_bytes: usize) -> (&Parsed, bool) {
        let mut parsed_here = false;
        let (parsed, _) = self.parsed.get_or_init(|| {
            parsed_here = true;
            let parsed = Gguf::parse_bounded(bytes, max_bytes).map(Arc::new);
            let heap = parsed.as_ref().map_or(0, |g| g.heap_bytes());
            (parsed, heap)
        });
        (parsed, parsed_here)
    }

    /// The metadata of `gguf` (this slot's parse) as JSON of at most `limit` bytes, or
    /// `None` where it is longer, and whether this call rendered it. A refusal is
    /// remembered: a later call with a limit no larger is refused at once, so a guest
    /// asking again and again for metadata that expands past the limit (a GGUF bomb)
    /// costs one rendering, not one per call.
    pub fn metadata_json(&self, gguf: &Gguf, limit: usize) -> (Option<String>, bool) {
        if limit <= self.json_over.load(Ordering::Relaxed) {
            return (None, false);
        }
        let json = gguf.metadata_json(limit).ok();
        if json.is_none() {
            self.json_over.fetch_max(limit, Ordering::Relaxed);
        }
        (json, true)
    }

    /// Host memory the parse holds (none before it is done, or after a refusal).
    pub fn heap_bytes(&self) -> usize {
        self.parsed.get().map_or(0, |(_, heap)| *heap)
    }
}
