// emu.h: the kernel-side view of the CPU emulator of the CUDA execution model. cuda/compat.cuh
// includes it when the compiler is not nvcc; kernels in cuda/*.cu then compile with g++ and run on
// the CPU (blocks on a pool of OS threads, the threads of a block as fibers switched at barriers).
// The runtime behind it is cuda/emu/scheduler.cpp (blocks, fibers, barriers, warp collectives)
// and cuda/emu/cudart.cpp (cudaMalloc & co.). Design notes: cuda/emu/README.md.
#pragma once

#include <cuda_runtime.h>  // the toolkit's host headers: dim3, uint3, float4, cudaError_t, ...
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#define BEAGLE_CUDA_EMULATOR 1

// ---- CUDA keywords --------------------------------------------------------------------------
// __global__, __device__, __host__, __forceinline__, __launch_bounds__, __restrict__ already
// expand to nothing (or to GCC attributes) in the toolkit's host_defines.h when nvcc is absent.
// __shared__ becomes per-OS-thread storage: one OS thread runs one block at a time, so each
// running block sees its own copy. The abi_tag marks the symbols so the runtime can find and
// NaN-poison them at block start (debug mode); see poison_shared in scheduler.cpp.
#undef __shared__
#define __shared__ thread_local __attribute__((abi_tag("beagle_smem")))

// Built-in variables, set by the scheduler before it resumes a thread.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace beagle_emu {

// Where a barrier or warp collective was called from (for deadlock / divergence messages).
struct Site {
    const char* file;
    int line;
    const char* what;
};
#define BEAGLE_EMU_SITE(what) ::beagle_emu::Site{__FILE__, __LINE__, what}

// Dynamic shared memory of the running block (sized by the launch), see DYN_SMEM.
inline thread_local unsigned char* t_dyn_smem = nullptr;

// ---- runtime entry points (scheduler.cpp) ---------------------------------------------------
enum BarrierMode { kBarPlain = 0, kBarCount = 1, kBarAnd = 2, kBarOr = 3 };
// __syncthreads family: blocks the calling thread until every non-exited thread of the block
// arrives (PTX bar.sync semantics); all must arrive at the same call site, else the launch fails.
int block_barrier(Site site, int pred, int mode);

// Warp collectives. Each is a barrier of the warp lanes named in `mask` that have not exited
// (lanes past the end of a partial last warp count as exited), with the same kind and mask.
enum OpKind {
    kOpSyncWarp = 1,
    kOpShflIdx, kOpShflUp, kOpShflDown, kOpShflXor,
    kOpBallot, kOpAny, kOpAll, kOpUni,
    kOpMatchAny, kOpMatchAll,
    kOpReduceAddU, kOpReduceMinU, kOpReduceMaxU, kOpReduceAddI, kOpReduceMinI, kOpReduceMaxI,
    kOpReduceAnd, kOpReduceOr, kOpReduceXor,
    kOpWmmaLoad, kOpWmmaStore, kOpWmmaMma,
};
struct WarpOp;
typedef void (*GroupAction)(WarpOp* const* ops, int n);
struct WarpOp {
    int kind;
    unsigned mask;
    const void* in;     // this lane's operand (size bytes)
    void* out;          // this lane's result
    unsigned size;
    int arg;            // srcLane / delta / laneMask
    int width;          // shuffle segment width (power of two, 1..32)
    const void* in2;    // extra operands (wmma)
    const void* in3;
    GroupAction action; // custom group action (wmma), run once when the group completes
    Site site;
};
void warp_collective(WarpOp& op);
// Mask of the lanes of the caller's warp that exist and have not exited.
unsigned warp_live_mask();
// Records an error for the running launch and ends the calling thread (never returns).
[[noreturn]] void kernel_fail(Site site, const char* message);
bool poison_enabled();

