// The table a compiled kernel module exports, as the fake libcuda reads it. The
// emulation header (sluice_cuda_emu.h) defines the same struct for the module side.
#pragma once
#include <cstddef>

namespace sluice_emu {
#ifndef SLUICE_EMU_KERNEL_DESC
#define SLUICE_EMU_KERNEL_DESC
struct KernelDesc {
    const char* name;
    void (*invoke)(void** args);
    size_t nparams;
    const size_t* sizes;
    const unsigned char* is_pointer;
    // The kernel's `__launch_bounds__` (its first argument), or 0 if it has none.
    unsigned max_threads;
};
#endif
}  // namespace sluice_emu
