// Kernels of the fused ops (kernels.rs prepends unary.cu, for the activation functors):
// - `bias_act_<act>_<dtype>`: the epilogue of a linear, in place on the GEMM's output
//   y [rows, cols]: y = act(round(y + bias[col])), `act` one of the U_ functors or
//   U_Identity. The sum is rounded to T first, as the separate add op would.
// - `add_layernorm_<dtype>`: layer norm of x + r over the last axis, one block per row
//   (the two passes of layernorm.cu over the sum, itself rounded to T first).
// - `rms_norm_<dtype>`: RMS norm of x (or x + r) over the last axis, one block per row.
// - `gqa_attention_<dtype>`: causal grouped-query attention over a KV cache, a warp per
//   query and head (online softmax).
// Attention needs no kernel of its own: two cuBLAS GEMMs around softmax.cu's kernel.

struct U_Identity { static __device__ __forceinline__ float apply(float v) { return v; } };

template <typename T>
__device__ __forceinline__ float round_to(float v) {
    return Num<T>::load(Num<T>::store(v));
}

template <typename T, typename F>
__device__ __forceinline__ void bias_act(T* y, const T* __restrict__ bias, u64 n, u64 cols, int has_bias) {
    GRID_LOOP(i, n) {
        float v = Num<T>::load(y[i]);
        if (has_bias) v = round_to<T>(v + Num<T>::load(bias[i % cols]));
        y[i] = Num<T>::store(F::apply(v));
    }
}

template <typename T>
__device__ __forceinline__ float residual_sum(const T* __restrict__ x, const T* __restrict__ r, u64 i) {
    return round_to<T>(Num<T>::load(x[i]) + Num<T>::load(r[i]));
}

template <typename T>
__device__ __forceinline__ void add_layernorm_rows(const T* __restrict__ x, const T* __restrict__ r,
                                                   const T* __restrict__ gamma, const T* __restrict__ beta,
                                                   T* __restrict__ out, u64 rows, u64 len, float eps) {
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 base = row * len;
        float s = 0.0f;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) s += residual_sum(x, r, base + j);
        const float mean = block_reduce<float, SumF>(s, 0.0f) / (float)len;
        float q = 0.0f;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const float d = residual_sum(x, r, base + j) - mean;
            q += d * d;
        }
        const float var = block_reduce<float, SumF>(q, 0.0f) / (float)len;
        const float rstd = 1.0f / sqrtf(var + eps);
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const float v = (residual_sum(x, r, base + j) - mean) * rstd;
            out[base + j] = Num<T>::store(v * Num<T>::load(gamma[j]) + Num<T>::load(beta[j]));
        }
    }
}

// RMS norm of x (or of x + r, rounded to T first) over the last axis, times w: one
// block per row, the mean of the squares in f32.
template <typename T>
__device__ __forceinline__ void rms_norm_rows(const T* __restrict__ x, const T* __restrict__ r,
                                              const T* __restrict__ w, T* __restrict__ out, u64 rows, u64 len,
                                              float eps, int has_r) {
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 base = row * len;
        float q = 0.0f;
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const float v = has_r ? residual_sum(x, r, base + j) : Num<T>::load(x[base + j]);
            q += v * v;
        }
        const float scale = 1.0f / sqrtf(block_reduce<float, SumF>(q, 0.0f) / (float)len + eps);
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) {
            const float v = has_r ? residual_sum(x, r, base + j) : Num<T>::load(x[base + j]);
            out[base + j] = Num<T>::store(v * scale * Num<T>::load(w[j]));
        }
    }
}

#define RMS_NORM(NAME, T) \
    extern "C" __global__ void __launch_bounds__(ROW_THREADS) NAME(const T* x, const T* r, const T* w, T* out, u64 rows, \
                                                                   u64 len, float eps, int has_r) { \
        rms_norm_rows<T>(x, r, w, out, rows, len, eps, has_r); \
    }
// Causal grouped-query attention over a KV cache: one warp per (query i, head h), the
// lanes splitting the head's d components (at most GQA_MAX_D, 8 a lane); positions are
// walked in order with an online softmax (running max, rescaled sum and accumulator),
// each score a warp-reduced dot product. q [s, heads, d], k and v [ctx, kv_heads, d].
#define GQA_MAX_D 256
template <typename T>
__device__ __forceinline__ void gqa_attention_warps(const T* __restrict__ q, const T* __restrict__ k,
                                                    const T* __restrict__ v, T* __restrict__ out, u64 s, u64 heads,
                                                    u64 kv_heads, u64 d, u64 kv_len, float scale) {
    const u32 lane = threadIdx.x & 31u;
    const u64 warps = ((u64)blockDim.x * gridDim.x) >> 5;
    const u64 group = heads / kv_heads;
    for (u64 o = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < s * heads; o += warps) {
        const u64 i = o / heads, h = o % heads, g = h / group;
        const u64 last = kv_len - s + i;
        float qv[GQA_MAX_D / 32], acc[GQA_MAX_D / 32];
        for (u32 c = 0; c < GQA_MAX_D / 32; ++c) {
            const u64 e = lane + 32 * c;
            qv[c] = e < d ? Num<T>::load(q[o * d + e]) : 0.0f;
            acc[c] = 0.0f;
        }
        float m = -F32_INF, l = 0.0f;
        for (u64 j = 0; j <= last; ++j) {
            const u64 base = (j * kv_heads + g) * d;
            float part = 0.0f;
            for (u32 c = 0; c < GQA_MAX_D / 32; ++c) {
                const u64 e = lane + 32 * c;
                if (e < d) part += qv[c] * Num<T>::load(k[base + e]);
            }
            for (int w = 16; w > 0; w >>= 1) part += __shfl_xor_sync(0xffffffffu, part, w);
            const float score = part * scale;
            const float m_new = max_(m, score);
            const float corr = expf(m - m_new), p = expf(score - m_new);
            l = l * corr + p;
            for (u32 c = 0; c < GQA_MAX_D / 32; ++c) {
                const u64 e = lane + 32 * c;
                acc[c] = acc[c] * corr + (e < d ? p * Num<T>::load(v[base + e]) : 0.0f);
            }
            m = m_new;
        }
        for (u32 c = 0; c < GQA_MAX_D / 32; ++c) {
            const u64 e = lane + 32 * c;
            if (e < d) out[o * d + e] = Num<T>::store(acc[c] / l);
        }
    }
}

#define GQA_ATTENTION(NAME, T) \
    extern "C" __global__ void NAME(const T* q, const T* k, const T* v, T* out, u64 s, u64 heads, u64 kv_heads, u64 d, \
                                    u64 kv_len, float scale) { \
        gqa_attention_warps<T>(q, k, v, out, s, heads, kv_heads, d, kv_len, scale); \
    }
#define BIAS_ACT(NAME, F, T) \
    extern "C" __global__ void NAME(T* y, const T* bias, u64 n, u64 cols, int has_bias) { \
        bias_act<T, F>(y, bias, n, cols, has_bias); \
    }
#define ADD_LAYERNORM(NAME, T) \
    extern "C" __global__ void __launch_bounds__(ROW_THREADS) NAME(const T* x, const T* r, const T* gamma, const T* beta, T* out, u64 rows, \
                                    u64 len, float eps) { \
        add_layernorm_rows<T>(x, r, gamma, beta, out, rows, len, eps); \
    }
