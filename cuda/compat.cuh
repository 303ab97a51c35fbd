// compat.cuh: the ONE place that knows whether a kernel file is compiled by nvcc for a GPU or by g++
// for the CPU emulator (cuda/emu/). Every cuda/*.cu includes it and uses only what it provides on
// both sides: DYN_SMEM(T, name) for dynamic shared memory, KLAUNCH(grid, block, smem, stream,
// kernel)(args...) to launch, VLOAD / VSTORE for vector (float4, int4, ...) memory accesses,
// BEAGLE_CUDA_EMULATOR (0 or 1), plus the CUDA headers (runtime, fp16, bf16, wmma). Hardware-only instructions go behind `#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800`
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

// UNROLL before a loop over a per-thread array with a compile-time bound: fully unrolled, every index
// is a constant and the array lives in registers. One runtime index anywhere puts the whole array in
// local memory (ptxas -v: a stack frame), and every access to it is then a memory round trip.
// test/cli/test_cuda_no_local_memory.sh checks every kernel.
#define UNROLL _Pragma("unroll")

// Vector loads / stores (float4, int4, ...: one wide instruction; the address must be aligned to the
// vector size). The emulator checks the alignment and fails the launch where the hardware would fault.
#define VLOAD(V, p) (*reinterpret_cast<const V*>(p))
#define VSTORE(V, p, v) (*reinterpret_cast<V*>(p) = (v))

#else

#include "emu/emu.h"

#define UNROLL  // the emulator's g++ unrolls what it likes; registers vs local memory is a GPU matter

#endif
