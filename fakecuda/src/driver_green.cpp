// Fake libcuda, part 3: green contexts (an SM split with the hardware's granularity of
// 8, a context and non-blocking streams per group) and error names and strings.
#include <cstring>

#include "driver_state.h"

using namespace fake;

#define LOCKED Guard guard_(st().lock)
#define CHECK_READY                               \
    do {                                          \
        if (CUresult r_ = ready(); r_) return r_; \
    } while (0)

// ---- green contexts (CUDA 13.0 layouts: CUdevResource is 144 bytes, the SM member at 96) ----

namespace {
struct SmResource {
    unsigned smCount, minSmPartitionSize, smCoscheduledAlignment;
};
struct DevResource {
    int type;  // 1: SM
    unsigned char pad[92];
    union {
        SmResource sm;
        unsigned char oversize[48];
    };
};
static_assert(sizeof(DevResource) == 144, "CUdevResource of CUDA 13.0");
struct ResourceDesc {
    int dev;
    unsigned sms;
};
constexpr unsigned kSmGranularity = 8;

void fill_sm(DevResource* r, unsigned sms) {
    memset(r, 0, sizeof *r);
    r->type = 1;
    r->sm.smCount = sms;
    r->sm.minSmPartitionSize = kSmGranularity;
    r->sm.smCoscheduledAlignment = kSmGranularity;
}
std::vector<ResourceDesc*> descs;
}  // namespace