// ---- launch ----------------------------------------------------------------------------------
typedef void (*Thunk)(void* ctx);
typedef void* (*CloneCtx)(const void* ctx);  // a heap copy of the launch's closure (kernel + arguments)
typedef void (*FreeCtx)(void* ctx);          // deletes such a copy
// Validates the configuration (like the real runtime: cudaErrorInvalidConfiguration,
// cudaErrorInvalidValue, cudaErrorInvalidResourceHandle), then runs every block and returns when
// the grid is done. Errors go to cudaGetLastError(); a deadlock or divergent barrier aborts the
// launch with cudaErrorLaunchFailure and a message naming kernel and block (last_error_detail()).
// On a stream that is capturing (cudaStreamBeginCapture) nothing runs: a copy of the closure
// (clone) is recorded as a kernel node of the stream's graph and cudaGraphLaunch runs it later.
cudaError_t launch_grid(const char* name, const void* func, dim3 grid, dim3 block, size_t smem,
                        cudaStream_t stream, Thunk thunk, void* ctx, CloneCtx clone, FreeCtx free_ctx);
// Fails a launch without running it (a fault the hardware would raise): message and error as a failed launch.
cudaError_t reject_launch(const std::string& msg, cudaError_t e);

// ---- pointer arguments (a host pointer handed to a kernel faults on the hardware) --------------------
// True if p is null or inside (or one past the end of) a cudaMalloc or cudaMallocHost block (cudart.cpp).
bool device_accessible(const void* p);
bool check_pointers_enabled();
// Argument structs list their pointer members with `template <class F> void pointers(F f) const
// { f(p1); f(p2); ... }` (kernels.cuh); the launch checks those and every pointer parameter.
template <class T, class = void>
struct has_pointer_list : std::false_type {};
template <class T>
struct has_pointer_list<T, std::void_t<decltype(std::declval<const T&>().pointers(std::declval<void (*)(const void*)>()))>>
    : std::true_type {};
template <class T>
inline void find_host_pointers(const T& v, int index, std::string& bad) {
    auto check = [&](const void* p) {
        if (bad.empty() && !device_accessible(p))
            bad = "argument " + std::to_string(index + 1) + (std::is_pointer<T>::value ? "" : " (a member of its struct)") +
                  " is " + std::to_string((uintptr_t)p) + ", not device memory (cudaMalloc) nor pinned host memory";
    };
    if constexpr (std::is_pointer<T>::value)
        check((const void*)v);
    else if constexpr (has_pointer_list<T>::value)
        v.pointers(check);
}

template <class Fn, class Tuple>
struct Closure {
    Fn fn;
    Tuple args;
    static void run(void* ctx) {
        Closure* c = static_cast<Closure*>(ctx);
        std::apply(c->fn, c->args);  // each CUDA thread gets the kernel's parameters by value
    }
    static void* clone(const void* ctx) { return new Closure(*static_cast<const Closure*>(ctx)); }
    static void free_ctx(void* ctx) { delete static_cast<Closure*>(ctx); }
};

template <class... P>
struct Launch {
    const char* name;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    void (*fn)(P...);
    template <class... A>
    void operator()(A&&... a) const {
        static_assert(sizeof...(A) == sizeof...(P), "KLAUNCH: wrong number of kernel arguments");
        // Arguments are converted to the parameter types once, like the real launch does.
        typedef std::tuple<std::decay_t<P>...> Tuple;
        Closure<void (*)(P...), Tuple> c{fn, Tuple(std::forward<A>(a)...)};
        if (check_pointers_enabled()) {
            std::string bad;
            int i = 0;
            std::apply([&](const auto&... x) { (find_host_pointers(x, i++, bad), ...); }, c.args);
            if (!bad.empty()) {
                reject_launch(std::string("beagle-emu: launch of kernel '") + name + "': " + bad +
                                  " (the hardware faults on the access: illegal address)",
                              cudaErrorIllegalAddress);
                return;
            }
        }
        typedef Closure<void (*)(P...), Tuple> C;
        launch_grid(name, reinterpret_cast<const void*>(fn), grid, block, smem, stream, &C::run, &c, &C::clone,
                    &C::free_ctx);
    }
};
template <class... P>
Launch<P...> make_launch(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         void (*fn)(P...)) {
    return Launch<P...>{name, grid, block, smem, stream, fn};
}

