// sluice CUDA emulation header: lets the host C++ compiler build the backend's kernel
// sources (src/kernels/*.cu, exactly as the backend hands them to NVRTC) into a shared
// object that the fake libcuda runs on the CPU.
//
// Model: every CUDA thread of a block is a fiber with its own stack (x86-64 context
// switch below); the blocks of a grid run one after another, so a `__shared__` variable
// (a function-local static) is per block. `__syncthreads` is a block barrier and
// `__shfl_xor_sync` goes through a per-warp scratch row and a warp barrier (warp size
// 32). Two schedules pick the next fiber: round robin (resume the next thread after the
// one that stopped) and lowest thread first (always resume the lowest runnable thread,
// which makes a thread race ahead of the others and exposes a missing barrier). A
// deadlocked barrier, a barrier some threads skip by exiting, or a shuffle whose mask
// names lanes that do not exist or have exited fails the launch with a message.
//
// The fake NVRTC compiles a source twice: once with SLUICE_EMU_SCAN through the
// preprocessor only, to list the `__global__` functions, then for real with a table of
// the kernels appended (SLUICE_EMU_REGISTER): name, parameter sizes, which parameters
// are pointers, and a trampoline that unpacks `void** args` into a call.
#pragma once
#ifndef __x86_64__
#error "the sluice CUDA emulator needs x86-64 (hand-written fiber switch)"
#endif

#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <type_traits>
#include <utility>

#define SLUICE_CUDA_EMU 1
#include "sluice_cuda_emu_abi.h"
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
// The scan pass (SLUICE_EMU_SCAN) keeps the bound visible for the kernel table.
#ifdef SLUICE_EMU_SCAN
#define __launch_bounds__(...) SLUICE_LAUNCH_BOUNDS(__VA_ARGS__)
#else
#define __launch_bounds__(...)
#endif
// Blocks run one after another, so one static instance is exactly "one per block".
#define __shared__ static
#ifdef SLUICE_EMU_SCAN
#define __global__ SLUICE_KERNEL_MARK
#else
#define __global__
#endif

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
};

