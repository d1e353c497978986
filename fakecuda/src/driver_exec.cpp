// Fake libcuda, part 2: device memory (bounds-tracked, each allocation ending at a guard
// page), copies and memsets (queued lazily like any stream work), pinned host memory,
// module loading (the images the fake NVRTC makes) and cuLaunchKernel with its checks:
// grid and block limits, the function's context against the stream's, parameters
// copied at launch with the sizes the kernel's signature gives, pointer parameters
// inside live allocations of the device.
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "driver_state.h"

using namespace fake;

#define LOCKED Guard guard_(st().lock)
#define CHECK_READY                               \
    do {                                          \
        if (CUresult r_ = ready(); r_) return r_; \
    } while (0)

namespace fake {

const Alloc* find_alloc(CUdeviceptr p, size_t len) {
    auto& m = st().allocs;
    auto it = m.upper_bound(p);
    if (it == m.begin()) return nullptr;
    --it;
    const Alloc& a = it->second;
    if (p < a.base || p - a.base > a.size || len > a.size - (p - a.base)) return nullptr;
    return &a;
}

}  // namespace fake

// A kernel that touches memory outside every allocation (a guard page, freed memory)
// gets SIGSEGV; while a kernel runs, the handler turns that into an illegal-address
// launch failure. Any other SIGSEGV goes to the handler installed before ours.
namespace {
thread_local sigjmp_buf* kernel_jump = nullptr;
thread_local void* fault_address = nullptr;
struct sigaction previous_segv;

void on_segv(int sig, siginfo_t* info, void* uctx) {
    if (kernel_jump) {
        fault_address = info->si_addr;
        siglongjmp(*kernel_jump, 1);
    }
    sigaction(SIGSEGV, &previous_segv, nullptr);  // not ours: re-fault into the old handler
    (void)sig;
    (void)uctx;
}

void install_segv_handler() {
    static bool installed = false;
    if (installed) return;
    installed = true;
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
}
}  // namespace

