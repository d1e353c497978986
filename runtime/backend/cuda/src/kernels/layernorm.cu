// Layer norm over the last axis: symbols `layernorm_<dtype>`. One block per row;
// mean, then the biased variance of (x - mean) (two passes, f32), then
// (x - mean) / sqrt(var + eps) * gamma + beta.

template <typename T>
__device__ __forceinline__ void layernorm_rows(const T* __restrict__ x, const T* __restrict__ gamma,
                                               const T* __restrict__ beta, T* __restrict__ out, u64 rows, u64 len,
                                               float eps) {
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* p = x + row * len;
        float s = 0.0f;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) s += Num<T>::load(p[j]);
        const float mean = block_reduce<float, SumF>(s, 0.0f) / (float)len;
        float q = 0.0f;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const float d = Num<T>::load(p[j]) - mean;
            q += d * d;
        }
        const float var = block_reduce<float, SumF>(q, 0.0f) / (float)len;
        const float rstd = 1.0f / sqrtf(var + eps);
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const float v = (Num<T>::load(p[j]) - mean) * rstd;
            out[row * len + j] = Num<T>::store(v * Num<T>::load(gamma[j]) + Num<T>::load(beta[j]));
        }
    }
}

#define LAYERNORM(NAME, T) \
    extern "C" __global__ void __launch_bounds__(ROW_THREADS) NAME(const T* x, const T* gamma, const T* beta, T* out, u64 rows, u64 len, float eps) { \
        layernorm_rows<T>(x, gamma, beta, out, rows, len, eps); \
    }
