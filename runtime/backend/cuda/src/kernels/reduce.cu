// Reductions of one axis. The input is viewed as [outer, len, inner] with `len` the
// reduced axis and the output as [outer, inner].
// - `reduce_<op>_<dtype>`: one thread per output, walking the axis (inner > 1).
// - `reduce_rows_<op>_<dtype>`: one block per output row (inner == 1), block reduction.
// Floats accumulate in f32, integer sums wrap; float max/min propagate NaN.

template <typename C> struct R_Sum {
    static __device__ __forceinline__ C init() { return (C)0; }
    static __device__ __forceinline__ C combine(C a, C b) { return add_(a, b); }
    static __device__ __forceinline__ C finish(C a, u64) { return a; }
};
template <typename C> struct R_Mean {
    static __device__ __forceinline__ C init() { return (C)0; }
    static __device__ __forceinline__ C combine(C a, C b) { return add_(a, b); }
    static __device__ __forceinline__ C finish(C a, u64 len) { return a / (float)len; }
};
template <typename C> struct R_Max {
    static __device__ __forceinline__ C init() { return Lim<C>::lowest(); }
    static __device__ __forceinline__ C combine(C a, C b) { return max_(a, b); }
    static __device__ __forceinline__ C finish(C a, u64) { return a; }
};
template <typename C> struct R_Min {
    static __device__ __forceinline__ C init() { return Lim<C>::highest(); }
    static __device__ __forceinline__ C combine(C a, C b) { return min_(a, b); }
    static __device__ __forceinline__ C finish(C a, u64) { return a; }
};

template <typename T, template <typename> class R>
__device__ __forceinline__ void reduce_cols(const T* __restrict__ x, T* __restrict__ out, u64 outer, u64 len, u64 inner) {
    typedef typename Num<T>::C C;
    GRID_LOOP(i, outer * inner) {
        const u64 o = i / inner, j = i % inner;
        const T* p = x + o * len * inner + j;
        C acc = R<C>::init();
        for (u64 k = 0; k < len; ++k) acc = R<C>::combine(acc, Num<T>::load(p[k * inner]));
        out[i] = Num<T>::store(R<C>::finish(acc, len));
    }
}

template <typename T, template <typename> class R>
__device__ __forceinline__ void reduce_rows(const T* __restrict__ x, T* __restrict__ out, u64 rows, u64 len) {
    typedef typename Num<T>::C C;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* p = x + row * len;
        C acc = R<C>::init();
        for (u64 k = threadIdx.x; k < len; k += blockDim.x) acc = R<C>::combine(acc, Num<T>::load(p[k]));
        acc = block_reduce<C, R<C> >(acc, R<C>::init());
        if (threadIdx.x == 0) out[row] = Num<T>::store(R<C>::finish(acc, len));
    }
}

#define REDUCE(COLS, ROWS, R, T) \
    extern "C" __global__ void COLS(const T* x, T* out, u64 outer, u64 len, u64 inner) { reduce_cols<T, R>(x, out, outer, len, inner); } \
    extern "C" __global__ void __launch_bounds__(ROW_THREADS) ROWS(const T* x, T* out, u64 rows, u64 len) { reduce_rows<T, R>(x, out, rows, len); }

// argmax_<dtype>: one block per row (the last axis), the index of its largest element
// as int: the first NaN if any, else the first of the largest (as the CPU backend).
__device__ __forceinline__ bool argmax_better(float v, u32 i, float bv, u32 bi) {
    if (i == 0xffffffffu) return false;
    if (bi == 0xffffffffu) return true;
    const bool vn = v != v, bn = bv != bv;
    if (vn != bn) return vn;
    if (vn) return i < bi;
    return v > bv || (v == bv && i < bi);
}

