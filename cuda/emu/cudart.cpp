// cudart.cpp: the CUDA runtime API of the CPU emulator, on host memory. Host code written for the
// real runtime (declarations from the toolkit's cuda_runtime_api.h) links against this instead of
// libcudart, so `make cuda-emu` can run the CUDA backend's host code without a GPU. Device memory
// is host memory; streams and events execute synchronously; errors follow the real runtime
// (null or foreign pointers -> cudaErrorInvalidValue, bad device -> cudaErrorInvalidDevice, ...),
// and each failing call sets the per-host-thread last error read by cudaGetLastError().
// Stream capture and graphs (cudaStreamBeginCapture .. cudaGraphLaunch): work queued on a capturing
// stream is recorded as graph nodes, not run; the runtime's capture rules are enforced (see README.md).
#include <cuda_runtime.h>

#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

// ---- handles: streams, events, graphs --------------------------------------------------------------
// A graph node: a kernel launch (its closure copied at capture), an async copy or an async memset,
// replayed in capture order (one stream: each node depends on the one before).
struct GraphNode {
    enum Kind { kKernel, kMemcpy, kMemset } kind;
    beagle_emu::KernelNode kernel;
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    cudaMemcpyKind dir = cudaMemcpyDefault;
    int value = 0;
};
struct CUgraph_st {
    std::vector<GraphNode> nodes;
};
struct CUgraphExec_st {
    std::vector<GraphNode> nodes;  // a copy: the graph may be destroyed after instantiation
};
struct Capture {
    CUgraph_st* graph;
    cudaStreamCaptureMode mode;
    std::thread::id thread;  // the thread that began it
    bool invalidated;
};
struct CUstream_st {
    unsigned flags;
    Capture* capture;  // non-null between cudaStreamBeginCapture and cudaStreamEndCapture
};
struct CUevent_st;

namespace beagle_emu {

static thread_local cudaError_t t_last_error = cudaSuccess;
static thread_local cudaError_t t_pending = cudaSuccess;
void set_last_error(cudaError_t e) { t_last_error = e; }
void set_pending_launch_error(cudaError_t e) { t_pending = e; }

static cudaError_t fail(cudaError_t e) {
    t_last_error = e;
    return e;
}

// ---- device memory ----------------------------------------------------------------------------
// Emulated device memory size: BEAGLE_EMU_MEM_MB, default 16 GiB (allocations are lazy host pages).
static size_t device_memory_bytes() {
    static size_t bytes = [] {
        const char* s = getenv("BEAGLE_EMU_MEM_MB");
        long mb = s ? atol(s) : 0;
        return mb > 0 ? (size_t)mb << 20 : (size_t)16 << 30;
    }();
    return bytes;
}

struct Memory {
    std::mutex mu;
    std::map<uintptr_t, size_t> device;  // start -> size of each cudaMalloc block
    std::map<uintptr_t, size_t> host;    // start -> size of each cudaMallocHost block
    size_t used = 0;
    std::set<void*> streams, events, graphs, execs;
    std::set<CUstream_st*> capturing;  // streams between BeginCapture and EndCapture
    std::map<const void*, size_t> max_dyn_smem;
};
static Memory& mem() {
    static Memory* m = new Memory();
    return *m;
}

// True if [p, p + n) lies inside one cudaMalloc block.
static bool is_device_range(const void* p, size_t n) {
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    const uintptr_t a = (uintptr_t)p;
    auto it = m.device.upper_bound(a);
    if (it == m.device.begin()) return false;
    --it;
    return a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
}

// True if a kernel may dereference p: null (a kernel that never reads it), or inside (or one past the end
// of) a cudaMalloc block or a pinned cudaMallocHost block (mapped into the device's address space).
bool device_accessible(const void* p) {
    if (!p) return true;
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    const uintptr_t a = (uintptr_t)p;
    for (auto* blocks : {&m.device, &m.host}) {
        auto it = blocks->upper_bound(a);
        if (it == blocks->begin()) continue;
        --it;
        if (a - it->first <= it->second) return true;
    }
    return false;
}

// ---- streams and events -------------------------------------------------------------------------
struct Event {
    unsigned flags;
    bool recorded;
    double t;  // seconds, monotonic clock
};
static double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool stream_is_valid(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    return m.streams.count((void*)s) != 0;
}

size_t func_max_dynamic_smem(const void* func) {
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    auto it = m.max_dyn_smem.find(func);
    return it == m.max_dyn_smem.end() ? kSmemPerBlock : it->second;
}

static bool event_valid(cudaEvent_t e) {
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    return e && m.events.count((void*)e) != 0;
}

static cudaError_t check_kind(cudaMemcpyKind kind, const void* dst, size_t dn, const void* src, size_t sn) {
    switch (kind) {
    case cudaMemcpyHostToHost: return cudaSuccess;
    case cudaMemcpyHostToDevice: return is_device_range(dst, dn) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return is_device_range(src, sn) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice:
        return is_device_range(dst, dn) && is_device_range(src, sn) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
    default: return cudaErrorInvalidMemcpyDirection;
    }
}

// ---- stream capture rules ---------------------------------------------------------------------------
static bool is_legacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }

static std::string capture_error(const char* what, cudaError_t e, const char* why) {
    return std::string("beagle-emu: ") + what + " " + why + ": " + cudaGetErrorName(e) +
           " (the capture is invalidated; cudaStreamEndCapture returns cudaErrorStreamCaptureInvalidated)";
}

// The legacy stream synchronizes with every blocking stream, so work on it while a blocking stream
// captures would make the capture depend on it: cudaErrorStreamCaptureImplicit, that capture invalidated.
static cudaError_t legacy_conflict(cudaStream_t s, const char* what) {
    if (!is_legacy(s)) return cudaSuccess;
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    bool hit = false;
    for (CUstream_st* c : m.capturing)
        if (!(c->flags & cudaStreamNonBlocking)) c->capture->invalidated = hit = true;
    if (!hit) return cudaSuccess;
    set_error_detail(capture_error(what, cudaErrorStreamCaptureImplicit,
                                   "on the legacy stream while a blocking stream is capturing").c_str());
    return cudaErrorStreamCaptureImplicit;
}

// A call the runtime calls "potentially unsafe" during capture (not queued on a stream, so a graph
// cannot record it: synchronous copies and memsets, allocation, freeing): refused while this thread
// has a capture in global or thread-local mode, or any thread one in global mode
// (cudaErrorStreamCaptureUnsupported, those captures invalidated); relaxed captures allow it.
static cudaError_t unsafe_during_capture(const char* what) {
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    bool hit = false;
    for (CUstream_st* c : m.capturing) {
        const Capture& cap = *c->capture;
        if (cap.mode == cudaStreamCaptureModeGlobal ||
            (cap.mode == cudaStreamCaptureModeThreadLocal && cap.thread == std::this_thread::get_id()))
            c->capture->invalidated = hit = true;
    }
    if (!hit) return cudaSuccess;
    set_error_detail(capture_error(what, cudaErrorStreamCaptureUnsupported,
                                   "while a stream is capturing (not a stream operation, a graph cannot record it)")
                         .c_str());
    return cudaErrorStreamCaptureUnsupported;
}

// Synchronous work (cudaMemcpy, cudaMemset, ...) runs on the legacy stream and is unsafe.
static cudaError_t sync_call_during_capture(const char* what) {
    cudaError_t e = legacy_conflict(nullptr, what);
    return e != cudaSuccess ? e : unsafe_during_capture(what);
}

cudaError_t capture_check(cudaStream_t s, const char* what, bool* capturing) {
    *capturing = false;
    cudaError_t e = legacy_conflict(s, what);
    if (e != cudaSuccess) return e;
    if (is_legacy(s) || s == cudaStreamPerThread) return cudaSuccess;
    std::lock_guard<std::mutex> lk(mem().mu);
    *capturing = s->capture != nullptr;
    return cudaSuccess;
}

void capture_kernel(cudaStream_t s, KernelNode node) {
    GraphNode n;
    n.kind = GraphNode::kKernel;
    n.kernel = std::move(node);
    std::lock_guard<std::mutex> lk(mem().mu);
    s->capture->graph->nodes.push_back(std::move(n));
}

void capture_invalidate(cudaStream_t s) {
    if (is_legacy(s) || s == cudaStreamPerThread || !stream_is_valid(s)) return;
    std::lock_guard<std::mutex> lk(mem().mu);
    if (s->capture) s->capture->invalidated = true;
}