FAKE_API CUresult cuDeviceGetDevResource(CUdevice d, DevResource* r, int type) {
    LOCKED;
    CHECK_READY;
    if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!r) return CUDA_ERROR_INVALID_VALUE;
    if (type != 1) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    fill_sm(r, st().devices[d].sms);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevSmResourceSplitByCount(DevResource* result, unsigned* nb_groups, const DevResource* input,
                                             DevResource* remaining, unsigned flags, unsigned min_count) {
    LOCKED;
    CHECK_READY;
    if (!nb_groups || !input || input->type != 1) return CUDA_ERROR_INVALID_VALUE;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    const unsigned want = min_count < kSmGranularity ? kSmGranularity
                                                     : (min_count + kSmGranularity - 1) / kSmGranularity * kSmGranularity;
    const unsigned total = input->sm.smCount;
    unsigned groups = total / want;
    if (result && *nb_groups < groups) groups = *nb_groups;
    if (groups == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    if (result)
        for (unsigned i = 0; i < groups; ++i) fill_sm(&result[i], want);
    if (remaining) fill_sm(remaining, total - groups * want);
    *nb_groups = groups;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevResourceGenerateDesc(ResourceDesc** out, DevResource* res, unsigned n) {
    LOCKED;
    CHECK_READY;
    if (!out || !res || n == 0) return CUDA_ERROR_INVALID_VALUE;
    unsigned sms = 0;
    for (unsigned i = 0; i < n; ++i) {
        if (res[i].type != 1) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
        if (res[i].sm.smCount == 0)
            return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
        sms += res[i].sm.smCount;
    }
    ResourceDesc* d = new ResourceDesc{current ? current->dev : 0, sms};
    descs.push_back(d);
    *out = d;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuGreenCtxCreate(Green** out, ResourceDesc* desc, CUdevice d, unsigned flags) {
    LOCKED;
    CHECK_READY;
    if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!out || !desc || !live(descs, desc)) return CUDA_ERROR_INVALID_VALUE;
    if (flags != 1) return CUDA_ERROR_INVALID_VALUE;  // CU_GREEN_CTX_DEFAULT_STREAM is required
    if (desc->sms > st().devices[d].sms) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    Green* g = new Green{new_ctx(d, true, desc->sms)};
    st().greens.push_back(g);
    *out = g;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuGreenCtxDestroy(Green* g) {
    LOCKED;
    CHECK_READY;
    if (!g || !live(st().greens, g)) return CUDA_ERROR_INVALID_HANDLE;
    for (Stream* s : st().streams)
        if (s->ctx == g->ctx && s != g->ctx->legacy)
            report("cuGreenCtxDestroy with a stream of the green context still alive");
    drain_context(g->ctx);
    auto& v = st().greens;
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i] == g) v.erase(v.begin() + (long)i);
    if (current == g->ctx) current = nullptr;
    // The Ctx stays allocated (handles may linger) but is no longer live.
    auto& cs = st().contexts;
    for (size_t i = 0; i < cs.size(); ++i)
        if (cs[i] == g->ctx) cs.erase(cs.begin() + (long)i);
    delete g;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxFromGreenCtx(Ctx** out, Green* g) {
    LOCKED;
    CHECK_READY;
    if (!out || !g || !live(st().greens, g)) return CUDA_ERROR_INVALID_HANDLE;
    *out = g->ctx;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuGreenCtxStreamCreate(Stream** out, Green* g, unsigned flags, int priority) {
    LOCKED;
    CHECK_READY;
    if (!out || !g || !live(st().greens, g)) return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 1) return CUDA_ERROR_INVALID_VALUE;  // must be CU_STREAM_NON_BLOCKING
    *out = new_stream(g->ctx, flags, priority);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuGreenCtxGetDevResource(Green* g, DevResource* r, int type) {
    LOCKED;
    CHECK_READY;
    if (!g || !live(st().greens, g)) return CUDA_ERROR_INVALID_HANDLE;
    if (type != 1) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    fill_sm(r, g->ctx->sms);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetDevResource(Ctx* c, DevResource* r, int type) {
    LOCKED;
    CHECK_READY;
    if (!c || !live(st().contexts, c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (type != 1) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    fill_sm(r, c->sms);
    return CUDA_SUCCESS;
}

// ---- errors ----

static const char* error_name(int e) {
    switch (e) {
        case 0: return "CUDA_SUCCESS";
        case 1: return "CUDA_ERROR_INVALID_VALUE";
        case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
        case 3: return "CUDA_ERROR_NOT_INITIALIZED";
        case 100: return "CUDA_ERROR_NO_DEVICE";
        case 101: return "CUDA_ERROR_INVALID_DEVICE";
        case 200: return "CUDA_ERROR_INVALID_IMAGE";
        case 201: return "CUDA_ERROR_INVALID_CONTEXT";
        case 400: return "CUDA_ERROR_INVALID_HANDLE";
        case 401: return "CUDA_ERROR_ILLEGAL_STATE";
        case 500: return "CUDA_ERROR_NOT_FOUND";
        case 600: return "CUDA_ERROR_NOT_READY";
        case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
        case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
        case 719: return "CUDA_ERROR_LAUNCH_FAILED";
        case 801: return "CUDA_ERROR_NOT_SUPPORTED";
        case 914: return "CUDA_ERROR_INVALID_RESOURCE_TYPE";
        case 915: return "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION";
        case 999: return "CUDA_ERROR_UNKNOWN";
        default: return nullptr;
    }
}

static const char* error_string(int e) {
    switch (e) {
        case 0: return "no error";
        case 1: return "invalid argument";
        case 2: return "out of memory";
        case 3: return "initialization error";
        case 100: return "no CUDA-capable device is detected";
        case 101: return "invalid device ordinal";
        case 200: return "device kernel image is invalid";
        case 201: return "invalid device context";
        case 400: return "invalid resource handle";
        case 401: return "the operation cannot be performed in the present state";
        case 500: return "named symbol not found";
        case 600: return "device not ready";
        case 700: return "an illegal memory access was encountered";
        case 701: return "too many resources requested for launch";
        case 719: return "unspecified launch failure";
        case 801: return "operation not supported";
        case 914: return "invalid resource type";
        case 915: return "invalid resource configuration";
        case 999: return "unknown error";
        default: return nullptr;
    }
}

FAKE_API CUresult cuGetErrorName(int e, const char** out) {
    const char* n = error_name(e);
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = n;
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult cuGetErrorString(int e, const char** out) {
    const char* n = error_string(e);
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = n;
    return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

