// The fake libcuda's object model, shared by its translation units: devices, contexts
// (primary and green), lazy streams, events, allocations and loaded kernel modules.
// Every entry point takes the one global lock, and work queued on a stream runs (on the
// thread that waits for it) only when something waits on it.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fake_internal.h"
#include "../include/sluice_cuda_emu_abi.h"

namespace fake {

struct Ctx;

struct Device {
    unsigned sms = 132;
    uint64_t total = 0, used = 0;
    Ctx* primary = nullptr;
    int primary_refs = 0;
    CUresult sticky = CUDA_SUCCESS;  // an error that poisons every context of the device
};

struct Stream;

struct Ctx {
    int dev = 0;
    bool green = false;
    unsigned sms = 0;
    Stream* legacy = nullptr;  // the NULL stream of this context
};

struct Green {
    Ctx* ctx;
};

struct Stream {
    Ctx* ctx;
    int priority = 0;
    unsigned flags = 0;
    std::deque<std::function<CUresult()>> queue;
    uint64_t enqueued = 0, done = 0;
    bool running = false;
};

struct Event {
    Ctx* ctx;
    unsigned flags;
    Stream* stream = nullptr;  // of the last record
    uint64_t seq = 0;          // the record's position in that stream
    bool recorded = false, fired = false;
    double ms = 0;
};

struct Alloc {
    CUdeviceptr base;
    size_t size;
    void* map;
    size_t map_len;
    int dev;
};

struct Library {
    void* handle;
    const sluice_emu::KernelDesc* kernels;
    size_t count;
    int (*launch)(const sluice_emu::KernelDesc*, const unsigned*, const unsigned*, void**, int, char*, size_t);
};

struct Module;
struct Function {
    Module* module;
    const sluice_emu::KernelDesc* desc;
};

struct Module {
    Ctx* ctx;
    std::shared_ptr<Library> lib;
    std::map<std::string, std::unique_ptr<Function>> functions;
};

struct State {
    std::recursive_mutex lock;
    bool initialised = false;
    std::vector<Device> devices;
    std::map<CUdeviceptr, Alloc> allocs;  // by base
    std::map<void*, size_t> host_allocs;  // pinned host memory (cuMemHostAlloc)
    std::map<void*, size_t> registered;   // cuMemHostRegister ranges
    uint64_t launches = 0;                // kernels run so far
    uint64_t fail_launch = 0;             // the launch that fails on purpose (0: none)
    std::vector<Stream*> streams;
    std::vector<Event*> events;
    std::vector<Module*> modules;
    std::vector<Ctx*> contexts;
    std::vector<Green*> greens;
    std::map<std::string, std::weak_ptr<Library>> libraries;
    int schedule = 0;
    bool log_launches = false;
    std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();
};

State& st();
using Guard = std::lock_guard<std::recursive_mutex>;
extern thread_local Ctx* current;

template <typename T>
bool live(const std::vector<T*>& v, const void* p) {
    for (T* x : v)
        if (x == p) return true;
    return false;
}

// Checks called at the top of most entry points.
CUresult ready();
Device& device_of(Ctx* c);
Stream* stream_of(void* handle);  // null stream -> the current context's legacy stream
const Alloc* find_alloc(CUdeviceptr p, size_t len);
CUresult enqueue(Stream* s, std::function<CUresult()> run);
// Runs `s`'s queue up to position `upto` (all of it for UINT64_MAX).
CUresult drain(Stream* s, uint64_t upto);
CUresult drain_context(Ctx* c);
CUresult drain_all();
double now_ms();
bool valid_dev(CUdevice d);
Stream* new_stream(Ctx* c, unsigned flags, int priority);
Ctx* new_ctx(int dev, bool green, unsigned sms);
void report(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace fake
