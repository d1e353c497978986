// Shared by every sluice kernel module (prepended to each .cu source by kernels.rs).
// Self-contained on purpose: no include directives, so NVRTC needs no toolkit headers.
// f16 and bf16 are storage types; all floating math is done in f32.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef unsigned char u8;

// Codes of the fault words [code, value] a kernel sets for a data-dependent error the
// CPU backend reports (`crate::fault` on the host side; same values there).
#define FAULT_EMBEDDING_ID 1ull
#define FAULT_DIV_BY_ZERO 2ull

struct f16_t { unsigned short bits; };
struct bf16_t { unsigned short bits; };

// Must match `layout::Layout` in Rust (168 bytes).
struct Layout {
    u32 rank;
    u32 pad;
    u32 dims[8];
    u64 sa[8];
    u64 sb[8];
};

#define GRID_LOOP(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n); i += (u64)blockDim.x * gridDim.x)

#define F32_INF __int_as_float(0x7f800000)

// Threads a block of a row kernel (one block per row, `kernels::rows_config`) may have.
// Row kernels declare it as their `__launch_bounds__`, so the compiler keeps them within
// 64 registers a thread and a 1024-thread block always fits; without it a kernel needing
// more registers fails to launch for rows of more than ~1000 elements (issue 11, defect 3).
#define ROW_THREADS 1024

__device__ __forceinline__ void layout_offsets(const Layout& L, u64 i, u64& oa, u64& ob) {
    oa = 0;
    ob = 0;
    for (int d = (int)L.rank - 1; d >= 0; --d) {
        u64 n = L.dims[d];
        u64 c = i % n;
        i /= n;
        oa += c * L.sa[d];
        ob += c * L.sb[d];
    }
}

__device__ __forceinline__ float f16_to_f32(f16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}
__device__ __forceinline__ f16_t f32_to_f16(float f) {
    f16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}
__device__ __forceinline__ float bf16_to_f32(bf16_t b) {
    return __uint_as_float(((u32)b.bits) << 16);
}
// Round to nearest even, NaN stays a quiet NaN (as the `half` crate does).
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    bf16_t b;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        b.bits = (unsigned short)((u >> 16) | 0x40u);
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);
        b.bits = (unsigned short)(u >> 16);
    }
    return b;
}

// Num<T>: the compute type C of a storage type T, with load (T -> C) and store (C -> T).
template <typename T> struct Num;
template <> struct Num<float> {
    typedef float C;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float c) { return c; }
};
template <> struct Num<f16_t> {
    typedef float C;
    static __device__ __forceinline__ float load(f16_t v) { return f16_to_f32(v); }
    static __device__ __forceinline__ f16_t store(float c) { return f32_to_f16(c); }
};
template <> struct Num<bf16_t> {
    typedef float C;
    static __device__ __forceinline__ float load(bf16_t v) { return bf16_to_f32(v); }
    static __device__ __forceinline__ bf16_t store(float c) { return f32_to_bf16(c); }
};
template <> struct Num<int> {
    typedef int C;
    static __device__ __forceinline__ int load(int v) { return v; }
    static __device__ __forceinline__ int store(int c) { return c; }
};
template <> struct Num<i64> {
    typedef i64 C;
    static __device__ __forceinline__ i64 load(i64 v) { return v; }
    static __device__ __forceinline__ i64 store(i64 c) { return c; }
};
// u8 computes in u32; storing truncates modulo 256 (wrapping, like Rust).
template <> struct Num<u8> {
    typedef u32 C;
    static __device__ __forceinline__ u32 load(u8 v) { return v; }
    static __device__ __forceinline__ u8 store(u32 c) { return (u8)c; }
};

