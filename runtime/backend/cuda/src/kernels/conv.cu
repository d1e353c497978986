// Convolution helpers; the product itself is a cuBLAS GEMM (see gemm.rs).
// - `im2col_<dtype>`: x [n, c, h, w] -> col [n, c*kh*kw, oh*ow], zero where the window
//   reads padding.
// - `bias_fill_<dtype>`: out[i] = bias[(i / l) % o], so the GEMM can add into it (beta 1)
//   and the result is rounded once.

// Must match `ops::conv::ConvGeom` in Rust.
struct ConvGeom {
    u32 c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, pad;
};

template <typename T>
__device__ __forceinline__ void im2col(const T* __restrict__ x, T* __restrict__ col, u64 n_images, ConvGeom g) {
    const u64 l = (u64)g.oh * g.ow, kk = (u64)g.kh * g.kw, ck = (u64)g.c * kk;
    GRID_LOOP(i, n_images * ck * l) {
        const u64 p = i % l, row = (i / l) % ck, img = i / (l * ck);
        const u64 ch = row / kk, r = row % kk;
        const long long iy = (long long)((p / g.ow) * g.sh) - g.ph + (long long)((r / g.kw) * g.dh);
        const long long ix = (long long)((p % g.ow) * g.sw) - g.pw + (long long)((r % g.kw) * g.dw);
        T v = T();
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) v = x[((img * g.c + ch) * g.h + iy) * g.w + ix];
        col[i] = v;
    }
}

#define IM2COL(NAME, T) \
    extern "C" __global__ void NAME(const T* x, T* col, u64 n_images, ConvGeom g) { im2col<T>(x, col, n_images, g); }
#define BIAS_FILL(NAME, T) \
    extern "C" __global__ void NAME(const T* bias, T* out, u64 total, u64 o, u64 l) { \
        GRID_LOOP(i, total) { out[i] = bias[(i / l) % o]; } \
    }
