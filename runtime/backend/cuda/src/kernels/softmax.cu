// Softmax over the last axis of x * scale + mask: symbols `softmax_<dtype>`.
// One block per row (grid-stride over rows). The mask broadcasts to x: `mask_layout`
// maps a flat x index to the mask offset (sa), and `mask_step` is the mask stride of the
// last axis (0 or 1). Computed in f32; a fully masked row (max = -inf) gives zeros.

template <typename T>
__device__ __forceinline__ float softmax_logit(const T* x, const T* mask, u64 xi, u64 mbase, u64 j, u64 mask_step,
                                               float scale, int has_mask) {
    float v = Num<T>::load(x[xi]) * scale;
    if (has_mask) v = v + Num<T>::load(mask[mbase + j * mask_step]);
    return v;
}

template <typename T>
__device__ __forceinline__ void softmax_rows(const T* __restrict__ x, const T* __restrict__ mask, T* __restrict__ out,
                                             u64 rows, u64 len, float scale, Layout mask_layout, u64 mask_step,
                                             int has_mask) {
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 base = row * len;
        u64 mbase = 0, unused;
        if (has_mask) layout_offsets(mask_layout, base, mbase, unused);
        float m = -F32_INF;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x)
            m = max_(m, softmax_logit(x, mask, base + j, mbase, j, mask_step, scale, has_mask));
        m = block_reduce<float, MaxF>(m, -F32_INF);
        if (m == -F32_INF) {
            for (u64 j = threadIdx.x; j < len; j += blockDim.x) out[base + j] = Num<T>::store(0.0f);
            continue;
        }
        float s = 0.0f;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x)
            s += expf(softmax_logit(x, mask, base + j, mbase, j, mask_step, scale, has_mask) - m);
        s = block_reduce<float, SumF>(s, 0.0f);
        const float inv = 1.0f / s;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x)
            out[base + j] = Num<T>::store(expf(softmax_logit(x, mask, base + j, mbase, j, mask_step, scale, has_mask) - m) * inv);
    }
}

#define SOFTMAX(NAME, T) \
    extern "C" __global__ void __launch_bounds__(ROW_THREADS) NAME(const T* x, const T* mask, T* out, u64 rows, u64 len, float scale, \
                                    Layout mask_layout, u64 mask_step, int has_mask) { \
        softmax_rows<T>(x, mask, out, rows, len, scale, mask_layout, mask_step, has_mask); \
    }
