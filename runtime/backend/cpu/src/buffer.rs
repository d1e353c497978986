//! Host-memory tensor storage: [`CpuBuffer`], one shared, immutable, row-major slice per
//! dtype (the packed blocks' bytes for a block format, see `quant.rs`), plus the [`Element`] trait that lets kernels be written once over the element
//! type and the helpers that move between the half-precision types and `f32`.

use std::borrow::Cow;
use std::sync::Arc;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use sluice_host_api::DType;

use crate::KernelError;

/// Elements of one tensor, row-major and contiguous. Cloning is cheap (an `Arc`), because
/// weights are shared read-only between invocations; kernels never mutate an input. The
/// one mutation is [`crate::write_rows`] (an `unsafe` call), which writes in place into a
/// buffer that every clone then shows.
#[derive(Clone, Debug)]
pub enum CpuBuffer {
    F32(Arc<[f32]>),
    F16(Arc<[f16]>),
    BF16(Arc<[bf16]>),
    I32(Arc<[i32]>),
    I64(Arc<[i64]>),
    U8(Arc<[u8]>),
    /// A block format ([`DType::is_quantized`]): whole blocks of packed bytes.
    Blocks(DType, Arc<[u8]>),
}

/// An element type a [`CpuBuffer`] can hold.
pub trait Element: Copy + Default + Send + Sync + 'static {
    /// The dtype of this element type.
    const DTYPE: DType;
    /// The elements of `buf` if it holds this type.
    fn slice(buf: &CpuBuffer) -> Option<&[Self]>;
    /// Wraps elements of this type into a buffer.
    fn wrap(data: Arc<[Self]>) -> CpuBuffer;
}

macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn slice(buf: &CpuBuffer) -> Option<&[Self]> {
                match buf {
                    CpuBuffer::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn wrap(data: Arc<[Self]>) -> CpuBuffer {
                CpuBuffer::$variant(data)
            }
        }
        impl From<Vec<$t>> for CpuBuffer {
            fn from(v: Vec<$t>) -> Self {
                CpuBuffer::$variant(v.into())
            }
        }
    };
}

element!(f32, F32);
element!(f16, F16);
element!(bf16, BF16);
element!(i32, I32);
element!(i64, I64);
element!(u8, U8);

/// Integer element types and the wrapping arithmetic the catalog defines for them.
pub(crate) trait Int: Element + Ord {
    const ZERO: Self;
    fn wrapping_add(self, o: Self) -> Self;
    fn wrapping_sub(self, o: Self) -> Self;
    fn wrapping_mul(self, o: Self) -> Self;
    /// `o` is never zero.
    fn wrapping_div(self, o: Self) -> Self;
    fn wrapping_neg(self) -> Self;
    fn wrapping_abs(self) -> Self;
}

macro_rules! int {
    ($t:ty, $abs:expr) => {
        impl Int for $t {
            const ZERO: Self = 0;
            fn wrapping_add(self, o: Self) -> Self {
                <$t>::wrapping_add(self, o)
            }
            fn wrapping_sub(self, o: Self) -> Self {
                <$t>::wrapping_sub(self, o)
            }
            fn wrapping_mul(self, o: Self) -> Self {
                <$t>::wrapping_mul(self, o)
            }
            fn wrapping_div(self, o: Self) -> Self {
                <$t>::wrapping_div(self, o)
            }
            fn wrapping_neg(self) -> Self {
                <$t>::wrapping_neg(self)
            }
            fn wrapping_abs(self) -> Self {
                $abs(self)
            }
        }
    };
}

int!(i32, i32::wrapping_abs);
int!(i64, i64::wrapping_abs);
int!(u8, |x: u8| x);

