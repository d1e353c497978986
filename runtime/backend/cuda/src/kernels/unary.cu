// Elementwise unary ops and affine: symbols `<op>_<dtype>` (relu_f32, gelu_bf16, neg_i64,
// affine_f16, ...). Inputs and outputs are contiguous; one grid-stride loop.

struct U_Relu { template <typename C> static __device__ __forceinline__ C apply(C v) { return relu_(v); } };
struct U_Neg { template <typename C> static __device__ __forceinline__ C apply(C v) { return neg_(v); } };
struct U_Abs { template <typename C> static __device__ __forceinline__ C apply(C v) { return abs_(v); } };
// Exact GELU via erfc, accurate for negative x.
struct U_Gelu { static __device__ __forceinline__ float apply(float v) { return 0.5f * v * erfcf(-v * 0.70710678118654752f); } };
// tanh GELU written as x * sigmoid(2u) to avoid cancellation for negative x.
struct U_GeluTanh {
    static __device__ __forceinline__ float apply(float v) {
        float u = 0.79788456080286536f * (v + 0.044715f * v * v * v);
        return v / (1.0f + expf(-2.0f * u));
    }
};
struct U_Tanh { static __device__ __forceinline__ float apply(float v) { return tanhf(v); } };
struct U_Sigmoid { static __device__ __forceinline__ float apply(float v) { return 1.0f / (1.0f + expf(-v)); } };
struct U_Exp { static __device__ __forceinline__ float apply(float v) { return expf(v); } };
struct U_Log { static __device__ __forceinline__ float apply(float v) { return logf(v); } };
struct U_Sqrt { static __device__ __forceinline__ float apply(float v) { return sqrtf(v); } };
// SiLU as x / (1 + e^-x); -inf gives -0 (the limit), as the CPU backend does.
struct U_Silu {
    static __device__ __forceinline__ float apply(float v) { return v == -F32_INF ? -0.0f : v / (1.0f + expf(-v)); }
};
struct U_Rsqrt { static __device__ __forceinline__ float apply(float v) { return 1.0f / sqrtf(v); } };

template <typename T, typename F>
__device__ __forceinline__ void unary_map(const T* __restrict__ x, T* __restrict__ y, u64 n) {
    GRID_LOOP(i, n) { y[i] = Num<T>::store(F::apply(Num<T>::load(x[i]))); }
}

template <typename T>
__device__ __forceinline__ void affine_map(const T* __restrict__ x, T* __restrict__ y, u64 n, float scale, float bias) {
    GRID_LOOP(i, n) { y[i] = Num<T>::store(fmaf(Num<T>::load(x[i]), scale, bias)); }
}

#define UNARY(NAME, F, T) \
    extern "C" __global__ void NAME(const T* x, T* y, u64 n) { unary_map<T, F>(x, y, n); }
#define AFFINE(NAME, T) \
    extern "C" __global__ void NAME(const T* x, T* y, u64 n, float scale, float bias) { affine_map<T>(x, y, n, scale, bias); }
