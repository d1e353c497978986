// Dtype conversion: symbols `cast_<from>_<to>` for every pair, with Rust `as` semantics:
// float -> int truncates toward zero and saturates (NaN -> 0); int -> int wraps or
// sign-extends; to f16/bf16 rounds to nearest even once (integers via round-to-odd f32).

__device__ __forceinline__ int f2i32(float f) {
    if (f != f) return 0;
    if (f >= 2147483648.0f) return 0x7fffffff;
    if (f <= -2147483648.0f) return (int)0x80000000u;
    return (int)f;
}
__device__ __forceinline__ i64 f2i64(float f) {
    if (f != f) return 0;
    if (f >= 9223372036854775808.0f) return 0x7fffffffffffffffll;
    if (f <= -9223372036854775808.0f) return (i64)0x8000000000000000ull;
    return (i64)f;
}
__device__ __forceinline__ u8 f2u8(float f) {
    if (!(f > 0.0f)) return 0;
    if (f >= 255.0f) return 255;
    return (u8)(u32)f;
}

// An integer as f32 rounded to odd: exact to 24 bits with a sticky last bit, so a
// following round-to-nearest to f16/bf16 equals rounding the integer directly.
template <typename I> __device__ __forceinline__ float round_odd_f32(I v) {
    const double d = (double)v;
    float f = __double2float_rz(d);
    if ((double)f != d) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}

template <typename TO> struct CastTo;
template <> struct CastTo<float> {
    static __device__ __forceinline__ float from_f(float f) { return f; }
    template <typename I> static __device__ __forceinline__ float from_i(I v) { return (float)v; }
};
template <> struct CastTo<f16_t> {
    static __device__ __forceinline__ f16_t from_f(float f) { return f32_to_f16(f); }
    template <typename I> static __device__ __forceinline__ f16_t from_i(I v) { return f32_to_f16(round_odd_f32(v)); }
};
template <> struct CastTo<bf16_t> {
    static __device__ __forceinline__ bf16_t from_f(float f) { return f32_to_bf16(f); }
    template <typename I> static __device__ __forceinline__ bf16_t from_i(I v) { return f32_to_bf16(round_odd_f32(v)); }
};
template <> struct CastTo<int> {
    static __device__ __forceinline__ int from_f(float f) { return f2i32(f); }
    template <typename I> static __device__ __forceinline__ int from_i(I v) { return (int)(u32)(u64)(i64)v; }
};
template <> struct CastTo<i64> {
    static __device__ __forceinline__ i64 from_f(float f) { return f2i64(f); }
    template <typename I> static __device__ __forceinline__ i64 from_i(I v) { return (i64)v; }
};
template <> struct CastTo<u8> {
    static __device__ __forceinline__ u8 from_f(float f) { return f2u8(f); }
    template <typename I> static __device__ __forceinline__ u8 from_i(I v) { return (u8)(u64)(i64)v; }
};

template <typename TI> struct CastFrom {
    // Integers: convert the value itself.
    template <typename TO> static __device__ __forceinline__ TO to(TI v) { return CastTo<TO>::from_i(v); }
};
template <> struct CastFrom<float> {
    template <typename TO> static __device__ __forceinline__ TO to(float v) { return CastTo<TO>::from_f(v); }
};
template <> struct CastFrom<f16_t> {
    template <typename TO> static __device__ __forceinline__ TO to(f16_t v) { return CastTo<TO>::from_f(f16_to_f32(v)); }
};
template <> struct CastFrom<bf16_t> {
    template <typename TO> static __device__ __forceinline__ TO to(bf16_t v) { return CastTo<TO>::from_f(bf16_to_f32(v)); }
};

#define CAST(NAME, TI, TO) \
    extern "C" __global__ void NAME(const TI* __restrict__ x, TO* __restrict__ y, u64 n) { \
        GRID_LOOP(i, n) { y[i] = CastFrom<TI>::template to<TO>(x[i]); } \
    }
