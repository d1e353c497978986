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
