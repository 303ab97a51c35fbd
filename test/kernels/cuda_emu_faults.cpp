// cuda_emu_faults.cpp -> build/test/test_emu_faults: the emulator refuses what faults on a GPU, with planted
// cases: a host pointer handed to a kernel (a pointer parameter, and a pointer member of an argument
// struct that lists its pointers), a misaligned vector load and store (VLOAD / VSTORE of int4 and
// float2), and static + dynamic shared memory over the per-block limit (48 KiB without opt-in, the
// opt-in maximum with cudaFuncSetAttribute). Each planted case must fail its launch with the stated
// error and a message naming the fault; the same kernels with correct arguments must run and compute.
#include <string>
#include <vector>

#include "testlib.h"

__global__ void scale_kernel(float* y, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

struct ScaleArgs {
    float* y;
    const float* x;
    int n;
    template <class F> void pointers(F f) const { f(y); f(x); }
};
__global__ void scale_struct_kernel(ScaleArgs a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) a.y[i] = 2.0f * a.x[i];
}

// y[i] = the int4 at byte offset `offset` of x (offset 0: aligned), stored at byte offset `out_offset`.
__global__ void vec_copy_kernel(int4* y, const int* x, int offset, int out_offset) {
    const int4 v = VLOAD(int4, reinterpret_cast<const char*>(x) + offset);
    VSTORE(int4, reinterpret_cast<char*>(y) + out_offset, v);
}
__global__ void vec2_kernel(float* y, const float* x) {  // float2 needs 8-byte alignment
    const float2 v = VLOAD(float2, x + 1);
    y[0] = v.x + v.y;
}

// 40 KiB of static shared memory plus `dyn` floats of dynamic shared memory.
__global__ void big_static_kernel(float* out, int dyn) {
    __shared__ float big[10240];
    DYN_SMEM(float, extra);
    for (int i = threadIdx.x; i < 10240; i += blockDim.x) big[i] = (float)i;
    for (int i = threadIdx.x; i < dyn; i += blockDim.x) extra[i] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = big[10239] + (dyn ? extra[dyn - 1] : 0.0f);
}

// Launch failed with error e and a message containing `what`.
static void expect_fault(cudaError_t got, cudaError_t e, const char* what, const char* name) {
    const std::string detail = beagle_emu::last_error_detail();
    CHECK(got == e, "%s: launch error %s, want %s", name, cudaGetErrorString(got), cudaGetErrorString(e));
    CHECK(detail.find(what) != std::string::npos, "%s: message '%s' does not say '%s'", name, detail.c_str(), what);
    cudaDeviceSynchronize();  // consume the pending error
    cudaGetLastError();
    beagle_emu::clear_error_detail();
}
static cudaError_t launched() {
    cudaError_t e = cudaGetLastError();
    cudaDeviceSynchronize();
    cudaGetLastError();
    return e;
}

static void test_host_pointers() {
    beagle_emu::set_check_pointers(true);
    const int n = 300;
    std::vector<float> hx(n, 1.5f), hy(n, 0.0f);
    float *dx, *dy, *pinned;
    cudaMalloc(&dx, n * 4);
    cudaMalloc(&dy, n * 4);
    cudaMallocHost(&pinned, n * 4);
    cudaMemcpy(dx, hx.data(), n * 4, cudaMemcpyHostToDevice);
    // device pointers: runs
    KLAUNCH((n + 127) / 128, 128, 0, 0, scale_kernel)(dy, dx, n);
    CHECK(launched() == cudaSuccess, "scale_kernel on device memory failed: %s", beagle_emu::last_error_detail().c_str());
    cudaMemcpy(hy.data(), dy, n * 4, cudaMemcpyDeviceToHost);
    CHECK(hy[n - 1] == 3.0f, "scale_kernel computed %g", hy[n - 1]);
    // pinned host memory is mapped into the device's address space: runs
    KLAUNCH((n + 127) / 128, 128, 0, 0, scale_kernel)(pinned, dx, n);
    CHECK(launched() == cudaSuccess, "scale_kernel into pinned memory failed: %s", beagle_emu::last_error_detail().c_str());
    CHECK(pinned[7] == 3.0f, "scale_kernel into pinned memory computed %g", pinned[7]);
    // planted: a pageable host vector as the input, as a parameter and inside a struct
    beagle_emu::set_quiet(true);
    hy.assign(n, 0.0f);
    KLAUNCH((n + 127) / 128, 128, 0, 0, scale_kernel)(dy, hx.data(), n);
    expect_fault(cudaGetLastError(), cudaErrorIllegalAddress, "argument 2 is", "host pointer parameter");
    KLAUNCH(1, 32, 0, 0, scale_struct_kernel)(ScaleArgs{hy.data(), dx, n});
    expect_fault(cudaGetLastError(), cudaErrorIllegalAddress, "a member of its struct", "host pointer in a struct");
    CHECK(hy[0] == 0.0f, "a refused launch ran anyway");
    KLAUNCH(1, 32, 0, 0, scale_struct_kernel)(ScaleArgs{dy, dx, n});
    CHECK(launched() == cudaSuccess, "scale_struct_kernel on device memory failed");
    beagle_emu::set_quiet(false);
    cudaFree(dx);
    cudaFree(dy);
    cudaFreeHost(pinned);
}