namespace sluice_emu {

enum State : unsigned char { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

struct Fiber {
    void* sp;
    uint3 tid;
    unsigned linear;
    State state;
};

struct Warp {
    unsigned exists;   // lanes that exist in the block
    unsigned exited;   // lanes whose thread returned
    unsigned arrived;  // lanes waiting at the current shuffle
    unsigned mask;     // the mask the first arriving lane gave
    unsigned rounds;   // shuffles completed (picks the scratch row)
    unsigned long long vals[2][32];
};

constexpr size_t kStack = 64 * 1024;
constexpr size_t kGuard = 4096;
constexpr unsigned kMaxThreads = 1024;

inline Fiber* cur = nullptr;
inline uint3 block_idx, block_dim, grid_dim;
inline Fiber fibers[kMaxThreads];
inline Warp warps[kMaxThreads / 32];
inline unsigned n_threads = 0, live = 0, at_block = 0, hint = 0, rr_next = 0;
inline int schedule = 0;  // 0 round robin, 1 lowest thread first
inline void* sched_sp = nullptr;
inline void (*body)(void**) = nullptr;
inline void** body_args = nullptr;
inline char* err_buf = nullptr;
inline size_t err_len = 0;
inline bool failed = false;
inline unsigned char* stacks[kMaxThreads];

}  // namespace sluice_emu

extern "C" __attribute__((visibility("hidden"))) void sluice_emu_switch(void** save_sp, void* next_sp);
// Saves the callee-saved registers on the current stack, stores the stack pointer in
// *save_sp and resumes the stack next_sp. MXCSR and the x87 control word are not
// switched: kernels never change them, so every fiber shares the launching thread's.
asm(R"(
    .text
    .p2align 4
    .globl sluice_emu_switch
    .hidden sluice_emu_switch
    .type sluice_emu_switch,@function
sluice_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size sluice_emu_switch, .-sluice_emu_switch
)");

namespace sluice_emu {

[[gnu::format(printf, 1, 2)]] inline void fail(const char* fmt, ...);

inline void yield() {
    sluice_emu_switch(&cur->sp, sched_sp);
}

// Records the first failure and abandons the fiber (its stack is simply reused).
inline void fail(const char* fmt, ...) {
    if (!failed) {
        failed = true;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err_buf, err_len, fmt, ap);
        va_end(ap);
    }
    for (;;) yield();
}

// The lanes of the warp of `linear` that exist in the block and have not exited.
inline unsigned live_lanes(unsigned warp) { return warps[warp].exists & ~warps[warp].exited; }

// "N at __syncthreads (t..), M at __shfl_xor_sync (t..); warp w waits for lanes ...".
inline void describe_block(char* out, size_t len) {
    static const char* names[] = {"runnable", "__syncthreads", "__shfl_xor_sync", "exited"};
    size_t used = 0;
    for (int st = AT_BLOCK_BARRIER; st <= DONE; ++st) {
        unsigned count = 0, shown = 0;
        for (unsigned i = 0; i < n_threads; ++i)
            if (fibers[i].state == st) ++count;
        if (!count || used + 80 > len) continue;
        used += snprintf(out + used, len - used, " %u thread(s) %s%s (", count, st == DONE ? "" : "at ", names[st]);
        for (unsigned i = 0; i < n_threads && shown < 6 && used + 16 < len; ++i)
            if (fibers[i].state == st) used += snprintf(out + used, len - used, "%st%u", shown++ ? " " : "", i);
        if (used + 8 < len) used += snprintf(out + used, len - used, "%s);", count > shown ? " ..." : "");
    }
    for (unsigned w = 0; w < (n_threads + 31) / 32 && used + 96 < len; ++w)
        if (warps[w].arrived)
            used += snprintf(out + used, len - used, " warp %u: shuffle mask 0x%08x, arrived 0x%08x, live 0x%08x;", w,
                             warps[w].mask, warps[w].arrived, live_lanes(w));
}

[[noreturn]] inline void fiber_entry() {
    body(body_args);
    Fiber* me = cur;
    me->state = DONE;
    warps[me->linear >> 5].exited |= 1u << (me->linear & 31);
    --live;
    if (at_block > 0 && !failed) {
        fail("thread (%u,%u,%u) of block (%u,%u,%u) exited while %u thread(s) wait at __syncthreads (divergent barrier)",
             me->tid.x, me->tid.y, me->tid.z, block_idx.x, block_idx.y, block_idx.z, at_block);
    }
    const Warp& w = warps[me->linear >> 5];
    if (w.arrived != 0 && (w.mask >> (me->linear & 31)) & 1u) {
        fail("thread %u exited while its warp waits for it at __shfl_xor_sync (mask 0x%08x)", me->linear, w.mask);
    }
    for (;;) yield();
}

inline void release(unsigned i) {
    fibers[i].state = RUNNABLE;
    if (i < hint) hint = i;
}

inline void syncthreads() {
    cur->state = AT_BLOCK_BARRIER;
    if (++at_block == live) {
        at_block = 0;
        for (unsigned i = 0; i < n_threads; ++i)
            if (fibers[i].state == AT_BLOCK_BARRIER) release(i);
    }
    yield();
}

template <typename T>
inline T shfl_xor(unsigned mask, T v, int lane_mask) {
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
    Fiber* me = cur;
    const unsigned lane = me->linear & 31, warp = me->linear >> 5;
    Warp& w = warps[warp];
    if (!((mask >> lane) & 1u)) fail("thread %u calls __shfl_xor_sync with mask 0x%08x that excludes its lane %u", me->linear, mask, lane);
    const unsigned alive = live_lanes(warp);
    if ((mask & ~alive) != 0) {
        fail("__shfl_xor_sync mask 0x%08x in warp %u of block (%u,%u,%u) names lanes that do not exist or exited (live 0x%08x)",
             mask, warp, block_idx.x, block_idx.y, block_idx.z, alive);
    }
    if (w.arrived != 0 && w.mask != mask) fail("__shfl_xor_sync in warp %u with masks 0x%08x and 0x%08x", warp, w.mask, mask);
    const unsigned row = w.rounds & 1u;
    unsigned long long slot = 0;
    memcpy(&slot, &v, sizeof(T));
    w.vals[row][lane] = slot;
    w.mask = mask;
    w.arrived |= 1u << lane;
    me->state = AT_WARP_BARRIER;
    if (w.arrived == mask) {
        w.arrived = 0;
        ++w.rounds;
        for (unsigned m = mask; m; m &= m - 1) release(warp * 32 + (unsigned)__builtin_ctz(m));
    }
    yield();
    const unsigned src = lane ^ (unsigned)(lane_mask & 31);
    if (!((mask >> src) & 1u)) fail("__shfl_xor_sync reads lane %u outside mask 0x%08x", src, mask);
    T r;
    memcpy(&r, &w.vals[row][src], sizeof(T));
    return r;
}

inline unsigned char* stack(unsigned i) {
    if (!stacks[i]) {
        void* p = mmap(nullptr, kStack + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        mprotect(p, kGuard, PROT_NONE);  // stacks grow down: the guard is below
        stacks[i] = static_cast<unsigned char*>(p);
    }
    return stacks[i];
}

inline void init_fiber(unsigned i) {
    // Tops staggered by a cache line each: identical offsets would all map to the same
    // cache sets and make every switch a miss.
    unsigned char* top = stack(i) + kGuard + kStack - (i * 64) % 4096;
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;                                             // fake return address of fiber_entry
    *--sp = reinterpret_cast<void*>(&fiber_entry);               // where `ret` goes
    for (int r = 0; r < 6; ++r) *--sp = nullptr;                 // rbp rbx r12 r13 r14 r15
    fibers[i].sp = sp;
}

inline unsigned pick() {
    if (schedule == 1) {
        for (unsigned i = hint; i < n_threads; ++i)
            if (fibers[i].state == RUNNABLE) return hint = i;
        return n_threads;
    }
    unsigned i = rr_next >= n_threads ? 0 : rr_next;
    for (unsigned k = 0; k < n_threads; ++k) {
        if (fibers[i].state == RUNNABLE) {
            rr_next = i + 1;
            return i;
        }
        if (++i == n_threads) i = 0;
    }
    return n_threads;
}

// Runs one block to completion; false (with err_buf filled) on a failure.
inline bool run_block() {
    live = n_threads;
    at_block = hint = rr_next = 0;
    for (unsigned w = 0; w < (n_threads + 31) / 32; ++w) {
        warps[w] = Warp{};
        const unsigned lanes = n_threads - w * 32 >= 32 ? 32 : n_threads - w * 32;
        warps[w].exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    }
    for (unsigned i = 0; i < n_threads; ++i) {
        fibers[i].state = RUNNABLE;
        fibers[i].linear = i;
        fibers[i].tid = uint3{i % block_dim.x, (i / block_dim.x) % block_dim.y, i / (block_dim.x * block_dim.y)};
        init_fiber(i);
    }
    while (live > 0 && !failed) {
        const unsigned t = pick();
        if (t == n_threads) {
            char states[700] = "";
            describe_block(states, sizeof states);
            snprintf(err_buf, err_len, "deadlock in block (%u,%u,%u): no thread can run;%s", block_idx.x, block_idx.y,
                     block_idx.z, states);
            failed = true;
            break;
        }
        cur = &fibers[t];
        sluice_emu_switch(&sched_sp, cur->sp);
    }
    cur = nullptr;
    return !failed;
}

template <auto F>
struct Kernel;
template <typename... A, void (*F)(A...)>
struct Kernel<F> {
    template <size_t... I>
    static void call(void** args, std::index_sequence<I...>) {
        F(*static_cast<std::decay_t<A>*>(args[I])...);
    }
    static void invoke(void** args) { call(args, std::index_sequence_for<A...>{}); }
    static constexpr size_t n = sizeof...(A);
    static constexpr size_t sizes[n + 1] = {sizeof(std::decay_t<A>)..., 0};
    static constexpr unsigned char ptrs[n + 1] = {(unsigned char)std::is_pointer<std::decay_t<A>>::value..., 0};
};

}  // namespace sluice_emu

// Runs `k` over the grid. Returns 0, or -1 with a message in `err`. Not reentrant: the
// driver serialises launches.
extern "C" __attribute__((visibility("default"), used)) int sluice_emu_launch(const sluice_emu::KernelDesc* k,
                                                                               const unsigned* grid,
                                                                               const unsigned* block, void** args,
                                                                               int schedule, char* err,
                                                                               size_t errlen) {
    using namespace sluice_emu;
    const unsigned threads = block[0] * block[1] * block[2];
    if (threads == 0 || threads > kMaxThreads) {
        snprintf(err, errlen, "block of %u threads", threads);
        return -1;
    }
    for (unsigned i = 0; i < threads; ++i)
        if (!stack(i)) {
            snprintf(err, errlen, "out of memory for fiber stacks");
            return -1;
        }
    sluice_emu::schedule = schedule;
    err_buf = err;
    err_len = errlen;
    failed = false;
    body = k->invoke;
    body_args = args;
    n_threads = threads;
    block_dim = uint3{block[0], block[1], block[2]};
    grid_dim = uint3{grid[0], grid[1], grid[2]};
    for (unsigned z = 0; z < grid[2]; ++z)
        for (unsigned y = 0; y < grid[1]; ++y)
            for (unsigned x = 0; x < grid[0]; ++x) {
                block_idx = uint3{x, y, z};
                if (!run_block()) return -1;
            }
    return 0;
}

#define threadIdx (::sluice_emu::cur->tid)
#define blockIdx (::sluice_emu::block_idx)
#define blockDim (::sluice_emu::block_dim)
#define gridDim (::sluice_emu::grid_dim)
#define warpSize 32

inline void __syncthreads() { sluice_emu::syncthreads(); }
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    if (width != 32) sluice_emu::fail("__shfl_xor_sync with width %d is not emulated", width);
    return sluice_emu::shfl_xor(mask, v, lane_mask);
}

inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
inline int __float_as_int(float f) { int v; memcpy(&v, &f, 4); return v; }
inline float __uint_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned v; memcpy(&v, &f, 4); return v; }
inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
inline long long __double_as_longlong(double d) { long long v; memcpy(&v, &d, 8); return v; }
// double -> float rounding toward zero.
inline float __double2float_rz(double d) {
    float f = (float)d;
    if (std::isfinite(d) && std::fabs((double)f) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    if (std::isinf(f) && std::isfinite(d)) f = std::copysign(3.40282347e38f, f);
    return f;
}

namespace sluice_emu {
// IEEE binary16 <-> f32, round to nearest even (what PTX cvt.rn.f16.f32 does; cvt.f32.f16 is exact).
inline float half_to_float(unsigned short h) {
    const unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    unsigned bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
        if (man) bits |= 0x400000u;  // quiet NaN
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        float f = (float)man * 5.9604644775390625e-8f;  // 2^-24
        return sign ? -f : f;
    }
    return __uint_as_float(bits);
}
inline unsigned short float_to_half(float f) {
    const unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u;
    const unsigned a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN stays NaN
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);                          // overflow to inf
    if (a < 0x38800000u) {                                                                  // subnormal or zero
        const float s = __uint_as_float(a) * 16777216.0f;                                     // in units of 2^-24
        return (unsigned short)(sign | (unsigned)std::nearbyint(s));
    }
    unsigned r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
    return (unsigned short)(sign | (r >> 13));
}
}  // namespace sluice_emu

#define SLUICE_EMU_REGISTER(NAME, BOUND)                                                                 \
    ::sluice_emu::KernelDesc {                                                                           \
        #NAME, &::sluice_emu::Kernel<&NAME>::invoke, ::sluice_emu::Kernel<&NAME>::n,                     \
            ::sluice_emu::Kernel<&NAME>::sizes, ::sluice_emu::Kernel<&NAME>::ptrs, (unsigned)(BOUND)     \
    }