template <typename T>
__device__ __forceinline__ void argmax_rows(const T* __restrict__ x, int* __restrict__ out, u64 rows, u64 len) {
    __shared__ float sv[32];
    __shared__ u32 si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        float bv = 0.0f;
        u32 bi = 0xffffffffu;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const float v = Num<T>::load(x[row * len + j]);
            if (argmax_better(v, (u32)j, bv, bi)) { bv = v; bi = (u32)j; }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const u32 oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (argmax_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        __syncthreads();
        if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
        __syncthreads();
        if (warp == 0) {
            bv = lane < warps ? sv[lane] : 0.0f;
            bi = lane < warps ? si[lane] : 0xffffffffu;
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                const u32 oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (argmax_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
            }
            if (lane == 0) out[row] = (int)bi;
        }
    }
}

#define ARGMAX(NAME, T) \
    extern "C" __global__ void __launch_bounds__(ROW_THREADS) NAME(const T* x, int* out, u64 rows, u64 len) { \
        argmax_rows<T>(x, out, rows, len); \
    }

// sample_f32: one thread per row of f32 logits draws a token by the algorithm of the WIT
// `sample-args`, step for step as the CPU backend's `reduce::sample_row` (sums in f64 in
// index order, thresholds by bisection over ordered bit patterns).
__device__ __forceinline__ u32 sample_key(float f) {
    const u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float sample_logit(const float* l, u64 i) {
    const float v = l[i];
    return v != v ? -F32_INF : v;
}

__device__ __forceinline__ float sample_weight(const float* l, u64 i, float m, float t, u32 top_k) {
    const float v = sample_logit(l, i);
    return sample_key(v) >= top_k ? expf((v - m) / t) : 0.0f;
}

extern "C" __global__ void sample_f32(const float* x, int* out, u64 rows, u64 len, float temperature, u32 k,
                                      float top_p, u64 seed) {
    const u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* l = x + r * len;
    float m = -F32_INF;
    for (u64 i = 0; i < len; i++) { const float v = sample_logit(l, i); if (v > m) m = v; }
    if (m == -F32_INF) { out[r] = 0; return; }
    u32 top_k = 0;
    if (k > 0 && (u64)k < len) {
        u32 lo = 0, hi = 0xffffffffu;
        while (lo < hi) {
            const u32 mid = lo + (u32)(((u64)(hi - lo) + 1) / 2);
            u64 count = 0;
            for (u64 i = 0; i < len; i++) count += sample_key(sample_logit(l, i)) >= mid;
            if (count >= k) lo = mid; else hi = mid - 1;
        }
        top_k = lo;
    }
    double total = 0.0;
    for (u64 i = 0; i < len; i++) total += (double)sample_weight(l, i, m, temperature, top_k);
    u32 nucleus = 0;
    if (top_p < 1.0f) {
        const double need = (double)top_p * total;
        u32 lo = 0, hi = 0xffffffffu;
        while (lo < hi) {
            const u32 mid = lo + (u32)(((u64)(hi - lo) + 1) / 2);
            double sum = 0.0;
            for (u64 i = 0; i < len; i++) {
                const float w = sample_weight(l, i, m, temperature, top_k);
                if (sample_key(w) >= mid) sum += (double)w;
            }
            if (sum >= need) lo = mid; else hi = mid - 1;
        }
        nucleus = lo;
    }
    double mass = 0.0;
    for (u64 i = 0; i < len; i++) {
        const float w = sample_weight(l, i, m, temperature, top_k);
        if (w > 0.0f && sample_key(w) >= nucleus) mass += (double)w;
    }
    const u64 golden = 0x9e3779b97f4a7c15ull;
    u64 z = seed + (r + 1) * golden + golden;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const double target = (double)(z >> 11) * (1.0 / 9007199254740992.0) * mass;
    double acc = 0.0;
    u64 last = 0;
    for (u64 i = 0; i < len; i++) {
        const float w = sample_weight(l, i, m, temperature, top_k);
        if (w > 0.0f && sample_key(w) >= nucleus) {
            acc += (double)w;
            last = i;
            if (acc > target) { out[r] = (int)i; return; }
        }
    }
    out[r] = (int)last;
}