// Records a copy or memset on a capturing stream (cudaMemcpyAsync, cudaMemsetAsync).
static void capture_node(cudaStream_t s, const GraphNode& n) {
    std::lock_guard<std::mutex> lk(mem().mu);
    s->capture->graph->nodes.push_back(n);
}

}  // namespace beagle_emu

using namespace beagle_emu;

extern "C" {

// ---- errors -----------------------------------------------------------------------------------
cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    default: return "cudaErrorUnknown";
    }
}

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    default: return "unknown error";
    }
}

// ---- device -----------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* device) {
    if (!device) return fail(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int* v) {
    if (!v) return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
    if (!v) return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

static int sm_count() {
    static int n = [] {
        const char* s = getenv("BEAGLE_EMU_THREADS");
        unsigned hw = std::thread::hardware_concurrency();
        return s && atoi(s) > 0 ? atoi(s) : (hw ? (int)hw : 1);
    }();
    return n;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
    if (!p) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    strncpy(p->name, "Beagle CUDA emulator (CPU)", sizeof p->name - 1);
    p->totalGlobalMem = device_memory_bytes();
    p->sharedMemPerBlock = kSmemPerBlock;
    p->sharedMemPerBlockOptin = kSmemPerBlockOptin;
    p->sharedMemPerMultiprocessor = kSmemPerBlockOptin + 1024;
    p->regsPerBlock = 65536;
    p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->memPitch = (size_t)1 << 31;
    p->maxThreadsPerBlock = kMaxThreadsPerBlock;
    p->maxThreadsDim[0] = kMaxBlockDimX;
    p->maxThreadsDim[1] = kMaxBlockDimY;
    p->maxThreadsDim[2] = kMaxBlockDimZ;
    p->maxGridSize[0] = (int)kMaxGridDimX;
    p->maxGridSize[1] = (int)kMaxGridDimY;
    p->maxGridSize[2] = (int)kMaxGridDimZ;
    p->totalConstMem = 65536;
    p->major = kDevMajor;
    p->minor = kDevMinor;
    p->textureAlignment = 512;
    p->multiProcessorCount = sm_count();
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->l2CacheSize = 40 << 20;
    p->memoryBusWidth = 5120;
    p->unifiedAddressing = 1;
    p->managedMemory = 1;
    p->concurrentKernels = 1;
    p->canMapHostMemory = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!value) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = kMaxBlockDimX; break;
    case cudaDevAttrMaxBlockDimY: *value = kMaxBlockDimY; break;
    case cudaDevAttrMaxBlockDimZ: *value = kMaxBlockDimZ; break;
    case cudaDevAttrMaxGridDimX: *value = (int)kMaxGridDimX; break;
    case cudaDevAttrMaxGridDimY: *value = (int)kMaxGridDimY; break;
    case cudaDevAttrMaxGridDimZ: *value = (int)kMaxGridDimZ; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)kSmemPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)kSmemPerBlockOptin; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = sm_count(); break;
    case cudaDevAttrComputeCapabilityMajor: *value = kDevMajor; break;
    case cudaDevAttrComputeCapabilityMinor: *value = kDevMinor; break;
    case cudaDevAttrL2CacheSize: *value = 40 << 20; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    {  // waits for every stream, a capturing one too: refused in any capture mode
        Memory& m = mem();
        std::lock_guard<std::mutex> lk(m.mu);
        if (!m.capturing.empty()) {
            for (CUstream_st* c : m.capturing) c->capture->invalidated = true;
            set_error_detail(capture_error("cudaDeviceSynchronize", cudaErrorStreamCaptureUnsupported,
                                           "while a stream is capturing").c_str());
            return fail(cudaErrorStreamCaptureUnsupported);
        }
    }
    cudaError_t e = t_pending;
    t_pending = cudaSuccess;
    return e;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (!func) return fail(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > kSmemPerBlockOptin) return fail(cudaErrorInvalidValue);
        Memory& m = mem();
        std::lock_guard<std::mutex> lk(m.mu);
        m.max_dyn_smem[func] = (size_t)value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
    return fail(cudaErrorInvalidValue);
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void* func) {
    if (!a || !func) return fail(cudaErrorInvalidValue);
    memset(a, 0, sizeof *a);
    a->maxThreadsPerBlock = kMaxThreadsPerBlock;
    a->maxDynamicSharedSizeBytes = (int)func_max_dynamic_smem(func);
    a->ptxVersion = a->binaryVersion = kDevMajor * 10 + kDevMinor;
    a->numRegs = 32;
    return cudaSuccess;
}

