// Block-quantized weights (ggml Q4_1 and Q8_0; `DType::Q4_1` in host-api describes the
// layouts), dequantized on the fly: the linear y = x · Wᵀ, the embedding gather from a
// quantized table and the dequantizing cast to f32.
//
// The linear multiplies the weights with the activations quantized to Q8 blocks, as the
// CPU backend does (its `q8.rs`): per block of 32, d = max|x| / 127 (NaN when the block
// holds a NaN or an infinity) and q = rint(x / d) computed as rint(x · (1 / d)), so the
// two backends quantize to the same bytes. `q8_activations` writes the values d · q that
// `qlinear` then reads as x.
//
// Blocks are read byte by byte (a block's f16 scale sits at any 2-byte offset, so no
// wider loads). The linear gives each output element y[i, j] one warp: lane l reads
// element l of every block of weight row j and of x row i, and the warp sums its 32
// partial sums with shuffles; warps walk the outputs grid-stride, every lane of a warp
// together, so the full-mask shuffles always see all 32 lanes.

__device__ __forceinline__ float q_f16(const u8* p) {
    f16_t h;
    h.bits = (unsigned short)((u32)p[0] | ((u32)p[1] << 8));
    return f16_to_f32(h);
}

// Q4_1: f16 d, f16 m, 16 bytes of nibbles (element j low nibble of byte j, element
// j + 16 its high nibble); value = d * q + m.
struct Q4_1 {
    static const u32 BYTES = 20;
    static __device__ __forceinline__ float at(const u8* b, u32 j) {
        const u32 q = b[4 + (j & 15u)];
        return q_f16(b) * (float)(j < 16u ? (q & 15u) : (q >> 4)) + q_f16(b + 2);
    }
};

// Q8_0: f16 d, 32 signed bytes; value = d * q.
struct Q8_0 {
    static const u32 BYTES = 34;
    static __device__ __forceinline__ float at(const u8* b, u32 j) {
        return q_f16(b) * (float)(signed char)b[2 + j];
    }
};

template <typename Q>
__device__ __forceinline__ void qlinear(const float* __restrict__ x, const u8* __restrict__ w, float* __restrict__ y,
                                        u64 m, u64 n, u64 k) {
    const u64 blocks = k / 32;
    const u32 lane = threadIdx.x & 31u;
    const u64 warps = ((u64)blockDim.x * gridDim.x) >> 5;
    for (u64 o = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < m * n; o += warps) {
        const u64 i = o / n, j = o % n;
        const u8* row = w + j * blocks * Q::BYTES;
        const float* xr = x + i * k;
        float acc = 0.0f;
        for (u64 b = 0; b < blocks; ++b) acc += Q::at(row + b * Q::BYTES, lane) * xr[b * 32 + lane];
        for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
        if (lane == 0) y[o] = acc;
    }
}

// One warp per block of 32 activations: its largest magnitude and its non-finite flag
// (x - x is 0, or NaN for a NaN or an infinity) by shuffles, then d · q per element.
__device__ __forceinline__ void q8_round(const float* __restrict__ x, float* __restrict__ out, u64 blocks) {
    const u32 lane = threadIdx.x & 31u;
    const u64 warps = ((u64)blockDim.x * gridDim.x) >> 5;
    for (u64 b = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; b < blocks; b += warps) {
        const float v = x[b * 32 + lane];
        float amax = fabsf(v), bad = v - v;
        for (int s = 16; s > 0; s >>= 1) {
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, s));
            bad += __shfl_xor_sync(0xffffffffu, bad, s);
        }
        const float d = bad + amax / 127.0f;
        const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
        out[b * 32 + lane] = d * rintf(v * inverse);
    }
}

template <typename Q>
__device__ __forceinline__ void dequant(const u8* __restrict__ w, float* __restrict__ out, u64 n) {
    GRID_LOOP(i, n) { out[i] = Q::at(w + (i / 32) * Q::BYTES, (u32)(i % 32)); }
}

// Rows of the [vocab, dim] table by id, as embedding_gather does (an id outside the
// table sets the fault words and writes zeros).
template <typename Q, typename I>
__device__ __forceinline__ void qembedding(const u8* __restrict__ table, const I* __restrict__ ids,
                                           float* __restrict__ out, u64 n_ids, u64 dim, u64 vocab, u64* fault) {
    GRID_LOOP(i, n_ids * dim) {
        const u64 r = i / dim, c = i % dim;
        const i64 id = (i64)ids[r];
        const bool in_range = id >= 0 && (u64)id < vocab;
        if (!in_range && c == 0) {
            fault[1] = (u64)id;
            fault[0] = FAULT_EMBEDDING_ID;
        }
        const u64 e = in_range ? (u64)id * dim + c : 0;
        out[i] = in_range ? Q::at(table + (e / 32) * Q::BYTES, (u32)(e % 32)) : 0.0f;
    }
}

#define QLINEAR(NAME, Q) \
    extern "C" __global__ void NAME(const float* x, const u8* w, float* y, u64 m, u64 n, u64 k) { \
        qlinear<Q>(x, w, y, m, n, k); \
    }
#define Q8_ACTIVATIONS(NAME) \
    extern "C" __global__ void NAME(const float* x, float* out, u64 blocks) { q8_round(x, out, blocks); }
#define DEQUANT(NAME, Q) \
    extern "C" __global__ void NAME(const u8* w, float* out, u64 n) { dequant<Q>(w, out, n); }
#define QEMBEDDING(NAME, Q, I) \
    extern "C" __global__ void NAME(const u8* table, const I* ids, float* out, u64 n_ids, u64 dim, u64 vocab, \
                                    u64* fault) { \
        qembedding<Q, I>(table, ids, out, n_ids, dim, vocab, fault); \
    }