// ---- debug controls (also settable by environment variables, see README.md) ------------------
enum class Schedule { Forward, Reverse, Random };
void set_schedule(Schedule s, uint64_t seed = 1);  // order of threads between barriers
Schedule get_schedule();
void set_poison(bool on);        // NaN-fill (0xFF bytes) static+dynamic shared memory at block start
void set_threads(int n);         // OS threads running blocks (BEAGLE_EMU_THREADS)
int get_threads();
void set_abort_on_error(bool on);  // abort() the process on a failed launch (for gdb)
void set_quiet(bool on);         // do not print launch failures to stderr
void set_check_pointers(bool on);  // reject launches with host pointer arguments (default on; BEAGLE_EMU_CHECK_POINTERS=0)
std::string last_error_detail();   // message of the last failed launch, "" if none
void clear_error_detail();
uint64_t launch_count();

}  // namespace beagle_emu

// ---- the runtime's C++ overloads that cuda_runtime.h declares only under nvcc -------------------
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* func, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute((const void*)func, attr, value);
}
template <class T>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* func) {
    return ::cudaFuncGetAttributes(attr, (const void*)func);
}
template <class T>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, T* func, int block_size, size_t smem) {
    return ::cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, (const void*)func, block_size, smem);
}

// ---- launch and dynamic shared memory macros (same names under nvcc, see compat.cuh) ----------
#define KLAUNCH(grid, block, smem, stream, ...) \
    ::beagle_emu::make_launch(#__VA_ARGS__, (grid), (block), (smem), (stream), __VA_ARGS__)
#define DYN_SMEM(T, name) T* name = reinterpret_cast<T*>(::beagle_emu::t_dyn_smem)

// ---- vector loads and stores (float4, int4, ...): the hardware faults on a misaligned address ----------
namespace beagle_emu {
template <class V>
inline void check_vector_alignment(Site site, const void* p) {
    if ((uintptr_t)p % alignof(V) == 0) return;
    char msg[160];
    snprintf(msg, sizeof msg, "misaligned vector access: %zu-byte vector at %p is not %zu-byte aligned (the hardware "
             "faults: misaligned address)", sizeof(V), p, alignof(V));
    kernel_fail(site, msg);
}
template <class V>
inline V vload(Site site, const void* p) {
    check_vector_alignment<V>(site, p);
    V v;
    memcpy(&v, p, sizeof(V));
    return v;
}
template <class V>
inline void vstore(Site site, void* p, const V& v) {
    check_vector_alignment<V>(site, p);
    memcpy(p, &v, sizeof(V));
}
}  // namespace beagle_emu
#define VLOAD(V, p) ::beagle_emu::vload<V>(BEAGLE_EMU_SITE("VLOAD"), (p))
#define VSTORE(V, p, v) ::beagle_emu::vstore<V>(BEAGLE_EMU_SITE("VSTORE"), (p), (v))

// ---- block barriers ---------------------------------------------------------------------------
#define __syncthreads() ((void)::beagle_emu::block_barrier(BEAGLE_EMU_SITE("__syncthreads()"), 1, ::beagle_emu::kBarPlain))
#define __syncthreads_count(pred) ::beagle_emu::block_barrier(BEAGLE_EMU_SITE("__syncthreads_count()"), (pred) ? 1 : 0, ::beagle_emu::kBarCount)
#define __syncthreads_and(pred) ::beagle_emu::block_barrier(BEAGLE_EMU_SITE("__syncthreads_and()"), (pred) ? 1 : 0, ::beagle_emu::kBarAnd)
#define __syncthreads_or(pred) ::beagle_emu::block_barrier(BEAGLE_EMU_SITE("__syncthreads_or()"), (pred) ? 1 : 0, ::beagle_emu::kBarOr)

// ---- warp collectives -------------------------------------------------------------------------
namespace beagle_emu {

template <class T>
inline T shfl(Site site, int kind, unsigned mask, T var, int arg, int width) {
    // Any plain value type (int, float, double, __half, __half2, __nv_bfloat162, ...): copied bytewise.
    static_assert(std::is_standard_layout<T>::value && sizeof(T) <= 16, "__shfl_*_sync: unsupported type");
    T result;
    WarpOp op{};
    op.kind = kind; op.mask = mask; op.in = &var; op.out = &result; op.size = sizeof(T);
    op.arg = arg; op.width = width; op.site = site;
    warp_collective(op);
    return result;
}
template <class T>
inline T shfl_idx(Site s, unsigned mask, T var, int src_lane, int width = warpSize) { return shfl(s, kOpShflIdx, mask, var, src_lane, width); }
template <class T>
inline T shfl_up(Site s, unsigned mask, T var, unsigned delta, int width = warpSize) { return shfl(s, kOpShflUp, mask, var, (int)delta, width); }
template <class T>
inline T shfl_down(Site s, unsigned mask, T var, unsigned delta, int width = warpSize) { return shfl(s, kOpShflDown, mask, var, (int)delta, width); }
template <class T>
inline T shfl_xor(Site s, unsigned mask, T var, int lane_mask, int width = warpSize) { return shfl(s, kOpShflXor, mask, var, lane_mask, width); }

inline unsigned vote(Site site, int kind, unsigned mask, int pred) {
    unsigned result = 0;
    int p = pred ? 1 : 0;
    WarpOp op{};
    op.kind = kind; op.mask = mask; op.in = &p; op.out = &result; op.size = sizeof(int); op.site = site;
    warp_collective(op);
    return result;
}
inline void syncwarp(Site site, unsigned mask = 0xffffffffu) {
    WarpOp op{};
    op.kind = kOpSyncWarp; op.mask = mask; op.site = site;
    warp_collective(op);
}
// `__syncwarp` expands to one of these so that both __syncwarp() and __syncwarp(mask) work.
struct SyncWarpCall {
    Site site;
    void operator()(unsigned mask = 0xffffffffu) const { syncwarp(site, mask); }
};
template <class T>
inline unsigned match_any(Site site, unsigned mask, T value) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "__match_any_sync takes 32- or 64-bit values");
    unsigned result = 0;
    WarpOp op{};
    op.kind = kOpMatchAny; op.mask = mask; op.in = &value; op.out = &result; op.size = sizeof(T); op.site = site;
    warp_collective(op);
    return result;
}
template <class T>
inline unsigned match_all(Site site, unsigned mask, T value, int* pred) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "__match_all_sync takes 32- or 64-bit values");
    unsigned result = 0;
    WarpOp op{};
    op.kind = kOpMatchAll; op.mask = mask; op.in = &value; op.out = &result; op.size = sizeof(T); op.site = site;
    warp_collective(op);
    if (pred) *pred = result != 0;
    return result;
}
template <class T>
inline T reduce_op(Site site, int kind, unsigned mask, T value) {
    T result;
    WarpOp op{};
    op.kind = kind; op.mask = mask; op.in = &value; op.out = &result; op.size = 4; op.site = site;
    warp_collective(op);
    return result;
}
inline unsigned reduce_add(Site s, unsigned mask, unsigned v) { return reduce_op(s, kOpReduceAddU, mask, v); }
inline int reduce_add(Site s, unsigned mask, int v) { return reduce_op(s, kOpReduceAddI, mask, v); }
inline unsigned reduce_min(Site s, unsigned mask, unsigned v) { return reduce_op(s, kOpReduceMinU, mask, v); }
inline int reduce_min(Site s, unsigned mask, int v) { return reduce_op(s, kOpReduceMinI, mask, v); }
inline unsigned reduce_max(Site s, unsigned mask, unsigned v) { return reduce_op(s, kOpReduceMaxU, mask, v); }
inline int reduce_max(Site s, unsigned mask, int v) { return reduce_op(s, kOpReduceMaxI, mask, v); }

}  // namespace beagle_emu