static CUresult sticky_of_current() { return current ? device_of(current).sticky : CUDA_SUCCESS; }

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t size) {
    LOCKED;
    CHECK_READY;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    if (CUresult r = sticky_of_current()) return r;
    if (!out || size == 0) return CUDA_ERROR_INVALID_VALUE;
    Device& d = device_of(current);
    if (size > d.total - d.used) return CUDA_ERROR_OUT_OF_MEMORY;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t len = (size + 255) / 256 * 256;
    const size_t map_len = (len + page - 1) / page * page + page;
    void* m = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    char* guard = static_cast<char*>(m) + map_len - page;
    mprotect(guard, page, PROT_NONE);  // reading past the end faults
    const CUdeviceptr base = (CUdeviceptr)(guard - len);
    // Fresh device memory is not zero: fill small allocations with 0xff (NaN as floats).
    if (size <= (64u << 20)) memset((void*)base, 0xff, len);
    st().allocs[base] = Alloc{base, size, m, map_len, current->dev};
    d.used += size;
    *out = base;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemFree_v2(CUdeviceptr p) {
    LOCKED;
    CHECK_READY;
    auto it = st().allocs.find(p);
    if (it == st().allocs.end()) {
        report("cuMemFree of 0x%llx, which is not the start of a live allocation", p);
        return CUDA_ERROR_INVALID_VALUE;
    }
    // cuMemFree waits for the device, as the real one does.
    drain_all();
    st().devices[it->second.dev].used -= it->second.size;
    munmap(it->second.map, it->second.map_len);  // later use faults
    st().allocs.erase(it);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    LOCKED;
    CHECK_READY;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    Device& d = device_of(current);
    if (free_bytes) *free_bytes = d.total - d.used;
    if (total) *total = d.total;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemHostAlloc(void** out, size_t size, unsigned) {
    LOCKED;
    CHECK_READY;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    void* p = nullptr;
    if (posix_memalign(&p, 4096, size ? size : 1)) return CUDA_ERROR_OUT_OF_MEMORY;
    st().host_allocs[p] = size;
    *out = p;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemAllocHost_v2(void** out, size_t size) { return cuMemHostAlloc(out, size, 0); }

FAKE_API CUresult cuMemFreeHost(void* p) {
    LOCKED;
    CHECK_READY;
    auto it = st().host_allocs.find(p);
    if (it == st().host_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
    drain_all();  // pending copies may still read or write it
    st().host_allocs.erase(it);
    free(p);
    return CUDA_SUCCESS;
}

// Registered memory counts as pinned: copies read or write it when they run.
FAKE_API CUresult cuMemHostRegister_v2(void* p, size_t size, unsigned) {
    LOCKED;
    CHECK_READY;
    if (!p || size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (st().host_allocs.count(p) || st().registered.count(p)) return CUDA_ERROR_INVALID_VALUE;
    st().registered[p] = size;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemHostUnregister(void* p) {
    LOCKED;
    CHECK_READY;
    if (!st().registered.count(p)) return CUDA_ERROR_INVALID_VALUE;
    drain_all();  // pending copies may still use it
    st().registered.erase(p);
    return CUDA_SUCCESS;
}

static CUresult check_dev_range(const char* what, CUdeviceptr p, size_t n) {
    if (n == 0) return CUDA_SUCCESS;
    if (!find_alloc(p, n)) {
        report("%s: device range 0x%llx + %zu bytes is not inside one live allocation", what, p, n);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult queue_on(void* h, std::function<CUresult()> op, Stream** used = nullptr) {
    Stream* s = stream_of(h);
    if (!s) return current ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_CONTEXT;
    if (current && s->ctx->dev != current->dev) return CUDA_ERROR_INVALID_HANDLE;
    if (used) *used = s;
    return enqueue(s, std::move(op));
}

// Whether [p, p+n) is inside page-locked host memory of cuMemHostAlloc.
static bool pinned(const void* p, size_t n) {
    for (const auto* m : {&st().host_allocs, &st().registered})
        for (auto& [base, len] : *m)
            if ((const char*)p >= (const char*)base && (const char*)p + n <= (const char*)base + len) return true;
    return false;
}

// The copy runs when the stream is waited on; what it touches is checked again then
// (the memory may have been freed in between: an illegal address on a GPU).
FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* h) {
    LOCKED;
    CHECK_READY;
    if (CUresult r = check_dev_range("cuMemcpyHtoDAsync", dst, n)) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (!src) return CUDA_ERROR_INVALID_VALUE;
    // Pageable source memory is staged before the call returns (the caller may reuse
    // it at once); pinned memory is read when the copy runs.
    if (pinned(src, n)) {
        return queue_on(h, [dst, src, n]() -> CUresult {
            if (!find_alloc(dst, n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
            memcpy((void*)dst, src, n);
            return CUDA_SUCCESS;
        });
    }
    auto staged = std::make_shared<std::vector<char>>((const char*)src, (const char*)src + n);
    return queue_on(h, [dst, staged]() -> CUresult {
        if (!find_alloc(dst, staged->size())) return CUDA_ERROR_ILLEGAL_ADDRESS;
        memcpy((void*)dst, staged->data(), staged->size());
        return CUDA_SUCCESS;
    });
}

FAKE_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* h) {
    LOCKED;
    CHECK_READY;
    if (CUresult r = check_dev_range("cuMemcpyDtoHAsync", src, n)) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (!dst) return CUDA_ERROR_INVALID_VALUE;
    Stream* s = nullptr;
    CUresult r = queue_on(
        h,
        [dst, src, n]() -> CUresult {
            if (!find_alloc(src, n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
            memcpy(dst, (const void*)src, n);
            return CUDA_SUCCESS;
        },
        &s);
    if (r || pinned(dst, n)) return r;
    // Into pageable memory the copy has completed when the call returns (CUDA's rule),
    // so the stream runs up to it now.
    return drain(s, s->enqueued);
}

FAKE_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* h) {
    LOCKED;
    CHECK_READY;
    if (CUresult r = check_dev_range("cuMemcpyDtoDAsync (destination)", dst, n)) return r;
    if (CUresult r = check_dev_range("cuMemcpyDtoDAsync (source)", src, n)) return r;
    if (n == 0) return CUDA_SUCCESS;
    return queue_on(h, [dst, src, n]() -> CUresult {
        if (!find_alloc(src, n) || !find_alloc(dst, n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        memmove((void*)dst, (const void*)src, n);
        return CUDA_SUCCESS;
    });
}

FAKE_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void* h) {
    LOCKED;
    CHECK_READY;
    if (CUresult r = check_dev_range("cuMemsetD8Async", dst, n)) return r;
    if (n == 0) return CUDA_SUCCESS;
    return queue_on(h, [dst, v, n]() -> CUresult {
        if (!find_alloc(dst, n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        memset((void*)dst, v, n);
        return CUDA_SUCCESS;
    });
}

FAKE_API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, void* h) {
    LOCKED;
    CHECK_READY;
    if (CUresult r = check_dev_range("cuMemsetD32Async", dst, n * 4)) return r;
    return queue_on(h, [dst, v, n]() -> CUresult {
        if (!find_alloc(dst, n * 4)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        for (size_t i = 0; i < n; ++i) memcpy((char*)dst + 4 * i, &v, 4);
        return CUDA_SUCCESS;
    });
}

// Synchronous forms: queued on the NULL stream, which is then run to the end.
static CUresult run_sync(CUresult queued) {
    if (queued) return queued;
    return drain(current->legacy, UINT64_MAX);
}
FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
    LOCKED;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    return run_sync(cuMemcpyHtoDAsync_v2(dst, src, n, nullptr));
}
FAKE_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
    LOCKED;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    return run_sync(cuMemcpyDtoHAsync_v2(dst, src, n, nullptr));
}
FAKE_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    LOCKED;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    return run_sync(cuMemcpyDtoDAsync_v2(dst, src, n, nullptr));
}
FAKE_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    LOCKED;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    return run_sync(cuMemsetD8Async(dst, v, n, nullptr));
}

// ---- modules ----

static const char kMagic[] = "SLUICE-FAKE-CUBIN-1\n";

FAKE_API CUresult cuModuleLoadData(Module** out, const void* image) {
    LOCKED;
    CHECK_READY;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
    const char* img = static_cast<const char*>(image);
    if (strncmp(img, kMagic, sizeof kMagic - 1) != 0) {
        report("cuModuleLoadData: not an image of the fake NVRTC (a real CUBIN or PTX cannot run here)");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    std::string path(img + sizeof kMagic - 1);
    if (!path.empty() && path.back() == '\n') path.pop_back();
    std::shared_ptr<Library> lib = st().libraries[path].lock();
    if (!lib) {
        void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            report("cuModuleLoadData: %s", dlerror());
            return CUDA_ERROR_INVALID_IMAGE;
        }
        using Table = const sluice_emu::KernelDesc* (*)(size_t*);
        auto table = reinterpret_cast<Table>(dlsym(h, "sluice_emu_kernels"));
        auto launch = reinterpret_cast<decltype(Library::launch)>(dlsym(h, "sluice_emu_launch"));
        if (!table || !launch) {
            dlclose(h);
            report("cuModuleLoadData: %s has no kernel table", path.c_str());
            return CUDA_ERROR_INVALID_IMAGE;
        }
        lib = std::shared_ptr<Library>(new Library{h, nullptr, 0, launch}, [](Library* l) {
            dlclose(l->handle);
            delete l;
        });
        lib->kernels = table(&lib->count);
        st().libraries[path] = lib;
    }
    Module* m = new Module{current, lib, {}};
    for (size_t i = 0; i < lib->count; ++i)
        m->functions[lib->kernels[i].name] = std::make_unique<Function>(Function{m, &lib->kernels[i]});
    st().modules.push_back(m);
    *out = m;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleUnload(Module* m) {
    LOCKED;
    CHECK_READY;
    auto& v = st().modules;
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i] == m) {
            drain_all();  // queued launches of its kernels run first
            v.erase(v.begin() + (long)i);
            delete m;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_HANDLE;
}

FAKE_API CUresult cuModuleGetFunction(Function** out, Module* m, const char* name) {
    LOCKED;
    CHECK_READY;
    if (!m || !live(st().modules, m)) return CUDA_ERROR_INVALID_HANDLE;
    if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
    auto it = m->functions.find(name);
    if (it == m->functions.end()) return CUDA_ERROR_NOT_FOUND;
    *out = it->second.get();
    return CUDA_SUCCESS;
}

static bool live_function(Function* f) {
    for (Module* m : st().modules)
        for (auto& [_, fn] : m->functions)
            if (fn.get() == f) return true;
    return false;
}

// Threads a block of `k` may have. A kernel with `__launch_bounds__(n)` is compiled to fit
// n threads (at most 65536 / n registers each), so n is its limit. Without a bound the
// compiler may give each thread up to 255 registers: only 256 threads (65536 / 255 in
// whole warps) are then sure to fit, and a larger block can fail on the GPU with
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES. The fake cannot count registers, so it assumes that
// worst case (issue 11, defect 3).
static unsigned max_block_threads(const sluice_emu::KernelDesc* k) {
    constexpr unsigned kUnboundedThreads = 256;
    return k->max_threads ? std::min(k->max_threads, 1024u) : kUnboundedThreads;
}

FAKE_API CUresult cuFuncGetAttribute(int* v, int attr, Function* f) {
    LOCKED;
    CHECK_READY;
    if (!f || !live_function(f)) return CUDA_ERROR_INVALID_HANDLE;
    switch (attr) {
        case 0: *v = (int)max_block_threads(f->desc); break;  // max threads per block
        case 4: *v = 32; break;    // registers
        case 5: *v = 90; break;    // PTX version
        case 6: *v = 90; break;    // binary version
        default: *v = 0;
    }
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuFuncSetAttribute(Function*, int, int) { return CUDA_SUCCESS; }
FAKE_API CUresult cuFuncSetCacheConfig(Function*, int) { return CUDA_SUCCESS; }

FAKE_API CUresult cuLaunchKernel(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shared, void* h, void** params, void** extra) {
    LOCKED;
    CHECK_READY;
    if (!f || !live_function(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    Stream* s = stream_of(h);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    const sluice_emu::KernelDesc* k = f->desc;
    if (s->ctx != current || f->module->ctx != current) {
        report("cuLaunchKernel of %s: the stream's context, the module's context and the current context differ "
               "(a module must be loaded in the context it launches in)",
               k->name);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (!gx || !gy || !gz || !bx || !by || !bz || gx > 2147483647u || gy > 65535 || gz > 65535 || bx > 1024 ||
        by > 1024 || bz > 64 || (unsigned long long)bx * by * bz > 1024) {
        report("cuLaunchKernel of %s: invalid grid (%u,%u,%u) or block (%u,%u,%u)", k->name, gx, gy, gz, bx, by, bz);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if ((unsigned long long)bx * by * bz > max_block_threads(k)) {
        report("cuLaunchKernel of %s: block (%u,%u,%u) exceeds the %u threads the kernel is sure to fit (%s)", k->name,
               bx, by, bz, max_block_threads(k),
               k->max_threads ? "its __launch_bounds__"
                              : "no __launch_bounds__: it may use 255 registers a thread, 65536 per block");
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    }
    if (shared > 49152) return CUDA_ERROR_INVALID_VALUE;
    if (extra) {
        report("cuLaunchKernel of %s: `extra` parameter buffers are not emulated", k->name);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (k->nparams > 0 && !params) return CUDA_ERROR_INVALID_VALUE;
    // Parameters are copied now, each with the size the kernel's signature gives.
    size_t total = 0;
    std::vector<size_t> offsets;
    for (size_t i = 0; i < k->nparams; ++i) {
        if (!params[i]) {
            report("cuLaunchKernel of %s: parameter %zu is a null pointer", k->name, i);
            return CUDA_ERROR_INVALID_VALUE;
        }
        total = (total + 15) / 16 * 16;
        offsets.push_back(total);
        total += k->sizes[i];
    }
    auto buf = std::make_shared<std::vector<unsigned char>>(total + 16);
    for (size_t i = 0; i < k->nparams; ++i) memcpy(buf->data() + offsets[i], params[i], k->sizes[i]);
    const int dev = current->dev;
    std::shared_ptr<Library> lib = f->module->lib;
    if (st().log_launches)
        report("queue %s grid (%u,%u,%u) block (%u,%u,%u) on stream %p", k->name, gx, gy, gz, bx, by, bz, (void*)s);
    return enqueue(s, [k, lib, buf, offsets, dev, grid0 = gx, grid1 = gy, grid2 = gz, b0 = bx, b1 = by,
                       b2 = bz]() -> CUresult {
        std::vector<void*> args;
        for (size_t i = 0; i < k->nparams; ++i) {
            void* a = buf->data() + offsets[i];
            args.push_back(a);
            if (k->is_pointer[i]) {
                CUdeviceptr p;
                memcpy(&p, a, 8);
                const Alloc* al = p ? find_alloc(p, 0) : nullptr;
                if (p && (!al || al->dev != dev)) {
                    report("launch of %s: pointer parameter %zu (0x%llx) is not inside a live allocation of device %d",
                           k->name, i, p, dev);
                    return CUDA_ERROR_ILLEGAL_ADDRESS;
                }
            }
        }
        const unsigned g[3] = {grid0, grid1, grid2}, b[3] = {b0, b1, b2};
        if (++st().launches == st().fail_launch) {
            report("launch %llu (%s): failing with an illegal address as asked (SLUICE_FAKE_CUDA_FAIL_LAUNCH)",
                   (unsigned long long)st().launches, k->name);
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        }
        char err[1024] = "";
        install_segv_handler();
        sigjmp_buf jump;
        if (sigsetjmp(jump, 1) != 0) {
            kernel_jump = nullptr;
            report("launch of %s grid (%u,%u,%u) block (%u,%u,%u): illegal memory access at %p", k->name, g[0], g[1],
                   g[2], b[0], b[1], b[2], fault_address);
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        }
        kernel_jump = &jump;
        const int rc = lib->launch(k, g, b, args.data(), st().schedule, err, sizeof err);
        kernel_jump = nullptr;
        if (rc != 0) {
            report("launch of %s grid (%u,%u,%u) block (%u,%u,%u) failed: %s", k->name, g[0], g[1], g[2], b[0], b[1],
                   b[2], err);
            return CUDA_ERROR_LAUNCH_FAILED;
        }
        return CUDA_SUCCESS;
    });
}

FAKE_API int sluice_fake_range_ok(CUdeviceptr p, size_t len, int* dev) {
    LOCKED;
    const Alloc* a = find_alloc(p, len);
    if (!a) return 0;
    if (dev) *dev = a->dev;
    return 1;
}

// Test hook (not CUDA): sets the fiber schedule of later launches (0 round robin, 1
// lowest thread first) and returns the previous one.
FAKE_API int sluice_fake_set_schedule(int schedule) {
    LOCKED;
    const int old = st().schedule;
    st().schedule = schedule == 1 ? 1 : 0;
    return old;
}

FAKE_API CUresult cuCtxDestroy_v2(Ctx* c) {
    LOCKED;
    CHECK_READY;
    if (!c || !live(st().contexts, c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (c->green) {
        report("cuCtxDestroy of a green context's CUcontext (destroy the green context with cuGreenCtxDestroy)");
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    report("cuCtxDestroy of a primary context (release it with cuDevicePrimaryCtxRelease)");
    return CUDA_ERROR_INVALID_CONTEXT;
}

// Resets the device: queued work is dropped, its allocations and modules go, and a
// sticky error is cleared (the way to recover from one, as on a GPU).
FAKE_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
    LOCKED;
    CHECK_READY;
    if (d < 0 || d >= (int)st().devices.size()) return CUDA_ERROR_INVALID_DEVICE;
    Device& dev = st().devices[d];
    for (Stream* s : st().streams)
        if (s->ctx->dev == d) {
            s->done += s->queue.size();
            s->queue.clear();
        }
    for (auto it = st().allocs.begin(); it != st().allocs.end();) {
        if (it->second.dev == d) {
            munmap(it->second.map, it->second.map_len);
            dev.used -= it->second.size;
            it = st().allocs.erase(it);
        } else {
            ++it;
        }
    }
    auto& mods = st().modules;
    for (size_t i = mods.size(); i-- > 0;)
        if (mods[i]->ctx->dev == d) {
            delete mods[i];
            mods.erase(mods.begin() + (long)i);
        }
    dev.sticky = CUDA_SUCCESS;
    return CUDA_SUCCESS;
}

// Test hook (not CUDA): the `n`-th kernel launch from now (1 = the next one) fails with
// CUDA_ERROR_ILLEGAL_ADDRESS, a sticky error; 0 cancels. Same as the environment
// variable SLUICE_FAKE_CUDA_FAIL_LAUNCH=n (counted from the first launch of the process).
FAKE_API void sluice_fake_fail_launch(unsigned long long n) {
    LOCKED;
    st().fail_launch = n ? st().launches + n : 0;
}
