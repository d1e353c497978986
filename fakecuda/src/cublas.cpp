// Fake libcublas: the handful of entry points the backend calls (handle create/destroy,
// stream, workspace, math mode, pointer mode, SM count target and the three GemmEx
// forms), computing a plain reference GEMM on the handle's stream (queued lazily like
// any work of the fake libcuda) after validating every parameter: sizes, leading
// dimensions, strides, data and compute types, operand ranges inside live device
// allocations (batch pointer arrays too, read when the GEMM runs), the handle's context
// against the stream's and the caller's. TF32 (compute type or math mode) rounds the
// inputs to a 10-bit mantissa. Active only with SLUICE_FAKE_CUDA=1.
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "fake_internal.h"

namespace {

enum : int {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum : int { R_32F = 0, R_16F = 2, R_16BF = 14 };
enum : int {
    COMPUTE_16F = 64,
    COMPUTE_32F = 68,
    COMPUTE_32F_PEDANTIC = 69,
    COMPUTE_32F_FAST_16F = 74,
    COMPUTE_32F_FAST_16BF = 75,
    COMPUTE_32F_FAST_TF32 = 77,
};

struct Handle {
    void* ctx;  // current when the handle was created
    void* stream = nullptr;
    bool stream_set = false;
    CUdeviceptr workspace = 0;
    size_t workspace_size = 0;
    int math_mode = 0;
    int pointer_mode = 0;
    int sm_count_target = 0;
};

std::mutex handles_lock;
std::vector<Handle*> handles;

bool live(Handle* h) {
    std::lock_guard<std::mutex> g(handles_lock);
    for (Handle* x : handles)
        if (x == h) return true;
    return false;
}

void complain(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void complain(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    sluice_fake_report("libcublas", buf);
}

float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else {
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
uint16_t float_to_half(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        float af;
        memcpy(&af, &a, 4);
        return (uint16_t)(sign | (uint32_t)std::nearbyint(af * 16777216.0f));
    }
    return (uint16_t)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
}
float bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
// TF32: keep 10 mantissa bits, round to nearest even.
float tf32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    u += 0xfffu + ((u >> 13) & 1u);
    u &= ~0x1fffu;
    memcpy(&f, &u, 4);
    return f;
}

size_t elem_size(int t) { return t == R_32F ? 4 : 2; }

float load(int t, const void* base, size_t i) {
    if (t == R_32F) return static_cast<const float*>(base)[i];
    uint16_t v = static_cast<const uint16_t*>(base)[i];
    return t == R_16F ? half_to_float(v) : bf16_to_float(v);
}
void store(int t, void* base, size_t i, float v) {
    if (t == R_32F) {
        static_cast<float*>(base)[i] = v;
    } else {
        static_cast<uint16_t*>(base)[i] = t == R_16F ? float_to_half(v) : float_to_bf16(v);
    }
}

struct Gemm {
    bool ta, tb;
    int m, n, k;
    float alpha, beta;
    int type;
    long long lda, ldb, ldc;
    bool tf32;
};

// r[j] = fma(a[p], b[p][j], r[j]) for p in order: fused multiply-adds like the GPU's.
__attribute__((target("avx2,fma"))) void row_fma(float* r, const float* a, const float* b, int k, int n) {
    for (int p = 0; p < k; ++p) {
        const float x = a[p];
        const float* brow = b + (size_t)p * n;
        for (int j = 0; j < n; ++j) r[j] = __builtin_fmaf(x, brow[j], r[j]);
    }
}
// The same numbers without FMA instructions (slow: a libm call per term).
void row_portable(float* r, const float* a, const float* b, int k, int n) {
    for (int p = 0; p < k; ++p) {
        const float x = a[p];
        const float* brow = b + (size_t)p * n;
        for (int j = 0; j < n; ++j) r[j] = std::fma(x, brow[j], r[j]);
    }
}

// One column-major product C = alpha op(A) op(B) + beta C (C not read when beta = 0).
// f32 accumulators with fused multiply-adds (cuBLAS's 32F compute types), each sum
// taken in k order; the loops run row by row over contiguous copies, vectorised.
void reference_gemm(const Gemm& g, const void* a, const void* b, void* c) {
    std::vector<float> at((size_t)g.m * g.k), bt((size_t)g.k * g.n), row(g.n);
    for (int i = 0; i < g.m; ++i)
        for (int p = 0; p < g.k; ++p) {
            float v = load(g.type, a, g.ta ? (size_t)p + (size_t)i * g.lda : (size_t)i + (size_t)p * g.lda);
            at[(size_t)i * g.k + p] = g.tf32 ? tf32(v) : v;
        }
    for (int p = 0; p < g.k; ++p)
        for (int j = 0; j < g.n; ++j) {
            float v = load(g.type, b, g.tb ? (size_t)j + (size_t)p * g.ldb : (size_t)p + (size_t)j * g.ldb);
            bt[(size_t)p * g.n + j] = g.tf32 ? tf32(v) : v;
        }
    static const bool has_fma = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
    for (int i = 0; i < g.m; ++i) {
        float* r = row.data();
        for (int j = 0; j < g.n; ++j) r[j] = 0.0f;
        if (has_fma) {
            row_fma(r, &at[(size_t)i * g.k], bt.data(), g.k, g.n);
        } else {
            row_portable(r, &at[(size_t)i * g.k], bt.data(), g.k, g.n);
        }
        for (int j = 0; j < g.n; ++j) {
            const size_t ci = (size_t)i + (size_t)j * g.ldc;
            float v = g.alpha * r[j];
            if (g.beta != 0.0f) v = std::fma(g.beta, load(g.type, c, ci), v);
            store(g.type, c, ci, v);
        }
    }
}

// Bytes an operand of `rows` x `cols` (column-major, leading dimension ld) spans.
size_t span(long long rows, long long cols, long long ld, int type) {
    if (rows == 0 || cols == 0) return 0;
    return (size_t)((cols - 1) * ld + rows) * elem_size(type);
}

// Validates everything but the operand pointers; fills `g`.
int check(Handle* h, const char* fn, int ta, int tb, int m, int n, int k, const void* alpha, int at, long long lda,
          int bt, long long ldb, const void* beta, int ct, long long ldc, int compute, Gemm& g) {
    if (!fake_enabled()) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!live(h)) {
        complain("%s: not a live handle", fn);
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    if (!h->stream_set) complain("%s: no stream set on the handle (the NULL stream is used)", fn);
    void* cur = sluice_fake_current_context();
    void* sctx = sluice_fake_stream_context(h->stream);
    if (cur != h->ctx || sctx != h->ctx) {
        complain("%s: the handle's context, its stream's context and the current context differ", fn);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    // On a green context cuBLAS cannot see the partition: unless the handle's SM count
    // target says how many SMs it has, it tunes (splits, grid sizes) for the whole GPU.
    const unsigned green_sms = sluice_fake_context_green_sms(h->ctx);
    if (green_sms && (h->sm_count_target <= 0 || (unsigned)h->sm_count_target > green_sms)) {
        complain("%s: the handle runs on a green context of %u SMs but its SM count target is %d "
                 "(cublasSetSmCountTarget unset or larger than the green context)",
                 fn, green_sms, h->sm_count_target);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1)) {
        complain("%s: transpose must be N or T (got %d, %d)", fn, ta, tb);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (m < 0 || n < 0 || k < 0) {
        complain("%s: negative size m=%d n=%d k=%d", fn, m, n, k);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const long long rows_a = ta ? k : m, rows_b = tb ? n : k;
    if (lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1)) {
        complain("%s: leading dimensions lda=%lld ldb=%lld ldc=%lld too small for m=%d n=%d k=%d (%c%c)", fn, lda, ldb,
                 ldc, m, n, k, ta ? 'T' : 'N', tb ? 'T' : 'N');
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (at != bt || at != ct || (at != R_32F && at != R_16F && at != R_16BF)) {
        complain("%s: data types A=%d B=%d C=%d are not one of 32F, 16F, 16BF", fn, at, bt, ct);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const bool f32_compute = compute == COMPUTE_32F || compute == COMPUTE_32F_PEDANTIC ||
                             compute == COMPUTE_32F_FAST_TF32 || compute == COMPUTE_32F_FAST_16F ||
                             compute == COMPUTE_32F_FAST_16BF;
    if (!f32_compute || (at != R_32F && compute != COMPUTE_32F && compute != COMPUTE_32F_PEDANTIC)) {
        complain("%s: compute type %d is not emulated for data type %d", fn, compute, at);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (h->pointer_mode != 0 || !alpha || !beta) {
        complain("%s: alpha and beta must be host pointers", fn);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (h->workspace && !sluice_fake_range_ok(h->workspace, h->workspace_size, nullptr)) {
        complain("%s: the workspace set on the handle is no longer a live allocation", fn);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    g = Gemm{ta == 1, tb == 1, m, n, k, *static_cast<const float*>(alpha), *static_cast<const float*>(beta), at,
             lda, ldb, ldc,
             at == R_32F && (compute == COMPUTE_32F_FAST_TF32 || (compute == COMPUTE_32F && (h->math_mode & 0xf) == 3))};
    return CUBLAS_STATUS_SUCCESS;
}

bool operand_ok(const char* fn, const char* which, CUdeviceptr p, size_t bytes) {
    if (bytes == 0) return true;
    if (sluice_fake_range_ok(p, bytes, nullptr)) return true;
    complain("%s: operand %s (0x%llx, %zu bytes) is not inside one live device allocation", fn, which, p, bytes);
    return false;
}

int queue(Handle* h, const char* fn, std::function<CUresult()> work) {
    if (sluice_fake_enqueue(h->stream, &work) != CUDA_SUCCESS) {
        complain("%s: could not queue on the handle's stream", fn);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

FAKE_API int cublasCreate_v2(Handle** out) {
    if (!fake_enabled()) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    void* ctx = sluice_fake_current_context();
    if (!ctx) return CUBLAS_STATUS_NOT_INITIALIZED;
    Handle* h = new Handle{ctx};
    std::lock_guard<std::mutex> g(handles_lock);
    handles.push_back(h);
    *out = h;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API int cublasDestroy_v2(Handle* h) {
    std::lock_guard<std::mutex> g(handles_lock);
    for (size_t i = 0; i < handles.size(); ++i)
        if (handles[i] == h) {
            handles.erase(handles.begin() + (long)i);
            delete h;
            return CUBLAS_STATUS_SUCCESS;
        }
    return CUBLAS_STATUS_NOT_INITIALIZED;
}

FAKE_API int cublasGetVersion_v2(Handle*, int* v) {
    *v = 130000;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API int cublasSetStream_v2(Handle* h, void* stream) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (sluice_fake_stream_context(stream) == nullptr) {
        complain("cublasSetStream: not a live stream");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->stream = stream;
    h->stream_set = true;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API int cublasGetStream_v2(Handle* h, void** stream) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    *stream = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API int cublasSetWorkspace_v2(Handle* h, void* ws, size_t size) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (ws && !sluice_fake_range_ok((CUdeviceptr)ws, size, nullptr)) {
        complain("cublasSetWorkspace: %zu bytes at %p are not inside a live device allocation", size, ws);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (ws && ((uintptr_t)ws % 256) != 0) {
        complain("cublasSetWorkspace: the workspace must be 256-byte aligned");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->workspace = (CUdeviceptr)ws;
    h->workspace_size = size;
    return CUBLAS_STATUS_SUCCESS;
}

FAKE_API int cublasSetMathMode(Handle* h, int mode) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}
FAKE_API int cublasGetMathMode(Handle* h, int* mode) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    *mode = h->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}
FAKE_API int cublasSetPointerMode_v2(Handle* h, int mode) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != 0) {
        complain("cublasSetPointerMode: only host pointers are emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    h->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}
FAKE_API int cublasGetPointerMode_v2(Handle* h, int* mode) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    *mode = h->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}
FAKE_API int cublasSetSmCountTarget(Handle* h, int n) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (n < 0) return CUBLAS_STATUS_INVALID_VALUE;
    h->sm_count_target = n;
    return CUBLAS_STATUS_SUCCESS;
}
FAKE_API int cublasGetSmCountTarget(Handle* h, int* n) {
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    *n = h->sm_count_target;
    return CUBLAS_STATUS_SUCCESS;
}

namespace {
int strided_gemm(const char* fn, Handle* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* a,
                 int at, int lda, long long sa, const void* b, int bt, int ldb, long long sb, const void* beta, void* c,
                 int ct, int ldc, long long sc, int batch, int compute, int algo) {
    Gemm g;
    if (int r = check(h, fn, ta, tb, m, n, k, alpha, at, lda, bt, ldb, beta, ct, ldc, compute, g)) return r;
    (void)algo;
    if (batch < 0 || sa < 0 || sb < 0 || sc < 0) {
        complain("%s: negative batch %d or stride (%lld, %lld, %lld)", fn, batch, sa, sb, sc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    // Outputs must not share elements: one after another, or side by side within the
    // leading dimension (the heads of an attention).
    const bool apart = sc >= (long long)ldc * (n - 1) + m;
    const bool side_by_side = sc >= m && (long long)(batch - 1) * sc + m <= ldc;
    if (batch > 1 && (long long)m * n > 0 && !apart && !side_by_side) {
        complain("%s: output stride %lld makes the %d outputs of %dx%d (ldc %d) overlap", fn, sc, batch, m, n, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const size_t es = elem_size(at);
    const size_t bytes_a = span(ta ? k : m, ta ? m : k, lda, at), bytes_b = span(tb ? n : k, tb ? k : n, ldb, at),
                 bytes_c = span(m, n, ldc, at);
    auto total = [&](size_t one, long long stride) { return one == 0 || batch == 0 ? 0 : (batch - 1) * stride * es + one; };
    const CUdeviceptr pa = (CUdeviceptr)a, pb = (CUdeviceptr)b, pc = (CUdeviceptr)c;
    const size_t ta_bytes = k ? total(bytes_a, sa) : 0, tb_bytes = k ? total(bytes_b, sb) : 0,
                 tc_bytes = total(bytes_c, sc);
    if (!operand_ok(fn, "A", pa, ta_bytes) || !operand_ok(fn, "B", pb, tb_bytes) || !operand_ok(fn, "C", pc, tc_bytes))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    return queue(h, fn, [=]() -> CUresult {
        if ((ta_bytes && !sluice_fake_range_ok(pa, ta_bytes, nullptr)) ||
            (tb_bytes && !sluice_fake_range_ok(pb, tb_bytes, nullptr)) || !sluice_fake_range_ok(pc, tc_bytes, nullptr)) {
            complain("%s: an operand was freed before the GEMM ran", fn);
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        }
        for (int i = 0; i < batch; ++i)
            reference_gemm(g, (const char*)a + i * sa * es, (const char*)b + i * sb * es, (char*)c + i * sc * es);
        return CUDA_SUCCESS;
    });
}

}  // namespace

FAKE_API int cublasGemmStridedBatchedEx(Handle* h, int ta, int tb, int m, int n, int k, const void* alpha,
                                        const void* a, int at, int lda, long long sa, const void* b, int bt, int ldb,
                                        long long sb, const void* beta, void* c, int ct, int ldc, long long sc,
                                        int batch, int compute, int algo) {
    return strided_gemm("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta,
                        c, ct, ldc, sc, batch, compute, algo);
}

FAKE_API int cublasGemmEx(Handle* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* a, int at,
                          int lda, const void* b, int bt, int ldb, const void* beta, void* c, int ct, int ldc,
                          int compute, int algo) {
    return strided_gemm("cublasGemmEx", h, ta, tb, m, n, k, alpha, a, at, lda, 0, b, bt, ldb, 0, beta, c, ct, ldc, 0,
                        1, compute, algo);
}

FAKE_API int cublasGemmBatchedEx(Handle* h, int ta, int tb, int m, int n, int k, const void* alpha,
                                 const void* const* a, int at, int lda, const void* const* b, int bt, int ldb,
                                 const void* beta, void* const* c, int ct, int ldc, int batch, int compute, int algo) {
    const char* fn = "cublasGemmBatchedEx";
    Gemm g;
    if (int r = check(h, fn, ta, tb, m, n, k, alpha, at, lda, bt, ldb, beta, ct, ldc, compute, g)) return r;
    (void)algo;
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (batch == 0 || m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const size_t arr = (size_t)batch * sizeof(void*);
    const CUdeviceptr pa = (CUdeviceptr)a, pb = (CUdeviceptr)b, pc = (CUdeviceptr)c;
    if (!operand_ok(fn, "A pointer array", pa, arr) || !operand_ok(fn, "B pointer array", pb, arr) ||
        !operand_ok(fn, "C pointer array", pc, arr))
        return CUBLAS_STATUS_INVALID_VALUE;
    const size_t bytes_a = k ? span(ta ? k : m, ta ? m : k, lda, at) : 0;
    const size_t bytes_b = k ? span(tb ? n : k, tb ? k : n, ldb, at) : 0;
    const size_t bytes_c = span(m, n, ldc, at);
    // The pointer arrays live in device memory, written by earlier stream work: read
    // and check them when the GEMM runs.
    return queue(h, fn, [=]() -> CUresult {
        const void* const* av = a;
        const void* const* bv = b;
        void* const* cv = c;
        for (int i = 0; i < batch; ++i) {
            if (!operand_ok(fn, "A[i]", (CUdeviceptr)av[i], bytes_a) || !operand_ok(fn, "B[i]", (CUdeviceptr)bv[i], bytes_b) ||
                !operand_ok(fn, "C[i]", (CUdeviceptr)cv[i], bytes_c)) {
                complain("%s: batch entry %d of %d is out of bounds", fn, i, batch);
                return CUDA_ERROR_ILLEGAL_ADDRESS;
            }
        }
        for (int i = 0; i < batch; ++i) reference_gemm(g, av[i], bv[i], cv[i]);
        return CUDA_SUCCESS;
    });
}

FAKE_API const char* cublasGetStatusName(int s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        default: return "CUBLAS_STATUS_UNKNOWN";
    }
}
FAKE_API const char* cublasGetStatusString(int s) { return cublasGetStatusName(s); }
FAKE_API size_t cublasGetCudartVersion() { return 13000; }

// Called by the generated stubs for every cuBLAS entry point the fake does not emulate.
FAKE_API int sluice_fake_blas_unsupported(const char* name) {
    complain("%s is not emulated (returns CUBLAS_STATUS_NOT_SUPPORTED)", name);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
