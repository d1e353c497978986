// Shared by the fake libcuda, libnvrtc and libcublas: result codes, the driver's object
// model, and the few functions libcuda exports for libcublas (enqueue work on a stream,
// check a device range). Not a CUDA header: only what the fakes need.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <string>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum : int {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_INVALID_RESOURCE_TYPE = 914,
    CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION = 915,
    CUDA_ERROR_UNKNOWN = 999,
};

#define FAKE_API extern "C" __attribute__((visibility("default")))

// True when SLUICE_FAKE_CUDA=1 (otherwise every fake answers "no device").
inline bool fake_enabled() {
    const char* v = getenv("SLUICE_FAKE_CUDA");
    return v && v[0] == '1' && v[1] == 0;
}

// Exported by libcuda for libcublas.
// Queues `run` on `stream` (0: the current context's default stream). `run` returns a
// CUresult; a failure becomes the device's sticky error.
FAKE_API CUresult sluice_fake_enqueue(void* stream, std::function<CUresult()>* run);
// Whether [ptr, ptr+len) lies inside one live device allocation; writes its device.
FAKE_API int sluice_fake_range_ok(CUdeviceptr ptr, size_t len, int* device);
// The context a stream belongs to (0: the current context's default stream), or null.
FAKE_API void* sluice_fake_stream_context(void* stream);
// The SMs of a green context (0 for a primary context or an unknown one).
FAKE_API unsigned sluice_fake_context_green_sms(void* ctx);
// The calling thread's current context, or null.
FAKE_API void* sluice_fake_current_context();
// Prints a message prefixed by the library's name (to stderr).
FAKE_API void sluice_fake_report(const char* lib, const char* msg);
