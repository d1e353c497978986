// Fake libcuda, part 1: initialisation, devices, contexts, green contexts, streams,
// events, the lazy execution engine and error strings. Active only with
// SLUICE_FAKE_CUDA=1; otherwise cuInit answers CUDA_ERROR_NO_DEVICE.
//
// Environment: SLUICE_FAKE_CUDA_DEVICES (default 1), SLUICE_FAKE_CUDA_SMS (132),
// SLUICE_FAKE_CUDA_MEMORY_MIB (143771, an H200), SLUICE_FAKE_CUDA_SCHEDULE
// (round-robin | lowest-first), SLUICE_FAKE_CUDA_LOG=1 (print every launch),
// SLUICE_FAKE_CUDA_FAIL_LAUNCH=n (the n-th launch fails with an illegal address).
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "driver_state.h"

namespace fake {

thread_local Ctx* current = nullptr;

State& st() {
    static State* s = new State();  // never destroyed: streams may be used during exit
    return *s;
}

void report(const char* fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fake libcuda: %s\n", buf);
}

static unsigned long env_num(const char* name, unsigned long dflt) {
    const char* v = getenv(name);
    if (!v || !*v) return dflt;
    return strtoul(v, nullptr, 10);
}

CUresult ready() {
    if (!st().initialised) return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

Device& device_of(Ctx* c) { return st().devices[c->dev]; }

Stream* stream_of(void* handle) {
    // CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) act as the NULL stream.
    if (handle == nullptr || handle == (void*)1 || handle == (void*)2) return current ? current->legacy : nullptr;
    return live(st().streams, handle) ? static_cast<Stream*>(handle) : nullptr;
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - st().epoch).count();
}

CUresult enqueue(Stream* s, std::function<CUresult()> run) {
    CUresult sticky = device_of(s->ctx).sticky;
    if (sticky) return sticky;
    s->queue.push_back(std::move(run));
    ++s->enqueued;
    return CUDA_SUCCESS;
}

CUresult drain(Stream* s, uint64_t upto) {
    Device& d = device_of(s->ctx);
    if (s->done >= upto || s->queue.empty()) return d.sticky;
    if (s->running) {
        report("a stream waits (through events) on work queued after the wait itself: cycle");
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    s->running = true;
    while (s->done < upto && !s->queue.empty()) {
        std::function<CUresult()> op = std::move(s->queue.front());
        s->queue.pop_front();
        ++s->done;
        if (d.sticky) continue;  // a poisoned device runs nothing more
        CUresult r = op();
        if (r != CUDA_SUCCESS && !d.sticky) d.sticky = r;
    }
    s->running = false;
    return d.sticky;
}

CUresult drain_context(Ctx* c) {
    CUresult r = CUDA_SUCCESS;
    for (Stream* s : std::vector<Stream*>(st().streams))
        if (s->ctx == c) {
            CUresult e = drain(s, UINT64_MAX);
            if (e && !r) r = e;
        }
    return r;
}

CUresult drain_all() {
    CUresult r = CUDA_SUCCESS;
    for (Stream* s : std::vector<Stream*>(st().streams)) {
        CUresult e = drain(s, UINT64_MAX);
        if (e && !r) r = e;
    }
    return r;
}

Stream* new_stream(Ctx* c, unsigned flags, int priority) {
    Stream* s = new Stream{c};
    s->flags = flags;
    s->priority = priority < -5 ? -5 : (priority > 0 ? 0 : priority);
    st().streams.push_back(s);
    return s;
}

Ctx* new_ctx(int dev, bool green, unsigned sms) {
    Ctx* c = new Ctx{dev, green, sms};
    c->legacy = new_stream(c, 0, 0);
    st().contexts.push_back(c);
    return c;
}

}  // namespace fake

using namespace fake;

#define LOCKED Guard guard_(st().lock)
#define CHECK_READY                               \
    do {                                          \
        if (CUresult r_ = ready(); r_) return r_; \
    } while (0)

FAKE_API CUresult cuInit(unsigned flags) {
    LOCKED;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!fake_enabled()) return CUDA_ERROR_NO_DEVICE;
    State& s = st();
    if (s.initialised) return CUDA_SUCCESS;
    unsigned long n = env_num("SLUICE_FAKE_CUDA_DEVICES", 1);
    if (n == 0) return CUDA_ERROR_NO_DEVICE;
    const unsigned long sms = env_num("SLUICE_FAKE_CUDA_SMS", 132);
    const uint64_t mib = env_num("SLUICE_FAKE_CUDA_MEMORY_MIB", 143771);
    s.devices.resize(n);
    for (Device& d : s.devices) {
        d.sms = sms ? (unsigned)sms : 1;
        d.total = mib << 20;
    }
    const char* sched = getenv("SLUICE_FAKE_CUDA_SCHEDULE");
    s.schedule = (sched && (!strcmp(sched, "lowest-first") || !strcmp(sched, "lowest"))) ? 1 : 0;
    s.log_launches = env_num("SLUICE_FAKE_CUDA_LOG", 0) != 0;
    s.fail_launch = env_num("SLUICE_FAKE_CUDA_FAIL_LAUNCH", 0);
    s.initialised = true;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDriverGetVersion(int* v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetCount(int* n) {
    LOCKED;
    CHECK_READY;
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *n = (int)st().devices.size();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
    LOCKED;
    CHECK_READY;
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= (int)st().devices.size()) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

namespace fake {
bool valid_dev(CUdevice d) { return d >= 0 && d < (int)st().devices.size(); }
}  // namespace fake

FAKE_API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
    LOCKED;
    CHECK_READY;
    if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "sluice CPU emulator");
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
    LOCKED;
    CHECK_READY;
    if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = st().devices[d].total;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetUuid_v2(unsigned char* uuid, CUdevice d) {
    LOCKED;
    CHECK_READY;
    if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    memset(uuid, 0, 16);
    memcpy(uuid, "sluice-fake", 11);
    uuid[15] = (unsigned char)d;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGetUuid(unsigned char* uuid, CUdevice d) { return cuDeviceGetUuid_v2(uuid, d); }

FAKE_API CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
    LOCKED;
    CHECK_READY;
    if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    const Device& dev = st().devices[d];
    switch (attr) {
        case 1: *v = 1024; break;                   // max threads per block
        case 2: case 3: *v = 1024; break;           // max block dim x, y
        case 4: *v = 64; break;                     // max block dim z
        case 5: *v = 2147483647; break;             // max grid dim x
        case 6: case 7: *v = 65535; break;          // max grid dim y, z
        case 8: *v = 49152; break;                  // shared memory per block
        case 9: *v = 65536; break;                  // constant memory
        case 10: *v = 32; break;                    // warp size
        case 12: *v = 65536; break;                 // registers per block
        case 13: *v = 1980000; break;               // clock rate (kHz)
        case 16: *v = (int)dev.sms; break;          // multiprocessors
        case 36: *v = 2619000; break;               // memory clock (kHz)
        case 37: *v = 6144; break;                  // memory bus width
        case 38: *v = 52428800; break;              // L2 cache
        case 39: *v = 2048; break;                  // max threads per SM
        case 75: *v = 9; break;                     // compute capability major
        case 76: *v = 0; break;                     // minor
        case 81: *v = 233472; break;                // shared memory per SM
        case 82: *v = 65536; break;                 // registers per SM
        case 97: *v = 232448; break;                // shared memory per block (opt-in)
        case 106: *v = 32; break;                   // max blocks per SM
        case 115: *v = 0; break;                    // memory pools: none (plain cuMemAlloc)
        default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRetain(Ctx** out, CUdevice d) {
    LOCKED;
    CHECK_READY;
    if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    Device& dev = st().devices[d];
    if (!dev.primary) dev.primary = new_ctx(d, false, dev.sms);
    ++dev.primary_refs;
    *out = dev.primary;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    LOCKED;
    CHECK_READY;
    if (!valid_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
    Device& dev = st().devices[d];
    if (dev.primary_refs > 0) --dev.primary_refs;  // the context itself is kept (cheap)
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSetCurrent(Ctx* c) {
    LOCKED;
    CHECK_READY;
    if (c && !live(st().contexts, c)) return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetCurrent(Ctx** c) {
    LOCKED;
    CHECK_READY;
    *c = current;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxPushCurrent_v2(Ctx* c) { return cuCtxSetCurrent(c); }
FAKE_API CUresult cuCtxPopCurrent_v2(Ctx** c) {
    LOCKED;
    if (c) *c = current;
    current = nullptr;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetDevice(CUdevice* d) {
    LOCKED;
    CHECK_READY;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *d = current->dev;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSynchronize() {
    LOCKED;
    CHECK_READY;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    return drain_context(current);
}

FAKE_API CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSetLimit(int, size_t) { return CUDA_SUCCESS; }
FAKE_API CUresult cuCtxGetLimit(size_t* v, int) {
    if (v) *v = 0;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxSetCacheConfig(int) { return CUDA_SUCCESS; }
FAKE_API CUresult cuCtxGetCacheConfig(int* v) {
    if (v) *v = 0;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxSetFlags(unsigned) { return CUDA_SUCCESS; }

// ---- streams ----

FAKE_API CUresult cuStreamCreateWithPriority(Stream** out, unsigned flags, int priority) {
    LOCKED;
    CHECK_READY;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    if (!out || flags > 1) return CUDA_ERROR_INVALID_VALUE;
    *out = new_stream(current, flags, priority);
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamCreate(Stream** out, unsigned flags) { return cuStreamCreateWithPriority(out, flags, 0); }

FAKE_API CUresult cuStreamGetPriority(Stream* h, int* p) {
    LOCKED;
    Stream* s = stream_of(h);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    *p = s->priority;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamDestroy_v2(Stream* h) {
    LOCKED;
    CHECK_READY;
    if (!h || !live(st().streams, h)) return CUDA_ERROR_INVALID_HANDLE;
    // Work already queued still runs (as on a GPU): run it now.
    drain(h, UINT64_MAX);
    auto& v = st().streams;
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i] == h) v.erase(v.begin() + (long)i);
    delete h;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamSynchronize(Stream* h) {
    LOCKED;
    CHECK_READY;
    Stream* s = stream_of(h);
    if (!s) return current ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_CONTEXT;
    return drain(s, UINT64_MAX);
}

// A query is a wait too: it runs what is queued, then reports the stream idle.
FAKE_API CUresult cuStreamQuery(Stream* h) { return cuStreamSynchronize(h); }

FAKE_API CUresult cuStreamWaitEvent(Stream* h, Event* e, unsigned flags) {
    LOCKED;
    CHECK_READY;
    Stream* s = stream_of(h);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if (!e || !live(st().events, e) || flags > 1) return CUDA_ERROR_INVALID_HANDLE;
    if (!e->recorded) return CUDA_SUCCESS;  // waiting on a never-recorded event is a no-op
    // Captured now: a later record of the same event does not change this wait.
    Stream* p = e->stream;
    uint64_t seq = e->seq;
    if (p == s) return CUDA_SUCCESS;
    return enqueue(s, [p, seq]() -> CUresult {
        if (!live(st().streams, p)) return CUDA_SUCCESS;  // destroyed streams were drained
        return drain(p, seq);
    });
}

FAKE_API CUresult cuLaunchHostFunc(Stream* h, void (*fn)(void*), void* data) {
    LOCKED;
    CHECK_READY;
    Stream* s = stream_of(h);
    if (!s || !fn) return CUDA_ERROR_INVALID_HANDLE;
    return enqueue(s, [fn, data]() -> CUresult {
        fn(data);
        return CUDA_SUCCESS;
    });
}

// ---- events ----

FAKE_API CUresult cuEventCreate(Event** out, unsigned flags) {
    LOCKED;
    CHECK_READY;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    if (!out || flags > 0xf) return CUDA_ERROR_INVALID_VALUE;
    Event* e = new Event{current, flags};
    st().events.push_back(e);
    *out = e;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventDestroy_v2(Event* e) {
    LOCKED;
    CHECK_READY;
    auto& v = st().events;
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i] == e) {
            v.erase(v.begin() + (long)i);
            delete e;  // queued records refer to it through `live` checks
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_HANDLE;
}

FAKE_API CUresult cuEventRecord(Event* e, Stream* h) {
    LOCKED;
    CHECK_READY;
    if (!e || !live(st().events, e)) return CUDA_ERROR_INVALID_HANDLE;
    Stream* s = stream_of(h);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if (s->ctx->dev != e->ctx->dev) return CUDA_ERROR_INVALID_HANDLE;
    e->stream = s;
    e->recorded = true;
    e->fired = false;
    const uint64_t seq = s->enqueued + 1;
    CUresult r = enqueue(s, [e, seq]() -> CUresult {
        if (live(st().events, e) && e->seq == seq) {
            e->fired = true;
            e->ms = now_ms();
        }
        return CUDA_SUCCESS;
    });
    e->seq = seq;
    return r;
}

FAKE_API CUresult cuEventRecordWithFlags(Event* e, Stream* h, unsigned) { return cuEventRecord(e, h); }

FAKE_API CUresult cuEventSynchronize(Event* e) {
    LOCKED;
    CHECK_READY;
    if (!e || !live(st().events, e)) return CUDA_ERROR_INVALID_HANDLE;
    if (!e->recorded || !live(st().streams, e->stream)) return CUDA_SUCCESS;
    return drain(e->stream, e->seq);
}

// A query waits too (see cuStreamQuery).
FAKE_API CUresult cuEventQuery(Event* e) { return cuEventSynchronize(e); }

FAKE_API CUresult cuEventElapsedTime_v2(float* ms, Event* a, Event* b) {
    LOCKED;
    CHECK_READY;
    if (!ms || !a || !b || !live(st().events, a) || !live(st().events, b)) return CUDA_ERROR_INVALID_HANDLE;
    if ((a->flags & 2) || (b->flags & 2)) return CUDA_ERROR_INVALID_HANDLE;  // CU_EVENT_DISABLE_TIMING
    if (!a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (!a->fired || !b->fired) return CUDA_ERROR_NOT_READY;
    *ms = (float)(b->ms - a->ms);
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuEventElapsedTime(float* ms, Event* a, Event* b) { return cuEventElapsedTime_v2(ms, a, b); }

// ---- for libcublas ----

FAKE_API CUresult sluice_fake_enqueue(void* stream, std::function<CUresult()>* run) {
    LOCKED;
    CHECK_READY;
    Stream* s = stream_of(stream);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    return enqueue(s, std::move(*run));
}

FAKE_API void* sluice_fake_stream_context(void* stream) {
    LOCKED;
    Stream* s = stream_of(stream);
    return s ? s->ctx : nullptr;
}

FAKE_API unsigned sluice_fake_context_green_sms(void* ctx) {
    LOCKED;
    Ctx* c = static_cast<Ctx*>(ctx);
    return c && c->green ? c->sms : 0;
}

FAKE_API void* sluice_fake_current_context() { return current; }

FAKE_API void sluice_fake_report(const char* lib, const char* msg) { fprintf(stderr, "fake %s: %s\n", lib, msg); }

// Called by the generated stubs for every driver entry point the fake does not emulate.
FAKE_API CUresult sluice_fake_unsupported(const char* name) {
    static std::mutex m;
    static std::vector<std::string> seen;
    std::lock_guard<std::mutex> g(m);
    for (auto& s : seen)
        if (s == name) return CUDA_ERROR_NOT_SUPPORTED;
    seen.emplace_back(name);
    report("%s is not emulated (returns CUDA_ERROR_NOT_SUPPORTED)", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}
