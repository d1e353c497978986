// 2-D pooling, NCHW, one thread per output element: `max_pool2d_<dtype>` (padding is
// ignored, NaN propagates) and `avg_pool2d_<dtype>` (padding counts as zero and is in
// the divisor).

// Must match `ops::conv::PoolGeom` in Rust.
struct PoolGeom {
    u32 h, w, kh, kw, oh, ow, sh, sw, ph, pw;
};

template <typename T, bool MAX>
__device__ __forceinline__ void pool2d(const T* __restrict__ x, T* __restrict__ out, u64 total, PoolGeom g) {
    GRID_LOOP(i, total) {
        const u64 ox = i % g.ow, oy = (i / g.ow) % g.oh, nc = i / ((u64)g.ow * g.oh);
        const T* plane = x + nc * g.h * g.w;
        float acc = MAX ? -F32_INF : 0.0f;
        for (u32 ky = 0; ky < g.kh; ++ky) {
            const long long iy = (long long)(oy * g.sh) - g.ph + ky;
            if (iy < 0 || iy >= g.h) continue;
            for (u32 kx = 0; kx < g.kw; ++kx) {
                const long long ix = (long long)(ox * g.sw) - g.pw + kx;
                if (ix < 0 || ix >= g.w) continue;
                const float v = Num<T>::load(plane[iy * g.w + ix]);
                acc = MAX ? max_(acc, v) : acc + v;
            }
        }
        out[i] = Num<T>::store(MAX ? acc : acc / (float)(g.kh * g.kw));
    }
}

#define MAX_POOL(NAME, T) \
    extern "C" __global__ void NAME(const T* x, T* out, u64 total, PoolGeom g) { pool2d<T, true>(x, out, total, g); }
#define AVG_POOL(NAME, T) \
    extern "C" __global__ void NAME(const T* x, T* out, u64 total, PoolGeom g) { pool2d<T, false>(x, out, total, g); }
