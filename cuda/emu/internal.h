// internal.h: what the emulator's two runtime files share (not for kernels or host code):
// scheduler.cpp runs launches, cudart.cpp implements the CUDA runtime API on host memory; the
// launcher validates its configuration and records errors through these functions.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>

namespace beagle_emu {

// The emulated device: an A100-like sm_80 (the stricter of the project's two targets).
constexpr int kDevMajor = 8, kDevMinor = 0;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxBlockDimX = 1024, kMaxBlockDimY = 1024, kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridDimX = 2147483647u, kMaxGridDimY = 65535u, kMaxGridDimZ = 65535u;
constexpr size_t kSmemPerBlock = 48 * 1024;        // default dynamic+static limit per block
constexpr size_t kSmemPerBlockOptin = 166912;      // cudaFuncAttributeMaxDynamicSharedMemorySize cap

// Per-host-thread last error (cudaGetLastError / cudaPeekAtLastError) and the launch failure the
// next synchronize call reports.
void set_last_error(cudaError_t e);
void set_pending_launch_error(cudaError_t e);

bool stream_is_valid(cudaStream_t s);
// Dynamic shared memory a launch of `func` may request (cudaFuncSetAttribute raises it).
size_t func_max_dynamic_smem(const void* func);

}  // namespace beagle_emu