// Occupancy of the emulated sm_80: limited by 2048 threads, 32 blocks and the shared memory per SM.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size, size_t smem) {
    if (!blocks || !func || block_size <= 0) return fail(cudaErrorInvalidValue);
    int n = std::min(2048 / block_size, 32);
    if (smem) n = std::min(n, (int)((kSmemPerBlockOptin + 1024) / smem));
    *blocks = n;
    return cudaSuccess;
}

// ---- memory -----------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t size) {
    if (!ptr) return fail(cudaErrorInvalidValue);
    if (cudaError_t c = unsafe_during_capture("cudaMalloc")) return fail(c);
    *ptr = nullptr;
    if (size == 0) return cudaSuccess;
    Memory& m = mem();
    {
        std::lock_guard<std::mutex> lk(m.mu);
        if (size > device_memory_bytes() - m.used) return fail(cudaErrorMemoryAllocation);
    }
    // 256-byte aligned like the real allocator, but exactly `size` bytes, so that a kernel running
    // past the end of a buffer is caught by valgrind / ASan-instrumented host code.
    void* p = nullptr;
    if (posix_memalign(&p, 256, size) != 0) return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lk(m.mu);
    m.device[(uintptr_t)p] = size;
    m.used += size;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    if (!ptr) return cudaSuccess;
    if (cudaError_t c = unsafe_during_capture("cudaFree")) return fail(c);
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    auto it = m.device.find((uintptr_t)ptr);
    if (it == m.device.end()) return fail(cudaErrorInvalidValue);
    m.used -= it->second;
    m.device.erase(it);
    free(ptr);
    return cudaSuccess;
}