#define __shfl_sync(...) ::beagle_emu::shfl_idx(BEAGLE_EMU_SITE("__shfl_sync()"), __VA_ARGS__)
#define __shfl_up_sync(...) ::beagle_emu::shfl_up(BEAGLE_EMU_SITE("__shfl_up_sync()"), __VA_ARGS__)
#define __shfl_down_sync(...) ::beagle_emu::shfl_down(BEAGLE_EMU_SITE("__shfl_down_sync()"), __VA_ARGS__)
#define __shfl_xor_sync(...) ::beagle_emu::shfl_xor(BEAGLE_EMU_SITE("__shfl_xor_sync()"), __VA_ARGS__)
#define __ballot_sync(mask, pred) ::beagle_emu::vote(BEAGLE_EMU_SITE("__ballot_sync()"), ::beagle_emu::kOpBallot, (mask), (pred))
#define __any_sync(mask, pred) ((int)::beagle_emu::vote(BEAGLE_EMU_SITE("__any_sync()"), ::beagle_emu::kOpAny, (mask), (pred)))
#define __all_sync(mask, pred) ((int)::beagle_emu::vote(BEAGLE_EMU_SITE("__all_sync()"), ::beagle_emu::kOpAll, (mask), (pred)))
#define __uni_sync(mask, pred) ((int)::beagle_emu::vote(BEAGLE_EMU_SITE("__uni_sync()"), ::beagle_emu::kOpUni, (mask), (pred)))
#define __syncwarp ::beagle_emu::SyncWarpCall{BEAGLE_EMU_SITE("__syncwarp()")}
#define __match_any_sync(mask, value) ::beagle_emu::match_any(BEAGLE_EMU_SITE("__match_any_sync()"), (mask), (value))
#define __match_all_sync(mask, value, pred) ::beagle_emu::match_all(BEAGLE_EMU_SITE("__match_all_sync()"), (mask), (value), (pred))
#define __reduce_add_sync(mask, value) ::beagle_emu::reduce_add(BEAGLE_EMU_SITE("__reduce_add_sync()"), (mask), (value))
#define __reduce_min_sync(mask, value) ::beagle_emu::reduce_min(BEAGLE_EMU_SITE("__reduce_min_sync()"), (mask), (value))
#define __reduce_max_sync(mask, value) ::beagle_emu::reduce_max(BEAGLE_EMU_SITE("__reduce_max_sync()"), (mask), (value))
#define __reduce_and_sync(mask, value) ::beagle_emu::reduce_op(BEAGLE_EMU_SITE("__reduce_and_sync()"), ::beagle_emu::kOpReduceAnd, (mask), (unsigned)(value))
#define __reduce_or_sync(mask, value) ::beagle_emu::reduce_op(BEAGLE_EMU_SITE("__reduce_or_sync()"), ::beagle_emu::kOpReduceOr, (mask), (unsigned)(value))
#define __reduce_xor_sync(mask, value) ::beagle_emu::reduce_op(BEAGLE_EMU_SITE("__reduce_xor_sync()"), ::beagle_emu::kOpReduceXor, (mask), (unsigned)(value))

// __activemask() is not a barrier (PTX activemask): the emulator does not track divergence, so it
// returns the lanes of the warp that exist and have not exited.
inline unsigned __activemask() { return ::beagle_emu::warp_live_mask(); }

#define __trap() ::beagle_emu::kernel_fail(BEAGLE_EMU_SITE("__trap()"), "kernel called __trap()")
inline void __brkpt() { __builtin_trap(); }
inline void __nanosleep(unsigned) {}

#include "emu_math.h"
#include "emu_wmma.h"
