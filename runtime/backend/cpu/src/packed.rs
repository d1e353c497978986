//! Weights packed once: the column panels ([`PackedB`]) of each f32 weight a `linear`
//! multiplies by, built on its first use and shared by every later launch that passes
//! the same weight buffer: every invocation of a function version and every instance
//! sharing its weights (they hold one `Arc` of the elements, see the runtime's
//! artifact set).
//!
//! The packed form is kept beside its weight and lives as long as the weight does:
//! entries are keyed by the address of the weight's elements and hold a weak
//! reference to them, so a weight that is dropped (its version undeployed, its device
//! reset) loses its packed form at the next insertion or sweep, and an address reused
//! by another buffer is never mistaken for the old one. [`packed_weight_bytes`] reports
//! the memory held.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::panel_gemm::PackedB;

/// What a packed form was built from: the elements' address, whether the weight is
/// `[n, k]` (transposed) or `[k, n]`, and `k`, `n`.
type Key = (usize, bool, usize, usize);

struct Entry {
    weight: Weak<[f32]>,
    packed: Arc<PackedB>,
}

/// Lookups between sweeps of the entries whose weight is gone.
const SWEEP_EVERY: usize = 256;

static CACHE: Mutex<Option<HashMap<Key, Entry>>> = Mutex::new(None);
static LOOKUPS: AtomicUsize = AtomicUsize::new(0);

/// The panels of `w` as the `k × n` right operand of a product: `w` is `[n, k]` when
/// `transpose_w` (a linear's `[out, in]` weight), else `[k, n]`. Packed on the first
/// call for this weight, then shared. `w` must hold `k · n` elements.
pub(crate) fn packed_weight(w: &Arc<[f32]>, k: usize, n: usize, transpose_w: bool) -> Arc<PackedB> {
    let key = (w.as_ptr() as usize, transpose_w, k, n);
    let sweep = LOOKUPS.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1;
    {
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        let map = cache.get_or_insert_with(HashMap::new);
        if sweep {
            map.retain(|_, e| e.weight.strong_count() > 0);
        }
        if let Some(e) = map.get(&key)
            && e.weight.upgrade().is_some_and(|live| Arc::ptr_eq(&live, w))
        {
            return e.packed.clone();
        }
    }
    // Packed outside the lock; two threads packing the same weight at once both get a
    // correct form and the second insertion wins.
    let (rs, cs) = if transpose_w { (1, k) } else { (n, 1) };
    let packed = Arc::new(PackedB::pack(w, k, n, rs, cs));
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let map = cache.get_or_insert_with(HashMap::new);
    map.retain(|_, e| e.weight.strong_count() > 0);
    map.insert(key, Entry { weight: Arc::downgrade(w), packed: packed.clone() });
    packed
}

/// Bytes of the packed forms of the weights still alive.
pub fn packed_weight_bytes() -> u64 {
    let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .iter()
        .flat_map(|m| m.values())
        .filter(|e| e.weight.strong_count() > 0)
        .map(|e| e.packed.byte_len() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weight_is_packed_once_and_dropped_with_it() {
        let w: Arc<[f32]> = (0..6 * 40).map(|i| i as f32).collect();
        let first = packed_weight(&w, 6, 40, true);
        let again = packed_weight(&w, 6, 40, true);
        assert!(Arc::ptr_eq(&first, &again), "the second use packs again");
        assert!(packed_weight_bytes() >= first.byte_len() as u64);
        // The same elements as a [k, n] weight are another packed form.
        let other = packed_weight(&w, 6, 40, false);
        assert!(!Arc::ptr_eq(&first, &other));
        let clone = w.clone();
        assert!(Arc::ptr_eq(&first, &packed_weight(&clone, 6, 40, true)), "a clone of the weight shares its form");
        drop((w, clone, again));
        // The next insertion sweeps the entries of dropped weights.
        let fresh: Arc<[f32]> = vec![1.0; 8].into();
        packed_weight(&fresh, 2, 4, true);
        assert_eq!(Arc::strong_count(&first), 1, "the packed form outlives its weight");
    }
}
