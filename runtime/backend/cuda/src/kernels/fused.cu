// Kernels of the fused ops (kernels.rs prepends unary.cu, for the activation functors):
// - `bias_act_<act>_<dtype>`: the epilogue of a linear, in place on the GEMM's output
//   y [rows, cols]: y = act(round(y + bias[col])), `act` one of the U_ functors or
//   U_Identity. The sum is rounded to T first, as the separate add op would.
// - `add_layernorm_<dtype>`: layer norm of x + r over the last axis, one block per row
//   (the two passes of layernorm.cu over the sum, itself rounded to T first).
// - `rms_norm_<dtype>`: RMS norm of x (or x + r) over the last axis, one block per row.
// - `gqa_attention_<dtype>`: causal grouped-query attention over a KV cache, a warp per
//   query and head (online softmax).
// - `kv_write_<dtype>` and `kv_attention_<dtype>`: kv-attention's two launches (RoPE of
//   the k rows written with the v rows into each span's caches, then RoPE of each q row
//   and its causal attention over its span's caches), driven by a per-launch table.
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

// One warp's attention of one query and head: `qv` holds the lane's components of the
// query (component lane + 32c in qv[c], 0 past d), k and v are the caches [ctx, kv_heads,
// d], g the query head's kv head; positions 0..=last are attended and the d components
// of the result go to `out_row`. Shared by gqa-attention and kv-attention, so the two
// compute the same bits.
template <typename T>
__device__ __forceinline__ void gqa_attend(const float* qv, const T* __restrict__ k, const T* __restrict__ v,
                                           T* __restrict__ out_row, u64 kv_heads, u64 g, u64 d, u64 last,
                                           float scale, u32 lane) {
    float acc[GQA_MAX_D / 32];
    for (u32 c = 0; c < GQA_MAX_D / 32; ++c) acc[c] = 0.0f;
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
        if (e < d) out_row[e] = Num<T>::store(acc[c] / l);
    }
}