// Arithmetic on compute types. Integers wrap in two's complement; integer division by
// zero gives 0 (a kernel cannot fail), MIN / -1 gives MIN; float max/min propagate NaN.
__device__ __forceinline__ float add_(float a, float b) { return a + b; }
__device__ __forceinline__ int add_(int a, int b) { return (int)((u32)a + (u32)b); }
__device__ __forceinline__ i64 add_(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ u32 add_(u32 a, u32 b) { return a + b; }
__device__ __forceinline__ float sub_(float a, float b) { return a - b; }
__device__ __forceinline__ int sub_(int a, int b) { return (int)((u32)a - (u32)b); }
__device__ __forceinline__ i64 sub_(i64 a, i64 b) { return (i64)((u64)a - (u64)b); }
__device__ __forceinline__ u32 sub_(u32 a, u32 b) { return a - b; }
__device__ __forceinline__ float mul_(float a, float b) { return a * b; }
__device__ __forceinline__ int mul_(int a, int b) { return (int)((u32)a * (u32)b); }
__device__ __forceinline__ i64 mul_(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
__device__ __forceinline__ u32 mul_(u32 a, u32 b) { return a * b; }
__device__ __forceinline__ float div_(float a, float b) { return a / b; }
__device__ __forceinline__ int div_(int a, int b) {
    return b == 0 ? 0 : (b == -1 ? (int)(0u - (u32)a) : a / b);
}
__device__ __forceinline__ i64 div_(i64 a, i64 b) {
    return b == 0 ? 0 : (b == -1 ? (i64)(0ull - (u64)a) : a / b);
}
__device__ __forceinline__ u32 div_(u32 a, u32 b) { return b == 0 ? 0u : a / b; }
__device__ __forceinline__ float max_(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float min_(float a, float b) { return (a != a || a < b) ? a : b; }
template <typename C> __device__ __forceinline__ C max_(C a, C b) { return a > b ? a : b; }
template <typename C> __device__ __forceinline__ C min_(C a, C b) { return a < b ? a : b; }
__device__ __forceinline__ float neg_(float a) { return -a; }
__device__ __forceinline__ int neg_(int a) { return (int)(0u - (u32)a); }
__device__ __forceinline__ i64 neg_(i64 a) { return (i64)(0ull - (u64)a); }
__device__ __forceinline__ u32 neg_(u32 a) { return 0u - a; }
__device__ __forceinline__ float abs_(float a) { return fabsf(a); }
__device__ __forceinline__ int abs_(int a) { return a < 0 ? neg_(a) : a; }
__device__ __forceinline__ i64 abs_(i64 a) { return a < 0 ? neg_(a) : a; }
__device__ __forceinline__ u32 abs_(u32 a) { return a; }
__device__ __forceinline__ float relu_(float a) { return a < 0.0f ? 0.0f : a; }
__device__ __forceinline__ int relu_(int a) { return a < 0 ? 0 : a; }
__device__ __forceinline__ i64 relu_(i64 a) { return a < 0 ? 0 : a; }
__device__ __forceinline__ u32 relu_(u32 a) { return a; }

// Lim<C>: identities of max/min reductions.
template <typename C> struct Lim;
template <> struct Lim<float> {
    static __device__ __forceinline__ float lowest() { return -F32_INF; }
    static __device__ __forceinline__ float highest() { return F32_INF; }
};
template <> struct Lim<int> {
    static __device__ __forceinline__ int lowest() { return (int)0x80000000u; }
    static __device__ __forceinline__ int highest() { return 0x7fffffff; }
};
template <> struct Lim<i64> {
    static __device__ __forceinline__ i64 lowest() { return (i64)0x8000000000000000ull; }
    static __device__ __forceinline__ i64 highest() { return 0x7fffffffffffffffll; }
};
template <> struct Lim<u32> {
    static __device__ __forceinline__ u32 lowest() { return 0u; }
    static __device__ __forceinline__ u32 highest() { return 255u; }
};

// Reduces `v` over the block (blockDim.x a multiple of 32, at most 1024) with the
// associative `F::combine`; every thread gets the result. `identity` pads unused lanes.
template <typename C, typename F>
__device__ __forceinline__ C block_reduce(C v, C identity) {
    __shared__ C shared[32];
    for (int o = 16; o > 0; o >>= 1) v = F::combine(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shared[lane] : identity;
        for (int o = 16; o > 0; o >>= 1) v = F::combine(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) shared[0] = v;
    }
    __syncthreads();
    return shared[0];
}

struct SumF {
    template <typename C> static __device__ __forceinline__ C combine(C a, C b) { return add_(a, b); }
};
struct MaxF {
    template <typename C> static __device__ __forceinline__ C combine(C a, C b) { return max_(a, b); }
};
struct MinF {
    template <typename C> static __device__ __forceinline__ C combine(C a, C b) { return min_(a, b); }
};