static void test_misaligned_vectors() {
    int* x;
    int4* y;
    cudaMalloc(&x, 64);
    cudaMalloc(&y, 64);
    std::vector<int> hx(16);
    for (int i = 0; i < 16; i++) hx[i] = i;
    cudaMemcpy(x, hx.data(), 64, cudaMemcpyHostToDevice);
    KLAUNCH(1, 1, 0, 0, vec_copy_kernel)(y, x, 16, 0);
    CHECK(launched() == cudaSuccess, "aligned int4 copy failed: %s", beagle_emu::last_error_detail().c_str());
    int4 got;
    cudaMemcpy(&got, y, 16, cudaMemcpyDeviceToHost);
    CHECK(got.x == 4 && got.w == 7, "aligned int4 copy read %d..%d", got.x, got.w);
    beagle_emu::set_quiet(true);
    KLAUNCH(1, 1, 0, 0, vec_copy_kernel)(y, x, 4, 0);  // planted: a load 4 bytes off
    expect_fault(cudaGetLastError(), cudaErrorLaunchFailure, "misaligned vector access", "misaligned int4 load");
    KLAUNCH(1, 1, 0, 0, vec_copy_kernel)(y, x, 0, 8);  // planted: a store 8 bytes off
    expect_fault(cudaGetLastError(), cudaErrorLaunchFailure, "misaligned vector access", "misaligned int4 store");
    KLAUNCH(1, 1, 0, 0, vec2_kernel)((float*)y, (const float*)x);  // planted: float2 at a 4-byte offset
    expect_fault(cudaGetLastError(), cudaErrorLaunchFailure, "8-byte aligned", "misaligned float2 load");
    beagle_emu::set_quiet(false);
    cudaFree(x);
    cudaFree(y);
}

static void test_shared_memory_limit() {
    float* out;
    cudaMalloc(&out, 4);
    // 40 KiB static + 4 KiB dynamic: fits 48 KiB (the first launch measures the static size)
    KLAUNCH(1, 128, 4096, 0, big_static_kernel)(out, 1024);
    CHECK(launched() == cudaSuccess, "40 + 4 KiB failed: %s", beagle_emu::last_error_detail().c_str());
    float got = 0;
    cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost);
    CHECK(got == 10240.0f, "big_static_kernel computed %g", got);
    beagle_emu::set_quiet(true);
    // planted: 40 KiB static + 12 KiB dynamic > 48 KiB (each alone is within its limit)
    KLAUNCH(1, 128, 12288, 0, big_static_kernel)(out, 3072);
    expect_fault(cudaGetLastError(), cudaErrorInvalidValue, "exceed the 49152-byte limit", "static + dynamic > 48 KiB");
    // opt-in: the dynamic limit raised to 64 KiB, 40 + 64 KiB fits the opt-in maximum
    CHECK(cudaFuncSetAttribute(big_static_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536) == cudaSuccess,
          "cudaFuncSetAttribute failed");
    KLAUNCH(1, 128, 65536, 0, big_static_kernel)(out, 16384);
    CHECK(launched() == cudaSuccess, "40 + 64 KiB with opt-in failed: %s", beagle_emu::last_error_detail().c_str());
    // planted: the opt-in maximum of dynamic memory on top of the 40 KiB static
    const int optin = 166912;
    CHECK(cudaFuncSetAttribute(big_static_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) == cudaSuccess,
          "cudaFuncSetAttribute to the opt-in maximum failed");
    KLAUNCH(1, 128, optin, 0, big_static_kernel)(out, optin / 4);
    expect_fault(cudaGetLastError(), cudaErrorInvalidValue, "exceed the 166912-byte limit", "static + opt-in maximum");
    beagle_emu::set_quiet(false);
    cudaFree(out);
}

int main() {
    test_host_pointers();
    test_misaligned_vectors();
    test_shared_memory_limit();
    return test_summary("test_emu_faults");
}
