// cuda_rt.h: the CUDA runtime calls of the CUDA backend, in one place, each one counted (ops.h
// DeviceCounters): allocations through a caching allocator, host -> device copies through a pinned
// staging arena (asynchronous, no host stall), blocking device -> host copies, stream syncs and frees.
// Used only by ops_cuda.cu; compiled by nvcc (build/beagle-cuda) or by g++ against the emulator's
// runtime (cuda/emu/cudart.cpp), so the counters read the same under both.
//
// What counts as a sync: every call after which the host has waited for the device: a blocking
// cudaMemcpy (device -> host, or a host -> device copy too large for the arena), cudaStreamSynchronize,
// cudaFree (it synchronizes the device). Launches, cudaMemcpyAsync from pinned memory, device -> device
// copies and cudaMemsetAsync are queued on the stream and do not count.
#pragma once
#include <cstddef>
#include <map>
#include <unordered_map>
#include <vector>

#include "../ops.h"
#include "compat.cuh"

namespace beagle {

class CudaRt {
public:
    CudaRt();
    ~CudaRt();
    CudaRt(const CudaRt&) = delete;
    CudaRt& operator=(const CudaRt&) = delete;

    DeviceCounters n;           // what has happened so far
    // The one stream every op runs on: created blocking (the legacy stream cannot be captured into a graph;
    // a blocking stream still orders with the blocking cudaMemcpy of d2h / h2d_sync). 0 if it could not be made.
    cudaStream_t stream = 0;

    // Device memory from the caching allocator: a released block goes to a free list of its size class
    // and is handed out again (best fit, up to twice the size asked for; zeroed when asked) without
    // cudaMalloc / cudaFree, so a steady-state round or training step allocates nothing. Out of memory: the cache is emptied and the
    // allocation retried once; still failing returns nullptr (the caller's error names the buffer).
    void* alloc(size_t bytes, bool zeroed);
    void release(void* p);
    size_t cached_bytes() const { return cached_; }
    // Plain cudaMalloc / cudaFree (long-lived buffers: weights, scratch slots), counted.
    void* malloc_raw(size_t bytes);
    void free_raw(void* p);

    // host -> device without a stall: the bytes go through the pinned arena (copied there first, so the
    // caller may reuse `host` at once) and cudaMemcpyAsync; the arena is recycled at the next sync.
    // A copy larger than a quarter of the arena, or one that finds it full of queued copies: the arena
    // grows (no sync; 256 MiB at most); past that, a wait for the queued copies, or for a large copy (or
    // without pinned memory) a blocking cudaMemcpy (counted as a sync).
    void h2d(void* dst, const void* host, size_t bytes);
    void h2d_sync(void* dst, const void* host, size_t bytes);  // blocking cudaMemcpy: a sync
    void d2h(void* host, const void* src, size_t bytes);       // blocking: a sync
    // device -> host without a stall: cudaMemcpyAsync into pinned staging, copied on to `host` by the next
    // sync of any kind (no sync of its own); wait_d2h() syncs if such a copy is still pending. Without
    // pinned memory: a blocking d2h.
    void d2h_async(void* host, const void* src, size_t bytes);
    void wait_d2h();
    void d2d(void* dst, const void* src, size_t bytes);        // queued
    void memset0(void* dst, size_t bytes);                     // queued
    void sync();                                               // cudaStreamSynchronize: a sync
    void launched() { n.launches++; }

    // CUDA graphs (a captured decode step, ops_cuda.cu). Between begin_capture and end_capture the
    // stream's work is recorded, not run (nothing may sync or allocate); end_capture returns the
    // instantiated graph (a cudaGraphExec_t). graph_launch: one launch (launches and graph_launches).
    void* pinned(size_t bytes);                                // cudaMallocHost, freed with the CudaRt
    void h2d_pinned(void* dst, const void* pinned, size_t bytes);  // cudaMemcpyAsync from pinned memory, not counted
    void begin_capture();
    void* end_capture();
    void graph_launch(void* exec);
    void graph_destroy(void* exec);

private:
    static size_t size_class(size_t bytes);
    void synced();  // after any sync: the arena's copies are done, reuse it
    bool grow_arena(size_t need);   // a larger arena (>= need bytes) if it can be had
    std::multimap<size_t, void*> free_;          // size class -> cached block
    std::unordered_map<void*, size_t> live_;     // block -> its size class
    std::unordered_map<void*, size_t> sizes_;    // every cudaMalloc'd block -> its bytes
    size_t cached_ = 0;
    unsigned char* arena_ = nullptr;             // pinned host staging
    std::vector<void*> pinned_;                  // pinned() blocks and outgrown arenas
    size_t arena_bytes_ = 0, arena_used_ = 0;
    struct PendingD2H {
        void* host;
        const unsigned char* staged;  // in d2h_stage_ or an outgrown one
        size_t bytes;
    };
    unsigned char* d2h_stage_ = nullptr;         // pinned device -> host staging (grows; outgrown ones in pinned_)
    size_t d2h_stage_bytes_ = 0, d2h_stage_used_ = 0;
    std::vector<PendingD2H> d2h_pending_;        // queued copies into d2h_stage_, for synced() to hand over
};

}  // namespace beagle
