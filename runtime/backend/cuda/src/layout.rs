//! Index math shared by the host and the kernels: contiguous strides, broadcast strides,
//! and [`Layout`], the `#[repr(C)]` struct passed by value to strided kernels.
//!
//! A strided kernel walks the elements of `dims` in row-major order; element `i` reads
//! at `Σ coordᵈ · sa[d]` and writes (or reads a second input) at `Σ coordᵈ · sb[d]`.
//! Broadcasting is a stride of 0, a permutation is a reordering of strides, a slice or
//! a concat is an offset plus the strides of the larger tensor.

use cudarc::driver::DeviceRepr;
use sluice_host_api::MAX_RANK;

/// Row-major strides (in elements) of a contiguous tensor of shape `shape`.
pub fn contiguous_strides(shape: &[u32]) -> Vec<u64> {
    let mut strides = vec![0u64; shape.len()];
    let mut acc = 1u64;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= d as u64;
    }
    strides
}

/// Strides that read a contiguous tensor of shape `shape` as if broadcast to `target`
/// (NumPy rules: `shape` is right-aligned, axes of size 1 get stride 0).
///
/// Panics if `shape` does not broadcast to `target`; callers pass shapes `infer` checked.
pub fn broadcast_strides(shape: &[u32], target: &[u32]) -> Vec<u64> {
    assert!(shape.len() <= target.len(), "{shape:?} does not broadcast to {target:?}");
    let own = contiguous_strides(shape);
    let lead = target.len() - shape.len();
    (0..target.len())
        .map(|i| {
            if i < lead {
                0
            } else {
                let d = shape[i - lead];
                assert!(d == target[i] || d == 1, "{shape:?} does not broadcast to {target:?}");
                if d == 1 && target[i] != 1 { 0 } else { own[i - lead] }
            }
        })
        .collect()
}

/// The layout argument of the strided kernels (`struct Layout` in `common.cuh`).
/// Field order and sizes match the C struct exactly: 168 bytes, 8-byte aligned.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub rank: u32,
    pub pad: u32,
    pub dims: [u32; MAX_RANK],
    pub sa: [u64; MAX_RANK],
    pub sb: [u64; MAX_RANK],
}

// SAFETY: plain `#[repr(C)]` data with the same layout as the C struct.
unsafe impl DeviceRepr for Layout {}

impl Layout {
    /// A layout over `dims` with the two stride sets; axes of size 1 are dropped and
    /// adjacent axes that are contiguous in both stride sets are merged, so kernels do
    /// fewer divisions.
    pub fn new(dims: &[u32], sa: &[u64], sb: &[u64]) -> Layout {
        assert!(dims.len() == sa.len() && dims.len() == sb.len());
        // Collect (dim, sa, sb) for axes of size != 1, merging with the previous (outer)
        // axis when the outer axis' strides are the inner's times the inner's size.
        let mut axes: Vec<(u64, u64, u64)> = Vec::with_capacity(dims.len());
        for i in 0..dims.len() {
            let d = dims[i] as u64;
            if d == 1 {
                continue;
            }
            if let Some(last) = axes.last_mut()
                && last.1 == sa[i] * d
                && last.2 == sb[i] * d
            {
                last.0 *= d;
                last.1 = sa[i];
                last.2 = sb[i];
                continue;
            }
            axes.push((d, sa[i], sb[i]));
        }
        let mut l = Layout { rank: axes.len() as u32, ..Layout::default() };
        for (i, (d, a, b)) in axes.into_iter().enumerate() {
            // A merged axis can exceed u32 only when the tensor exceeds MAX_ELEMENTS.
            l.dims[i] = u32::try_from(d).expect("axis larger than u32::MAX");
            l.sa[i] = a;
            l.sb[i] = b;
        }
        l
    }

    /// Number of elements the layout walks.
    pub fn numel(&self) -> u64 {
        self.dims[..self.rank as usize].iter().map(|&d| d as u64).product()
    }

    /// The two offsets of element `i` (what the kernels compute), for tests.
    pub fn offsets(&self, mut i: u64) -> (u64, u64) {
        let (mut a, mut b) = (0, 0);
        for d in (0..self.rank as usize).rev() {
            let n = self.dims[d] as u64;
            let c = i % n;
            i /= n;
            a += c * self.sa[d];
            b += c * self.sb[d];
        }
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_c_struct() {
        assert_eq!(std::mem::size_of::<Layout>(), 168);
        assert_eq!(std::mem::align_of::<Layout>(), 8);
        assert_eq!(std::mem::offset_of!(Layout, dims), 8);
        assert_eq!(std::mem::offset_of!(Layout, sa), 40);
        assert_eq!(std::mem::offset_of!(Layout, sb), 104);
    }

    #[test]
    fn strides() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(contiguous_strides(&[]), Vec::<u64>::new());
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[4], &[2, 3, 4]), vec![0, 0, 1]);
        assert_eq!(broadcast_strides(&[1, 1], &[1, 1]), vec![1, 1]);
    }

    #[test]
    #[should_panic]
    fn broadcast_strides_refuse_mismatch() {
        broadcast_strides(&[3], &[2, 4]);
    }

    /// Every element of a broadcast binary op reads the NumPy-correct inputs.
    #[test]
    fn broadcast_offsets_follow_numpy() {
        let (a, b, out) = ([2u32, 1, 4], [3u32, 1], [2u32, 3, 4]);
        let l = Layout::new(&out, &broadcast_strides(&a, &out), &broadcast_strides(&b, &out));
        assert_eq!(l.numel(), 24);
        for i in 0..24u64 {
            let (x, y, z) = (i / 12, (i / 4) % 3, i % 4);
            assert_eq!(l.offsets(i), (x * 4 + z, y), "element {i}");
        }
    }

    #[test]
    fn contiguous_axes_merge() {
        let shape = [2u32, 3, 4];
        let s = contiguous_strides(&shape);
        let l = Layout::new(&shape, &s, &s);
        assert_eq!((l.rank, l.dims[0]), (1, 24));
        // [2, 3, 4] + [4]: the two outer axes merge on both sides, the inner stays.
        let l = Layout::new(&shape, &s, &broadcast_strides(&[4], &shape));
        assert_eq!(l.rank, 2);
        assert_eq!((l.dims[0], l.sa[0], l.sb[0]), (6, 4, 0));
        assert_eq!(l.offsets(23), (23, 3));
        // Size-1 axes vanish; an all-ones shape is rank 0 with one element.
        let l = Layout::new(&[1, 1], &[1, 1], &[1, 1]);
        assert_eq!((l.rank, l.numel(), l.offsets(0)), (0, 1, (0, 0)));
    }

    #[test]
    fn permutation_offsets() {
        // out = x.permute([2, 0, 1]) for x [2, 3, 4]: out shape [4, 2, 3].
        let xs = contiguous_strides(&[2, 3, 4]);
        let out = [4u32, 2, 3];
        let sa = [xs[2], xs[0], xs[1]];
        let l = Layout::new(&out, &sa, &contiguous_strides(&out));
        for i in 0..24u64 {
            let (k, a, b) = (i / 6, (i / 3) % 2, i % 3);
            assert_eq!(l.offsets(i), (a * 12 + b * 4 + k, i));
        }
    }
}
