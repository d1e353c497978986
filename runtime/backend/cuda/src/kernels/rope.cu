// Rotary position embedding, llama.cpp's "normal" layout (adjacent pairs): symbols
// `rope_<dtype>`. x is [..., s, heads, d]; the pair (2i, 2i + 1) of sequence index j
// turns by (offset + j) * base^(-2i/d), its cos and sin taken in double and rounded to
// float, as the CPU backend does. One thread per pair, grid-stride.

template <typename T>
__device__ __forceinline__ void rope_pairs(const T* __restrict__ x, T* __restrict__ y, u64 pairs, u64 s, u64 heads,
                                           u64 d, float base, u32 offset) {
    GRID_LOOP(q, pairs) {
        const u64 e = 2 * q;
        const u64 i = (e % d) / 2;
        const u64 j = (e / d / heads) % s;
        const double theta = ((double)offset + (double)j) * pow((double)base, -2.0 * (double)i / (double)d);
        const float c = (float)cos(theta), sn = (float)sin(theta);
        const float x0 = Num<T>::load(x[e]), x1 = Num<T>::load(x[e + 1]);
        y[e] = Num<T>::store(x0 * c - x1 * sn);
        y[e + 1] = Num<T>::store(x0 * sn + x1 * c);
    }
}

#define ROPE(NAME, T) \
    extern "C" __global__ void NAME(const T* x, T* y, u64 pairs, u64 s, u64 heads, u64 d, float base, u32 offset) { \
        rope_pairs<T>(x, y, pairs, s, heads, d, base, offset); \
    }