// Not emulated on a capturing stream (the runtime records an allocation node): refused as cudaMalloc is.
cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
    if (!stream_is_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    return cudaMalloc(ptr, size);
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
    if (!stream_is_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    return cudaFree(ptr);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
    if (!ptr) return fail(cudaErrorInvalidValue);
    if (cudaError_t c = unsafe_during_capture("cudaMallocHost")) return fail(c);
    *ptr = nullptr;
    if (size && posix_memalign(ptr, 256, size) != 0) return fail(cudaErrorMemoryAllocation);
    if (*ptr) {
        std::lock_guard<std::mutex> lk(mem().mu);
        mem().host[(uintptr_t)*ptr] = size;
    }
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) { return cudaMallocHost(ptr, size); }
cudaError_t cudaFreeHost(void* ptr) {
    if (!ptr) return cudaSuccess;
    if (cudaError_t c = unsafe_during_capture("cudaFreeHost")) return fail(c);
    {
        std::lock_guard<std::mutex> lk(mem().mu);
        if (!mem().host.erase((uintptr_t)ptr)) return fail(cudaErrorInvalidValue);
    }
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    if (!free_bytes || !total) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lk(mem().mu);
    *total = device_memory_bytes();
    *free_bytes = *total - mem().used;
    return cudaSuccess;
}

// The copy itself, after its arguments are checked (also the replay of a copy node).
static cudaError_t copy_now(void* dst, const void* src, size_t count, cudaMemcpyKind kind, bool run) {
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return fail(cudaErrorInvalidValue);
    cudaError_t e = check_kind(kind, dst, count, src, count);
    if (e != cudaSuccess) return fail(e);
    if (run) memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    if (cudaError_t c = sync_call_during_capture("cudaMemcpy (synchronous)")) return fail(c);
    return copy_now(dst, src, count, kind, true);
}

static cudaError_t stream_op(cudaStream_t stream, const char* what, const GraphNode& n);
// On a capturing stream: the arguments are checked now, the bytes copied at each cudaGraphLaunch
// (from what `src` holds then).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
    GraphNode n;
    n.kind = GraphNode::kMemcpy;
    n.dst = dst;
    n.src = src;
    n.bytes = count;
    n.dir = kind;
    return stream_op(stream, "cudaMemcpyAsync", n);
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
    if (cudaError_t c = sync_call_during_capture("cudaMemcpy2D")) return fail(c);
    if (width == 0 || height == 0) return cudaSuccess;
    if (!dst || !src || width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
    const size_t dn = dpitch * (height - 1) + width, sn = spitch * (height - 1) + width;
    cudaError_t e = check_kind(kind, dst, dn, src, sn);
    if (e != cudaSuccess) return fail(e);
    for (size_t r = 0; r < height; r++) memmove((char*)dst + r * dpitch, (const char*)src + r * spitch, width);
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
    if (!stream_is_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    bool capturing = false;
    if (cudaError_t c = capture_check(stream, "cudaMemcpy2DAsync", &capturing)) return fail(c);
    if (capturing) {  // not emulated: only 1-D copies become graph nodes
        capture_invalidate(stream);
        set_error_detail("beagle-emu: cudaMemcpy2DAsync on a capturing stream is not emulated (the capture is invalidated)");
        return fail(cudaErrorNotSupported);
    }
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

// Under the emulator a __device__ / __constant__ variable is an ordinary host variable.
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               cudaMemcpyKind kind) {
    if (cudaError_t c = sync_call_during_capture("cudaMemcpyToSymbol")) return fail(c);
    if (!symbol || (!src && count)) return fail(cudaErrorInvalidValue);
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    memmove((char*)symbol + offset, src, count);
    return cudaSuccess;
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, cudaMemcpyKind kind) {
    if (cudaError_t c = sync_call_during_capture("cudaMemcpyFromSymbol")) return fail(c);
    if (!symbol || (!dst && count)) return fail(cudaErrorInvalidValue);
    if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    memmove(dst, (const char*)symbol + offset, count);
    return cudaSuccess;
}

static cudaError_t memset_now(void* ptr, int value, size_t count, bool run) {
    if (count == 0) return cudaSuccess;
    if (!ptr || !is_device_range(ptr, count)) return fail(cudaErrorInvalidValue);
    if (run) memset(ptr, value, count);
    return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) {
    if (cudaError_t c = sync_call_during_capture("cudaMemset (synchronous)")) return fail(c);
    return memset_now(ptr, value, count, true);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
    GraphNode n;
    n.kind = GraphNode::kMemset;
    n.dst = ptr;
    n.bytes = count;
    n.value = value;
    return stream_op(stream, "cudaMemsetAsync", n);
}

// A copy or memset node: run now (run), or only its arguments checked (recorded by a capture).
static cudaError_t copy_node(const GraphNode& n, bool run) {
    return n.kind == GraphNode::kMemcpy ? copy_now(n.dst, n.src, n.bytes, n.dir, run)
                                        : memset_now(n.dst, n.value, n.bytes, run);
}

// cudaMemcpyAsync / cudaMemsetAsync on `stream`: done now, or on a capturing stream checked and recorded
// as a node (a bad one invalidates the capture), its bytes moved at each cudaGraphLaunch.
static cudaError_t stream_op(cudaStream_t stream, const char* what, const GraphNode& n) {
    if (!stream_is_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    bool capturing = false;
    if (cudaError_t c = capture_check(stream, what, &capturing)) return fail(c);
    const cudaError_t e = copy_node(n, !capturing);
    if (capturing) {
        if (e != cudaSuccess) capture_invalidate(stream);
        else capture_node(stream, n);
    }
    return e;
}

// ---- streams ------------------------------------------------------------------------------------
struct CUevent_st {
    Event e;
};

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
    if (!s) return fail(cudaErrorInvalidValue);
    *s = new CUstream_st{flags, nullptr};
    std::lock_guard<std::mutex> lk(mem().mu);
    mem().streams.insert((void*)*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int) {
    return cudaStreamCreateWithFlags(s, flags);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    {
        std::lock_guard<std::mutex> lk(mem().mu);
        if (!s || !mem().streams.erase((void*)s)) return fail(cudaErrorInvalidResourceHandle);
        if (s->capture) {  // a capture never ended: its graph goes with the stream
            mem().capturing.erase(s);
            delete s->capture->graph;
            delete s->capture;
        }
    }
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (!stream_is_valid(s)) return fail(cudaErrorInvalidResourceHandle);
    bool capturing = false;
    if (cudaError_t c = capture_check(s, "cudaStreamSynchronize", &capturing)) return fail(c);
    if (capturing) {  // nothing on it has run: waiting for it is an error
        capture_invalidate(s);
        set_error_detail(capture_error("cudaStreamSynchronize", cudaErrorStreamCaptureUnsupported,
                                       "of the capturing stream").c_str());
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    cudaError_t e = t_pending;
    t_pending = cudaSuccess;
    return e;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (!stream_is_valid(s)) return fail(cudaErrorInvalidResourceHandle);
    bool capturing = false;
    if (cudaError_t c = capture_check(s, "cudaStreamQuery", &capturing)) return fail(c);
    return capturing ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

// Events inside a capture (event record / wait nodes: the runtime's fork and join of captures across
// streams) are not emulated: refused with cudaErrorNotSupported, the capture invalidated.
static cudaError_t event_in_capture(cudaStream_t s, const char* what) {
    bool capturing = false;
    if (cudaError_t c = capture_check(s, what, &capturing)) return c;
    if (!capturing) return cudaSuccess;
    capture_invalidate(s);
    set_error_detail((std::string("beagle-emu: ") + what +
                      " on a capturing stream is not emulated (the capture is invalidated)").c_str());
    return cudaErrorNotSupported;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
    if (!stream_is_valid(s) || !event_valid(e)) return fail(cudaErrorInvalidResourceHandle);
    if (cudaError_t c = event_in_capture(s, "cudaStreamWaitEvent")) return fail(c);
    return cudaSuccess;
}

// ---- events -------------------------------------------------------------------------------------
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
    if (!e) return fail(cudaErrorInvalidValue);
    *e = new CUevent_st{Event{flags, false, 0.0}};
    std::lock_guard<std::mutex> lk(mem().mu);
    mem().events.insert((void*)*e);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    {
        std::lock_guard<std::mutex> lk(mem().mu);
        if (!e || !mem().events.erase((void*)e)) return fail(cudaErrorInvalidResourceHandle);
    }
    delete e;
    return cudaSuccess;
}
// Work is synchronous, so "all prior work on the stream is done" is now.
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!event_valid(e) || !stream_is_valid(s)) return fail(cudaErrorInvalidResourceHandle);
    if (cudaError_t c = event_in_capture(s, "cudaEventRecord")) return fail(c);
    e->e.recorded = true;
    e->e.t = now_s();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    return event_valid(e) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    return event_valid(e) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms) return fail(cudaErrorInvalidValue);
    if (!event_valid(start) || !event_valid(end)) return fail(cudaErrorInvalidResourceHandle);
    if ((start->e.flags | end->e.flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
    if (!start->e.recorded || !end->e.recorded) return fail(cudaErrorInvalidResourceHandle);
    *ms = (float)((end->e.t - start->e.t) * 1e3);
    return cudaSuccess;
}

// ---- stream capture and graphs -----------------------------------------------------------------------
// Between cudaStreamBeginCapture and cudaStreamEndCapture the work queued on the stream (kernel
// launches, cudaMemcpyAsync, cudaMemsetAsync) is recorded, not run; cudaGraphLaunch runs the recorded
// nodes in order on its stream. The legacy stream cannot capture (cudaErrorStreamCaptureUnsupported).
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    if (is_legacy(s)) {
        set_error_detail("beagle-emu: cudaStreamBeginCapture on the legacy stream: cudaErrorStreamCaptureUnsupported "
                         "(capture needs a stream from cudaStreamCreate)");
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (s == cudaStreamPerThread) return fail(cudaErrorNotSupported);  // not emulated
    if (!stream_is_valid(s)) return fail(cudaErrorInvalidResourceHandle);
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
        return fail(cudaErrorInvalidValue);
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    if (s->capture) return fail(cudaErrorIllegalState);  // already capturing
    s->capture = new Capture{new CUgraph_st, mode, std::this_thread::get_id(), false};
    m.capturing.insert(s);
    return cudaSuccess;
}

// Ends the capture; the graph, or nullptr and cudaErrorStreamCaptureInvalidated if something during
// the capture broke it. A non-relaxed capture must be ended by the thread that began it.
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
    if (!graph) return fail(cudaErrorInvalidValue);
    *graph = nullptr;
    if (is_legacy(s) || s == cudaStreamPerThread) return fail(cudaErrorIllegalState);
    if (!stream_is_valid(s)) return fail(cudaErrorInvalidResourceHandle);
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    Capture* c = s->capture;
    if (!c) return fail(cudaErrorIllegalState);  // not capturing
    if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
        return fail(cudaErrorStreamCaptureWrongThread);
    s->capture = nullptr;
    m.capturing.erase(s);
    const bool invalidated = c->invalidated;
    CUgraph_st* g = c->graph;
    delete c;
    if (invalidated) {
        delete g;
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    m.graphs.insert(g);
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
    if (!status) return fail(cudaErrorInvalidValue);
    if (!stream_is_valid(s)) return fail(cudaErrorInvalidResourceHandle);
    *status = cudaStreamCaptureStatusNone;
    if (is_legacy(s)) {  // the legacy stream while a blocking stream captures (not an invalidation here)
        std::lock_guard<std::mutex> lk(mem().mu);
        for (CUstream_st* c : mem().capturing)
            if (!(c->flags & cudaStreamNonBlocking)) return fail(cudaErrorStreamCaptureImplicit);
        return cudaSuccess;
    }
    if (s == cudaStreamPerThread) return cudaSuccess;
    std::lock_guard<std::mutex> lk(mem().mu);
    if (s->capture)
        *status = s->capture->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

// Node count only (nodes == nullptr); node handles are not emulated.
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* count) {
    if (!count) return fail(cudaErrorInvalidValue);
    {
        std::lock_guard<std::mutex> lk(mem().mu);
        if (!g || !mem().graphs.count(g)) return fail(cudaErrorInvalidValue);
    }
    if (nodes) return fail(cudaErrorNotSupported);
    *count = g->nodes.size();
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long flags) {
    if (!exec) return fail(cudaErrorInvalidValue);
    *exec = nullptr;
    if (flags != 0) return fail(cudaErrorNotSupported);  // auto-free-on-launch, upload, device launch: not emulated
    Memory& m = mem();
    std::lock_guard<std::mutex> lk(m.mu);
    if (!g || !m.graphs.count(g)) return fail(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{g->nodes};  // kernel closures are shared, never written
    m.execs.insert(*exec);
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long flags) {
    return cudaGraphInstantiate(exec, g, flags);
}

// Runs the nodes in capture order on `s` (each as the direct call would: launches are validated and
// checked again). The first failing node stops the launch and its error is returned.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    {
        std::lock_guard<std::mutex> lk(mem().mu);
        if (!exec || !mem().execs.count(exec)) return fail(cudaErrorInvalidValue);
    }
    if (!stream_is_valid(s)) return fail(cudaErrorInvalidResourceHandle);
    bool capturing = false;
    if (cudaError_t c = capture_check(s, "cudaGraphLaunch", &capturing)) return fail(c);
    if (capturing) {  // a child-graph node in the runtime; not emulated
        capture_invalidate(s);
        set_error_detail("beagle-emu: cudaGraphLaunch into a capturing stream is not emulated (the capture is invalidated)");
        return fail(cudaErrorNotSupported);
    }
    for (const GraphNode& n : exec->nodes) {
        cudaError_t e = cudaSuccess;
        switch (n.kind) {
        case GraphNode::kKernel: {
            const KernelNode& k = n.kernel;
            e = launch_grid(k.name, k.func, k.grid, k.block, k.smem, s, k.thunk, k.ctx.get(), nullptr, nullptr);
            break;
        }
        case GraphNode::kMemcpy:
        case GraphNode::kMemset: e = copy_node(n, true); break;
        }
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    {
        std::lock_guard<std::mutex> lk(mem().mu);
        if (!exec || !mem().execs.erase(exec)) return fail(cudaErrorInvalidValue);
    }
    delete exec;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    {
        std::lock_guard<std::mutex> lk(mem().mu);
        if (!g || !mem().graphs.erase(g)) return fail(cudaErrorInvalidValue);
    }
    delete g;
    return cudaSuccess;
}

}  // extern "C"
