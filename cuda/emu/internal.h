// internal.h: what the emulator's two runtime files share (not for kernels or host code):
// scheduler.cpp runs launches, cudart.cpp implements the CUDA runtime API on host memory; the
// launcher validates its configuration and records errors through these functions.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>

#include <memory>

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
// Sets the message last_error_detail() returns (scheduler.cpp) for a runtime call that failed.
void set_error_detail(const char* message);

// Stream capture (cudart.cpp). capture_check: may work be queued on `s` now? cudaSuccess with
// *capturing set when `s` is capturing (the work is recorded, not run); cudaErrorStreamCaptureImplicit
// for the legacy stream while a blocking stream captures (that capture is invalidated, as the runtime
// does). capture_kernel records a launch into the graph `s` is capturing; capture_invalidate marks the
// capture of `s` failed (a launch rejected while capturing), so cudaStreamEndCapture returns no graph.
typedef void (*Thunk)(void* ctx);  // as in emu.h (the launch, scheduler.cpp)
typedef void* (*CloneCtx)(const void* ctx);
typedef void (*FreeCtx)(void* ctx);
cudaError_t launch_grid(const char* name, const void* func, dim3 grid, dim3 block, size_t smem,
                        cudaStream_t stream, Thunk thunk, void* ctx, CloneCtx clone, FreeCtx free_ctx);
struct KernelNode {
    const char* name;
    const void* func;
    dim3 grid, block;
    size_t smem;
    Thunk thunk;
    std::shared_ptr<void> ctx;  // the closure copied at capture: kernel + argument tuple
};
cudaError_t capture_check(cudaStream_t s, const char* what, bool* capturing);
void capture_kernel(cudaStream_t s, KernelNode node);
void capture_invalidate(cudaStream_t s);
// Dynamic shared memory a launch of `func` may request (cudaFuncSetAttribute raises it).
size_t func_max_dynamic_smem(const void* func);

}  // namespace beagle_emu
