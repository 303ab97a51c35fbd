// cuda_rt.cu: the counted CUDA runtime layer of the CUDA backend (cuda_rt.h): the caching allocator,
// the pinned staging arena for host -> device copies, blocking downloads, syncs, each one counted.
#include "cuda_rt.h"

#include <algorithm>
#include <cstring>

#include "../../core/common.h"

namespace beagle {

static void rt_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("CUDA %s failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

// 4 MiB of pinned staging: a round's positions, masks, token ids and row indices fit many times over.
// A training step's input states can be larger (a 7B-shaped draft: 1-32 MiB per sequence); the arena
// then grows, up to ARENA_MAX_BYTES (grow_arena).
static constexpr size_t ARENA_BYTES = (size_t)4 << 20, ARENA_MAX_BYTES = (size_t)256 << 20;

CudaRt::CudaRt() {
    if (cudaStreamCreate(&stream) != cudaSuccess) {
        cudaGetLastError();  // the legacy stream then: correct, but no graphs
        stream = 0;
    }
    void* p = nullptr;
    if (cudaMallocHost(&p, ARENA_BYTES) == cudaSuccess) {
        arena_ = (unsigned char*)p;
        arena_bytes_ = ARENA_BYTES;
    } else {
        cudaGetLastError();  // no pinned memory: every h2d is a blocking copy (still correct)
    }
}

CudaRt::~CudaRt() {
    for (auto& kv : free_) cudaFree(kv.second);
    for (auto& kv : live_) cudaFree(kv.first);  // buffers their owners never released
    if (arena_) cudaFreeHost(arena_);
    for (void* p : pinned_) cudaFreeHost(p);
    if (stream) cudaStreamDestroy(stream);
}

// Size classes: 256-byte granules below 64 KiB, else the next of m * 2^k with m in 8..15 (at most
// 1/8 wasted), so buffers of nearby sizes (a training window of another length) share blocks.
size_t CudaRt::size_class(size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (bytes <= ((size_t)64 << 10)) return (bytes + 255) & ~(size_t)255;
    int top = 63 - __builtin_clzll((unsigned long long)bytes);  // 2^top <= bytes < 2^(top+1)
    size_t step = (size_t)1 << (top - 3);
    return (bytes + step - 1) / step * step;
}

void* CudaRt::malloc_raw(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    n.allocs++;
    sizes_[p] = bytes;
    n.device_bytes += (long long)bytes;
    n.peak_device_bytes = std::max(n.peak_device_bytes, n.device_bytes);
    return p;
}

void CudaRt::free_raw(void* p) {
    if (!p) return;
    rt_check(cudaFree(p), "cudaFree");
    n.frees++;
    auto it = sizes_.find(p);
    if (it != sizes_.end()) {
        n.device_bytes -= (long long)it->second;
        sizes_.erase(it);
    }
    n.syncs++;  // cudaFree synchronizes the device
    synced();
}

void* CudaRt::alloc(size_t bytes, bool zeroed) {
    size_t cls = size_class(bytes);
    void* p = nullptr;
    auto it = free_.lower_bound(cls);  // best fit: the smallest cached block of this class or up to 2x larger
    if (it != free_.end() && it->first <= 2 * cls) {
        cls = it->first;
        p = it->second;
        free_.erase(it);
        cached_ -= cls;
    } else {
        p = malloc_raw(cls);
        if (!p && !free_.empty()) {  // give the cache back and try once more
            for (auto& kv : free_) free_raw(kv.second);
            free_.clear();
            cached_ = 0;
            p = malloc_raw(cls);
        }
        if (!p) return nullptr;
    }
    live_[p] = cls;
    if (zeroed) memset0(p, bytes ? bytes : 1);
    return p;
}

void CudaRt::release(void* p) {
    if (!p) return;
    auto it = live_.find(p);
    BEAGLE_CHECK(it != live_.end(), "CUDA backend: releasing a buffer it did not allocate");
    free_.emplace(it->second, p);  // stream order keeps earlier kernels' uses before any reuse
    cached_ += it->second;
    live_.erase(it);
}

// A larger arena, of at least `need` bytes (doubling, at most ARENA_MAX_BYTES); false if that cannot be.
// The old arena may still be read by queued copies, and cudaFreeHost would synchronize the device, so it
// is kept until the CudaRt goes (pinned_): growing costs no sync, and happens a few times per process.
bool CudaRt::grow_arena(size_t need) {
    size_t want = arena_bytes_;
    while (want < need && want < ARENA_MAX_BYTES) want *= 2;
    if (want < need) return false;
    void* p = nullptr;
    if (cudaMallocHost(&p, want) != cudaSuccess) {
        cudaGetLastError();  // no more pinned memory: keep the arena
        return false;
    }
    pinned_.push_back(arena_);
    arena_ = (unsigned char*)p;
    arena_bytes_ = want;
    arena_used_ = 0;
    return true;
}

void CudaRt::h2d(void* dst, const void* host, size_t bytes) {
    if (!bytes) return;
    // a copy of more than a quarter of the arena: a larger arena, else a blocking copy
    if (!arena_ || (bytes > arena_bytes_ / 4 && !grow_arena(4 * bytes))) {
        h2d_sync(dst, host, bytes);  // counts the bytes and the sync
        return;
    }
    n.h2d_bytes += (long long)bytes;
    size_t off = (arena_used_ + 255) & ~(size_t)255;
    if (off + bytes > arena_bytes_) {  // full of copies that may still be queued: a larger one, else wait for them
        if (!grow_arena(2 * arena_bytes_)) sync();
        off = 0;
    }
    memcpy(arena_ + off, host, bytes);
    rt_check(cudaMemcpyAsync(dst, arena_ + off, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (host to device)");
    arena_used_ = off + bytes;
}

void CudaRt::h2d_sync(void* dst, const void* host, size_t bytes) {
    if (!bytes) return;
    rt_check(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (host to device)");
    n.h2d_bytes += (long long)bytes;
    n.syncs++;
    synced();
}

void CudaRt::d2h(void* host, const void* src, size_t bytes) {
    if (!bytes) return;
    rt_check(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)");
    n.d2h_bytes += (long long)bytes;
    n.syncs++;
    synced();
}

void CudaRt::d2d(void* dst, const void* src, size_t bytes) {
    if (bytes) rt_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync (device to device)");
}

void CudaRt::memset0(void* dst, size_t bytes) {
    if (bytes) rt_check(cudaMemsetAsync(dst, 0, bytes, stream), "cudaMemsetAsync");
}

void CudaRt::sync() {
    rt_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    n.syncs++;
    synced();
}

void CudaRt::d2h_async(void* host, const void* src, size_t bytes) {
    if (!bytes) return;
    size_t off = (d2h_stage_used_ + 255) & ~(size_t)255;
    if (off + bytes > d2h_stage_bytes_) {  // a larger staging buffer; the queued copies keep the old one
        const size_t want = std::max(2 * d2h_stage_bytes_, 2 * bytes);
        unsigned char* p = (unsigned char*)pinned(want);  // the old one stays pinned until the CudaRt goes
        if (!p) {
            d2h(host, src, bytes);  // hands over the pending copies too
            return;
        }
        d2h_stage_ = p;
        d2h_stage_bytes_ = want;
        off = d2h_stage_used_ = 0;
    }
    rt_check(cudaMemcpyAsync(d2h_stage_ + off, src, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (device to host)");
    n.d2h_bytes += (long long)bytes;
    d2h_pending_.push_back({host, d2h_stage_ + off, bytes});
    d2h_stage_used_ = off + bytes;
}

void CudaRt::wait_d2h() {
    if (!d2h_pending_.empty()) sync();
}

// After any sync: the arena's copies are done (reuse it), and the staged device -> host copies are
// complete: each goes on to its host destination.
void CudaRt::synced() {
    arena_used_ = 0;
    for (const PendingD2H& c : d2h_pending_) memcpy(c.host, c.staged, c.bytes);
    d2h_pending_.clear();
    d2h_stage_used_ = 0;
}

void* CudaRt::pinned(size_t bytes) {
    void* p = nullptr;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    pinned_.push_back(p);
    return p;
}

void CudaRt::h2d_pinned(void* dst, const void* pinned, size_t bytes) {
    if (bytes) rt_check(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (pinned to device)");
}

void CudaRt::begin_capture() {
    BEAGLE_CHECK(stream != 0, "CUDA graphs need a created stream");
    rt_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
}

void* CudaRt::end_capture() {
    cudaGraph_t g = nullptr;
    rt_check(cudaStreamEndCapture(stream, &g), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);  // the executable graph does not need it
    rt_check(e, "cudaGraphInstantiate");
    return (void*)exec;
}

void CudaRt::graph_launch(void* exec) {
    rt_check(cudaGraphLaunch((cudaGraphExec_t)exec, stream), "cudaGraphLaunch");
    n.launches++;
    n.graph_launches++;
}

void CudaRt::graph_destroy(void* exec) {
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

}  // namespace beagle
