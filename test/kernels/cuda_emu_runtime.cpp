// cuda_emu_runtime.cpp -> build/test/test_emu_runtime: the CUDA runtime API of the emulator
// (cuda/emu/cudart.cpp) behaves like the real runtime for the calls the CUDA backend uses: device
// queries, memory (round trips, null / foreign pointers, out of memory), streams, events, and
// launch configuration errors reported through cudaGetLastError without running the kernel.
#include "testlib.h"

#include <unistd.h>

#include <vector>

#define CHECK_ERR(expr, want)                                                                         \
    do {                                                                                              \
        const cudaError_t e_ = (expr);                                                                \
        CHECK(e_ == (want), "%s returned %s (%s), want %s", #expr, cudaGetErrorName(e_), cudaGetErrorString(e_), \
              cudaGetErrorName(want));                                                                \
    } while (0)

static void test_device() {
    int n = -1, dev = -1;
    CHECK_ERR(cudaGetDeviceCount(&n), cudaSuccess);
    CHECK(n == 1, "device count %d", n);
    CHECK_ERR(cudaSetDevice(0), cudaSuccess);
    CHECK_ERR(cudaGetDevice(&dev), cudaSuccess);
    CHECK(dev == 0, "device %d", dev);
    CHECK_ERR(cudaSetDevice(1), cudaErrorInvalidDevice);
    CHECK_ERR(cudaPeekAtLastError(), cudaErrorInvalidDevice);  // peek does not clear
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
    CHECK_ERR(cudaGetLastError(), cudaSuccess);                // get does
    cudaDeviceProp p;
    CHECK_ERR(cudaGetDeviceProperties(&p, 0), cudaSuccess);
    CHECK(p.major == 8 && p.minor == 0 && p.warpSize == 32 && p.maxThreadsPerBlock == 1024, "props %d.%d", p.major, p.minor);
    CHECK(p.sharedMemPerBlock == 48 * 1024 && p.sharedMemPerBlockOptin > p.sharedMemPerBlock && p.multiProcessorCount >= 1,
          "smem %zu / %zu", p.sharedMemPerBlock, p.sharedMemPerBlockOptin);
    CHECK_ERR(cudaGetDeviceProperties(&p, 3), cudaErrorInvalidDevice);
    int v = 0;
    CHECK_ERR(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
    CHECK(v == (int)p.sharedMemPerBlockOptin, "optin %d", v);
    CHECK(!strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument"), "error string");
    CHECK(!strcmp(cudaGetErrorString(cudaErrorInvalidConfiguration), "invalid configuration argument"), "error string");
    CHECK(!strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation"), "error name");
    cudaGetLastError();
}

static void test_memory() {
    const int n = 1000;
    std::vector<float> h(n), back(n, 0.0f);
    for (int i = 0; i < n; i++) h[i] = 0.25f * i;
    float *d = nullptr, *d2 = nullptr;
    CHECK_ERR(cudaMalloc((void**)&d, n * sizeof(float)), cudaSuccess);
    CHECK_ERR(cudaMalloc((void**)&d2, n * sizeof(float)), cudaSuccess);
    CHECK(d && d2 && ((uintptr_t)d % 256) == 0, "allocation aligned to 256");
    CHECK_ERR(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    CHECK_ERR(cudaMemcpy(d2, d, n * sizeof(float), cudaMemcpyDeviceToDevice), cudaSuccess);
    CHECK_ERR(cudaMemcpy(back.data(), d2, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK(back == h, "round trip");
    CHECK_ERR(cudaMemset(d2, 0, n * sizeof(float)), cudaSuccess);
    CHECK_ERR(cudaMemcpy(back.data(), d2, n * sizeof(float), cudaMemcpyDefault), cudaSuccess);
    CHECK(back[0] == 0.0f && back[n - 1] == 0.0f, "memset");
    // 2D copy: a 3 x 4 window out of a pitched host array
    std::vector<float> pitched(5 * 8);
    for (int i = 0; i < 40; i++) pitched[i] = (float)i;
    CHECK_ERR(cudaMemcpy2D(d, 4 * sizeof(float), pitched.data() + 1, 8 * sizeof(float), 4 * sizeof(float), 3,
                           cudaMemcpyHostToDevice), cudaSuccess);
    CHECK(d[0] == 1 && d[3] == 4 && d[4] == 9 && d[11] == 20, "memcpy2D");

    // errors, like the real runtime
    CHECK_ERR(cudaMemcpy(nullptr, h.data(), 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    CHECK_ERR(cudaMemcpy(d, nullptr, 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    CHECK_ERR(cudaMemcpy(back.data(), h.data(), 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // dst not device
    CHECK_ERR(cudaMemcpy(back.data(), h.data(), 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);  // src not device
    CHECK_ERR(cudaMemcpy(d, h.data(), (n + 1) * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // overrun
    CHECK_ERR(cudaMemcpy(d, h.data(), 4, (cudaMemcpyKind)42), cudaErrorInvalidMemcpyDirection);
    CHECK_ERR(cudaMemcpy(d, h.data(), 0, cudaMemcpyHostToDevice), cudaSuccess);  // nothing to do
    CHECK_ERR(cudaMemset(h.data(), 0, 4), cudaErrorInvalidValue);
    CHECK_ERR(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
    CHECK_ERR(cudaFree(h.data()), cudaErrorInvalidValue);
    CHECK_ERR(cudaFree(d + 1), cudaErrorInvalidValue);
    CHECK_ERR(cudaFree(nullptr), cudaSuccess);

    size_t free0 = 0, total = 0, free1 = 0;
    CHECK_ERR(cudaMemGetInfo(&free0, &total), cudaSuccess);
    void* big = nullptr;
    CHECK_ERR(cudaMalloc(&big, total + 1), cudaErrorMemoryAllocation);
    CHECK(big == nullptr, "failed cudaMalloc leaves null");
    CHECK_ERR(cudaFree(d), cudaSuccess);
    CHECK_ERR(cudaFree(d), cudaErrorInvalidValue);  // double free
    CHECK_ERR(cudaMemGetInfo(&free1, &total), cudaSuccess);
    CHECK(free1 == free0 + n * sizeof(float), "free %zu -> %zu", free0, free1);
    CHECK_ERR(cudaFree(d2), cudaSuccess);

    void* pinned = nullptr;
    CHECK_ERR(cudaMallocHost(&pinned, 100), cudaSuccess);
    CHECK_ERR(cudaFreeHost(pinned), cudaSuccess);
    cudaGetLastError();
}

__global__ void fill(int* out, int v) { out[blockIdx.x * blockDim.x + threadIdx.x] = v; }
__global__ void fill_dyn(int* out) {
    DYN_SMEM(int, s);
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

static void test_launch_errors() {
    std::vector<int> out(4096, 0);
    KLAUNCH(1, 1025, 0, 0, fill)(out.data(), 1);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
    KLAUNCH(1, dim3(32, 32, 2), 0, 0, fill)(out.data(), 1);  // 2048 threads
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
    KLAUNCH(1, dim3(1, 1, 65), 0, 0, fill)(out.data(), 1);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
    KLAUNCH(0, 32, 0, 0, fill)(out.data(), 1);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
    KLAUNCH(dim3(1, 65536), 32, 0, 0, fill)(out.data(), 1);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
    int ran = 0;
    for (int v : out) ran += v != 0;
    CHECK(ran == 0, "rejected launches must not run (%d writes)", ran);
    CHECK(beagle_emu::last_error_detail().find("'fill'") != std::string::npos, "detail names the kernel: %s",
          beagle_emu::last_error_detail().c_str());

    // dynamic shared memory: 48 KiB by default, more after cudaFuncSetAttribute, never above the opt-in cap
    KLAUNCH(1, 32, 48 * 1024 + 4, 0, fill_dyn)(out.data());
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    KLAUNCH(1, 32, 48 * 1024, 0, fill_dyn)(out.data());
    CHECK_ERR(cudaGetLastError(), cudaSuccess);
    CHECK(out[0] == 31 && out[31] == 0, "fill_dyn ran");
    CHECK_ERR(cudaFuncSetAttribute(fill_dyn, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024), cudaSuccess);
    KLAUNCH(1, 32, 100 * 1024, 0, fill_dyn)(out.data());
    CHECK_ERR(cudaGetLastError(), cudaSuccess);
    CHECK_ERR(cudaFuncSetAttribute(fill_dyn, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 20), cudaErrorInvalidValue);
    cudaFuncAttributes fa;
    CHECK_ERR(cudaFuncGetAttributes(&fa, (const void*)fill_dyn), cudaSuccess);
    CHECK(fa.maxDynamicSharedSizeBytes == 100 * 1024, "attr %d", fa.maxDynamicSharedSizeBytes);

    // a successful launch does not clear an earlier error
    CHECK_ERR(cudaSetDevice(7), cudaErrorInvalidDevice);
    KLAUNCH(1, 32, 0, 0, fill)(out.data(), 2);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
    CHECK(out[5] == 2, "launch ran");
}

static void test_streams_events() {
    cudaStream_t s;
    CHECK_ERR(cudaStreamCreate(&s), cudaSuccess);
    int* d = nullptr;
    CHECK_ERR(cudaMalloc((void**)&d, 64 * sizeof(int)), cudaSuccess);
    std::vector<int> h(64, 0);
    KLAUNCH(2, 32, 0, s, fill)(d, 9);
    CHECK_ERR(cudaGetLastError(), cudaSuccess);
    CHECK_ERR(cudaMemcpyAsync(h.data(), d, 64 * sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
    CHECK_ERR(cudaMemsetAsync(d, 0, 64 * sizeof(int), s), cudaSuccess);
    CHECK_ERR(cudaStreamSynchronize(s), cudaSuccess);
    CHECK(h[0] == 9 && h[63] == 9, "stream work");

    cudaEvent_t a, b, untimed, never;
    CHECK_ERR(cudaEventCreate(&a), cudaSuccess);
    CHECK_ERR(cudaEventCreate(&b), cudaSuccess);
    CHECK_ERR(cudaEventCreate(&never), cudaSuccess);
    CHECK_ERR(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
    CHECK_ERR(cudaEventRecord(a, s), cudaSuccess);
    usleep(20000);
    CHECK_ERR(cudaEventRecord(b, s), cudaSuccess);
    CHECK_ERR(cudaEventRecord(untimed, s), cudaSuccess);
    CHECK_ERR(cudaEventSynchronize(b), cudaSuccess);
    float ms = -1;
    CHECK_ERR(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
    CHECK(ms >= 19.0f && ms < 2000.0f, "elapsed %f ms for a 20 ms sleep", ms);
    CHECK_ERR(cudaEventElapsedTime(&ms, a, untimed), cudaErrorInvalidResourceHandle);
    CHECK_ERR(cudaEventElapsedTime(&ms, a, never), cudaErrorInvalidResourceHandle);
    CHECK_ERR(cudaStreamWaitEvent(s, b, 0), cudaSuccess);
    for (cudaEvent_t e : {a, b, untimed, never}) CHECK_ERR(cudaEventDestroy(e), cudaSuccess);

    CHECK_ERR(cudaStreamDestroy(s), cudaSuccess);
    KLAUNCH(1, 32, 0, s, fill)(d, 1);  // destroyed stream
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    CHECK_ERR(cudaMemcpyAsync(h.data(), d, 4, cudaMemcpyDeviceToHost, s), cudaErrorInvalidResourceHandle);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);  // failing API calls set the last error too
    KLAUNCH(1, 32, 0, cudaStreamPerThread, fill)(d, 1);
    CHECK_ERR(cudaGetLastError(), cudaSuccess);
    CHECK_ERR(cudaFree(d), cudaSuccess);
    CHECK_ERR(cudaDeviceSynchronize(), cudaSuccess);
}

// `test_emu_runtime --oob`: a kernel that writes past the end of a cudaMalloc buffer (missing bound
// check); test/cli/test_emu_valgrind.sh expects memcheck to report it at this file's line.
__global__ void write_past_end(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f; }
static int run_out_of_bounds() {
    float* d = nullptr;
    cudaMalloc((void**)&d, 100 * sizeof(float));
    KLAUNCH(1, 128, 0, 0, write_past_end)(d);
    cudaFree(d);
    return 0;
}

int main(int argc, char** argv) {
    beagle_emu::set_check_pointers(false);  // these kernels run on host vectors (legal in the emulator only)
    if (argc > 1 && !strcmp(argv[1], "--oob")) return run_out_of_bounds();
    test_device();
    test_memory();
    test_launch_errors();
    test_streams_events();
    return test_summary("test_emu_runtime");
}