/// Runs `$body` with the type alias `$t` bound to the element type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            sluice_host_api::DType::F32 => {
                type $t = f32;
                $body
            }
            sluice_host_api::DType::F16 => {
                type $t = half::f16;
                $body
            }
            sluice_host_api::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            sluice_host_api::DType::I32 => {
                type $t = i32;
                $body
            }
            sluice_host_api::DType::I64 => {
                type $t = i64;
                $body
            }
            sluice_host_api::DType::U8 => {
                type $t = u8;
                $body
            }
            // Block formats have no element type: `launch` lets only the quantized
            // kernels see them, and a body reached anyway fails on its `typed::<u8>()`.
            sluice_host_api::DType::Q4_1 | sluice_host_api::DType::Q8_0 => {
                type $t = u8;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

impl CpuBuffer {
    /// Decodes little-endian element bytes; a trailing partial element is ignored
    /// (callers pass a multiple of the dtype size).
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> CpuBuffer {
        macro_rules! decode {
            ($t:ty, $variant:ident, $conv:expr) => {{
                const N: usize = size_of::<$t>();
                CpuBuffer::$variant(
                    bytes
                        .chunks_exact(N)
                        .map(|c| {
                            let mut raw = [0u8; N];
                            raw.copy_from_slice(c);
                            $conv(raw)
                        })
                        .collect(),
                )
            }};
        }
        match dtype {
            DType::F32 => decode!(f32, F32, f32::from_le_bytes),
            DType::F16 => decode!(f16, F16, f16::from_le_bytes),
            DType::BF16 => decode!(bf16, BF16, bf16::from_le_bytes),
            DType::I32 => decode!(i32, I32, i32::from_le_bytes),
            DType::I64 => decode!(i64, I64, i64::from_le_bytes),
            DType::U8 => CpuBuffer::U8(bytes.into()),
            DType::Q4_1 | DType::Q8_0 => {
                let whole = bytes.len() / dtype.block_bytes() * dtype.block_bytes();
                CpuBuffer::Blocks(dtype, bytes[..whole].into())
            }
        }
    }

    /// Copies `src`'s elements over this buffer's from element `at` on, in place (the
    /// same variant; a block format is refused): every clone of this buffer shows them.
    ///
    /// # Safety
    /// No reference to this buffer's elements (through any clone) may be live during the
    /// call, and no other thread may use a clone of it meanwhile.
    pub(crate) unsafe fn write_at(&self, at: usize, src: &CpuBuffer) -> Result<(), KernelError> {
        /// # Safety
        /// As [`CpuBuffer::write_at`].
        unsafe fn write<T: Copy>(dst: &Arc<[T]>, at: usize, src: &Arc<[T]>) -> Result<(), KernelError> {
            let n = src.len();
            if at.checked_add(n).is_none_or(|end| end > dst.len()) {
                return Err(KernelError(format!("{n} elements written at {at} end past {}", dst.len())));
            }
            // The pointer of the allocation, never through a shared reference to it.
            let to = Arc::as_ptr(dst).cast::<T>().cast_mut();
            // The same storage (a view of `dst` written back): copied out first, so
            // no reference into it is live while it is written.
            let from: Cow<'_, [T]> = if Arc::ptr_eq(dst, src) { Cow::Owned(src.to_vec()) } else { Cow::Borrowed(src) };
            // SAFETY: `at + n <= dst.len()`; `from` is another allocation than `dst`;
            // nothing else reads or writes `dst`'s elements meanwhile (the caller's
            // contract), and the pointer carries the allocation's write permission.
            unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), to.add(at), n) };
            Ok(())
        }
        // SAFETY: forwarded from the caller.
        unsafe {
            match (self, src) {
                (CpuBuffer::F32(d), CpuBuffer::F32(s)) => write(d, at, s),
                (CpuBuffer::F16(d), CpuBuffer::F16(s)) => write(d, at, s),
                (CpuBuffer::BF16(d), CpuBuffer::BF16(s)) => write(d, at, s),
                (CpuBuffer::I32(d), CpuBuffer::I32(s)) => write(d, at, s),
                (CpuBuffer::I64(d), CpuBuffer::I64(s)) => write(d, at, s),
                (CpuBuffer::U8(d), CpuBuffer::U8(s)) => write(d, at, s),
                _ => Err(KernelError(format!("cannot write {} elements into a {} buffer", src.dtype(), self.dtype()))),
            }
        }
    }

    /// Encodes the elements as little-endian bytes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            CpuBuffer::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuBuffer::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuBuffer::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuBuffer::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuBuffer::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuBuffer::U8(v) | CpuBuffer::Blocks(_, v) => v.to_vec(),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            CpuBuffer::F32(_) => DType::F32,
            CpuBuffer::F16(_) => DType::F16,
            CpuBuffer::BF16(_) => DType::BF16,
            CpuBuffer::I32(_) => DType::I32,
            CpuBuffer::I64(_) => DType::I64,
            CpuBuffer::U8(_) => DType::U8,
            CpuBuffer::Blocks(d, _) => *d,
        }
    }

    /// Number of elements (of a block format: blocks × 32).
    pub fn len(&self) -> usize {
        match self {
            CpuBuffer::F32(v) => v.len(),
            CpuBuffer::F16(v) => v.len(),
            CpuBuffer::BF16(v) => v.len(),
            CpuBuffer::I32(v) => v.len(),
            CpuBuffer::I64(v) => v.len(),
            CpuBuffer::U8(v) => v.len(),
            CpuBuffer::Blocks(d, v) => v.len() / d.block_bytes() * d.block_len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `self` and `other` are the same elements (clones of one buffer).
    pub fn same_storage(&self, other: &CpuBuffer) -> bool {
        fn addr<T>(v: &Arc<[T]>) -> *const u8 {
            v.as_ptr().cast()
        }
        let start = |b: &CpuBuffer| match b {
            CpuBuffer::F32(v) => addr(v),
            CpuBuffer::F16(v) => addr(v),
            CpuBuffer::BF16(v) => addr(v),
            CpuBuffer::I32(v) => addr(v),
            CpuBuffer::I64(v) => addr(v),
            CpuBuffer::U8(v) | CpuBuffer::Blocks(_, v) => addr(v),
        };
        start(self) == start(other) && self.byte_len() == other.byte_len()
    }

    /// Size of the element data in bytes.
    pub fn byte_len(&self) -> usize {
        match self {
            CpuBuffer::Blocks(_, v) => v.len(),
            _ => self.len() * self.dtype().size_of(),
        }
    }

    pub fn from_f32(v: Vec<f32>) -> Self {
        v.into()
    }

    /// `v` rounded to `dtype` (any dtype, with [`crate::launch`]'s cast rules; a block
    /// format is quantized as ggml's reference quantizer does, whole blocks only).
    pub fn from_f32_as(dtype: DType, v: &[f32]) -> Self {
        match dtype {
            DType::F32 => CpuBuffer::F32(v.into()),
            DType::F16 => CpuBuffer::F16(new_with(v.len(), |o| o.convert_from_f32_slice(v))),
            DType::BF16 => CpuBuffer::BF16(new_with(v.len(), |o| o.convert_from_f32_slice(v))),
            DType::I32 => CpuBuffer::I32(v.iter().map(|&x| x as i32).collect()),
            DType::I64 => CpuBuffer::I64(v.iter().map(|&x| x as i64).collect()),
            DType::U8 => CpuBuffer::U8(v.iter().map(|&x| x as u8).collect()),
            DType::Q4_1 | DType::Q8_0 => CpuBuffer::Blocks(dtype, crate::quant::quantize(dtype, v)),
        }
    }

    /// A copy of elements `range` (in element units; whole blocks of a block format).
    pub fn rows(&self, range: std::ops::Range<usize>) -> CpuBuffer {
        match self {
            CpuBuffer::F32(v) => CpuBuffer::F32(v[range].into()),
            CpuBuffer::F16(v) => CpuBuffer::F16(v[range].into()),
            CpuBuffer::BF16(v) => CpuBuffer::BF16(v[range].into()),
            CpuBuffer::I32(v) => CpuBuffer::I32(v[range].into()),
            CpuBuffer::I64(v) => CpuBuffer::I64(v[range].into()),
            CpuBuffer::U8(v) => CpuBuffer::U8(v[range].into()),
            CpuBuffer::Blocks(d, v) => {
                let at = |i: usize| i / d.block_len() * d.block_bytes();
                CpuBuffer::Blocks(*d, v[at(range.start)..at(range.end)].into())
            }
        }
    }

    /// Every element converted to `f32` (integers rounded to the nearest `f32`, blocks
    /// dequantized).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match self {
            CpuBuffer::F32(v) => v.to_vec(),
            CpuBuffer::F16(v) => v.to_f32_vec(),
            CpuBuffer::BF16(v) => v.to_f32_vec(),
            CpuBuffer::I32(v) => v.iter().map(|&x| x as f32).collect(),
            CpuBuffer::I64(v) => v.iter().map(|&x| x as f32).collect(),
            CpuBuffer::U8(v) => v.iter().map(|&x| x as f32).collect(),
            CpuBuffer::Blocks(d, v) => crate::quant::dequantize(*d, v),
        }
    }

    /// The packed bytes of a block-format buffer, or an error naming its dtype.
    pub(crate) fn blocks(&self) -> Result<(DType, &[u8]), KernelError> {
        match self {
            CpuBuffer::Blocks(d, v) => Ok((*d, v)),
            other => Err(KernelError(format!("expected a block-quantized tensor, got {}", other.dtype()))),
        }
    }

    /// The elements of a floating buffer as `f32`, borrowed when already `f32`.
    pub(crate) fn float_view(&self) -> Result<Cow<'_, [f32]>, KernelError> {
        match self {
            CpuBuffer::F32(v) => Ok(Cow::Borrowed(v)),
            CpuBuffer::F16(v) => Ok(Cow::Owned(v.to_f32_vec())),
            CpuBuffer::BF16(v) => Ok(Cow::Owned(v.to_f32_vec())),
            other => Err(KernelError(format!("expected a floating tensor, got {}", other.dtype()))),
        }
    }

    /// The elements as `T`, or an error naming both dtypes.
    pub(crate) fn typed<T: Element>(&self) -> Result<&[T], KernelError> {
        T::slice(self).ok_or_else(|| KernelError(format!("expected a {} tensor, got {}", T::DTYPE, self.dtype())))
    }
}

/// A fresh shared slice of `n` elements filled by `fill` (one allocation, no copy).
pub(crate) fn new_with<T: Default + Clone>(n: usize, fill: impl FnOnce(&mut [T])) -> Arc<[T]> {
    let mut data: Arc<[T]> = std::iter::repeat_n(T::default(), n).collect();
    if let Some(out) = Arc::get_mut(&mut data) {
        fill(out);
    }
    data
}

/// `x` rounded to the floating `dtype` and widened back: the value an op returning
/// `dtype` hands to the next op (identity for f32).
pub(crate) fn round_to(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::F16 => f16::from_f32(x).to_f32(),
        DType::BF16 => bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// A fresh `f32` result of `n` elements as `dtype`, computed by `fill`.
pub(crate) fn float_with(dtype: DType, n: usize, fill: impl FnOnce(&mut [f32])) -> CpuBuffer {
    if dtype == DType::F32 {
        CpuBuffer::F32(new_with(n, fill))
    } else {
        let mut v = vec![0.0; n];
        fill(&mut v);
        CpuBuffer::from_f32_as(dtype, &v)
    }
}
