// compat.cuh: the ONE place that knows whether a kernel file is compiled by nvcc for a GPU or by g++
// for the CPU emulator (cuda/emu/). Every cuda/*.cu includes it and uses only what it provides on
// both sides: DYN_SMEM(T, name) for dynamic shared memory, KLAUNCH(grid, block, smem, stream,
// kernel)(args...) to launch, BEAGLE_CUDA_EMULATOR (0 or 1), plus the CUDA headers (runtime, fp16,
// bf16, wmma). Hardware-only instructions go behind `#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800`
// with a portable fallback: the emulator never defines __CUDA_ARCH__, so it runs the fallback.
#pragma once

#if defined(__CUDACC__)

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>

#define BEAGLE_CUDA_EMULATOR 0

// Dynamic shared memory sized by the launch; one extern array shared by all kernels.
#define DYN_SMEM(T, name)                                              \
    extern __shared__ __align__(16) unsigned char beagle_dyn_smem[]; \
    T* name = reinterpret_cast<T*>(beagle_dyn_smem)

// KLAUNCH(grid, block, smem, stream, kernel<T>)(args...) == kernel<T><<<grid, block, smem, stream>>>(args...)
#define KLAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>

#else

#include "emu/emu.h"

#endif
