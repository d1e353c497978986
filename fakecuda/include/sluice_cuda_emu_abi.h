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
};
#endif
}  // namespace sluice_emu