template <typename T>
__device__ __forceinline__ void gqa_attention_warps(const T* __restrict__ q, const T* __restrict__ k,
                                                    const T* __restrict__ v, T* __restrict__ out, u64 s, u64 heads,
                                                    u64 kv_heads, u64 d, u64 kv_len, float scale) {
    const u32 lane = threadIdx.x & 31u;
    const u64 warps = ((u64)blockDim.x * gridDim.x) >> 5;
    const u64 group = heads / kv_heads;
    for (u64 o = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < s * heads; o += warps) {
        const u64 i = o / heads, h = o % heads;
        float qv[GQA_MAX_D / 32];
        for (u32 c = 0; c < GQA_MAX_D / 32; ++c) {
            const u64 e = lane + 32 * c;
            qv[c] = e < d ? Num<T>::load(q[o * d + e]) : 0.0f;
        }
        gqa_attend<T>(qv, k, v, out + o * d, kv_heads, h / group, d, kv_len - s + i, scale, lane);
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

// kv-attention over a table uploaded per launch (`ops/kv.rs`, `KvTable`): per span
// KV_SPAN_WORDS words (its k cache and v cache device pointers, its position, its first
// row), then per row of q, k and v the index of its span. Row r of span s is the
// sequence's position position_s + (r - first_s); its caches are [ctx_s, kv_heads, d].
#define KV_SPAN_WORDS 4

// The angle of rope.cu's pair i of a head of d at sequence index j after `offset`, in
// double, its cos and sin rounded to float: the bits of `rope_pairs` with that offset.
__device__ __forceinline__ void kv_rope_angle(u64 i, u64 d, u64 offset, u64 j, float base, float& c, float& sn) {
    const double theta = ((double)offset + (double)j) * pow((double)base, -2.0 * (double)i / (double)d);
    c = (float)cos(theta);
    sn = (float)sin(theta);
}

// Launch 1, one thread per pair of k (grid-stride): the pair turned as `rope` turns it at
// the row's position goes into the span's k cache at that position, the same pair of v
// unchanged into its v cache. k and v are [n, kv_heads, d].
template <typename T>
__device__ __forceinline__ void kv_write_pairs(const T* __restrict__ k, const T* __restrict__ v,
                                               const u64* __restrict__ table, u64 spans, u64 pairs, u64 kv_heads,
                                               u64 d, float base) {
    const u64* row_span = table + KV_SPAN_WORDS * spans;
    const u64 row_len = kv_heads * d;
    GRID_LOOP(p, pairs) {
        const u64 e = 2 * p;
        const u64 r = e / row_len, within = e % row_len;
        const u64* span = table + KV_SPAN_WORDS * row_span[r];
        T* kc = (T*)span[0];
        T* vc = (T*)span[1];
        const u64 position = span[2], j = r - span[3];
        const u64 at = (position + j) * row_len + within;
        float c, sn;
        kv_rope_angle((e % d) / 2, d, position, j, base, c, sn);
        const float x0 = Num<T>::load(k[e]), x1 = Num<T>::load(k[e + 1]);
        kc[at] = Num<T>::store(x0 * c - x1 * sn);
        kc[at + 1] = Num<T>::store(x0 * sn + x1 * c);
        vc[at] = v[e];
        vc[at + 1] = v[e + 1];
    }
}

// Launch 2, one warp per (row, head) of q [n, heads, d]: each lane turns its components
// of the query as `rope` does (the pair's two elements read from q) and rounds them to T,
// as the chain stores the turned q; then the query attends causally over the first
// position + 1 positions of its span's caches, which launch 1 has written.
template <typename T>
__device__ __forceinline__ void kv_attention_warps(const T* __restrict__ q, T* __restrict__ out,
                                                   const u64* __restrict__ table, u64 spans, u64 n, u64 heads,
                                                   u64 kv_heads, u64 d, float base, float scale) {
    const u32 lane = threadIdx.x & 31u;
    const u64 warps = ((u64)blockDim.x * gridDim.x) >> 5;
    const u64 group = heads / kv_heads;
    const u64* row_span = table + KV_SPAN_WORDS * spans;
    for (u64 o = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < n * heads; o += warps) {
        const u64 r = o / heads, h = o % heads;
        const u64* span = table + KV_SPAN_WORDS * row_span[r];
        const T* kc = (const T*)span[0];
        const T* vc = (const T*)span[1];
        const u64 position = span[2], j = r - span[3];
        float qv[GQA_MAX_D / 32];
        for (u32 c = 0; c < GQA_MAX_D / 32; ++c) {
            const u64 e = lane + 32 * c;
            qv[c] = 0.0f;
            if (e < d) {
                const u64 e0 = e & ~1ull;
                float cs, sn;
                kv_rope_angle(e0 / 2, d, position, j, base, cs, sn);
                const float x0 = Num<T>::load(q[o * d + e0]), x1 = Num<T>::load(q[o * d + e0 + 1]);
                const float y0 = x0 * cs - x1 * sn, y1 = x0 * sn + x1 * cs;
                qv[c] = round_to<T>((e & 1) ? y1 : y0);
            }
        }
        gqa_attend<T>(qv, kc, vc, out + o * d, kv_heads, h / group, d, position + j, scale, lane);
    }
}

#define KV_WRITE(NAME, T) \
    extern "C" __global__ void NAME(const T* k, const T* v, const u64* table, u64 spans, u64 pairs, u64 kv_heads, \
                                    u64 d, float base) { \
        kv_write_pairs<T>(k, v, table, spans, pairs, kv_heads, d, base); \
    }
#define KV_ATTENTION(NAME, T) \
    extern "C" __global__ void NAME(const T* q, T* out, const u64* table, u64 spans, u64 n, u64 heads, u64 kv_heads, \
                                    u64 d, float base, float scale) { \
        kv_attention_warps<T>(q, out, table, spans, n, heads, kv_heads, d, base, scale); \
    }
