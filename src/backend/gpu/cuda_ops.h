// cuda_ops.h: the CUDA backend of the op interface (src/backend/ops.h): device buffers from
// cudaMalloc, weights uploaded once in their stored dtype, host arrays staged into device scratch,
// every op a call of the host launchers in cuda/<op>.cu (declared in cuda/kernels.cuh), each launch
// checked for errors. Plain C++ header (no CUDA types) so tests and the CLI can include it; the
// implementation is ops_cuda.cu (compiled by nvcc for build/beagle-cuda, or by g++ against the CPU
// emulator cuda/emu/ for build/beagle-cuda-emu).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "../ops.h"

struct XAttnArgs;  // cuda/kernels.cuh

namespace beagle {

struct CudaRunner;  // ops_cuda.cu: the KernelRunner of the launchers (error checks, counts, profile)

// The bytes a scratch slot takes for a request of `bytes`: half again as headroom, so that a slightly larger
// later request does not reallocate (CudaOps::scratch; the memory plan, src/cli/plan.cpp, counts the same).
inline size_t cuda_scratch_slot_bytes(size_t bytes) { return bytes + bytes / 2; }
class CudaRt;       // cuda_rt.h: the counted runtime calls (allocator, staging, copies, syncs)

class CudaOps : public Ops {
public:
    CudaOps();  // needs a device: use make_cuda_ops() for the "no CUDA device found" error
    ~CudaOps() override;
    const char* name() const override { return "cuda"; }
    const DeviceCounters* device_counters() const override;
    void reserve(const ScratchSizes& s) override;
    bool step_begin(const void* owner, int variant, int max_past, size_t max_staged) override;
    void step_end() override;
    void step_drop(const void* owner) override;

    float* alloc(size_t n) override;
    void release(float* p) override;
    void upload(float* dst, const float* src, size_t n) override;
    void download(float* dst, const float* src, size_t n) override;
    void download_async(float* dst, const float* src, size_t n) override;
    void wait_downloads() override;
    void copy(float* dst, const float* src, size_t n) override;
    Weight weight(const Tensor& t) override;

    void matmul(float* y, const float* x, const Weight& W, int T) override;
    void matmul_n(int n, float* const* ys, const float* x, const Weight* const* Ws, int T) override;
    void embed(float* x, const Weight& E, const int* tokens, int T, bool on_backend = false,
               const int* map = nullptr) override;
    void rmsnorm(float* y, const float* x, const Weight& w, int T, int dim, float eps) override;
    void add_rmsnorm(float* y, float* x, const float* dx, const Weight& w, int T, int dim, float eps) override;
    void attention(float* out, const float* q, const float* kcache, const float* vcache, int T, int n_heads,
                   int n_kv_heads, int head_dim, const AttnMask& mask) override;
    void swiglu(float* out, const float* gate, const float* up, size_t n) override;
    void add(float* y, const float* x, size_t n, size_t period = 0) override;
    void move_rows(float* buf, const int* src, const int* dst, int n, int width) override;

    void zero(float* p, size_t n) override;
    void gather_rows(float* dst, const float* src, const int* idx, int n, int width) override;
    void scatter_rows(float* dst, const float* src, const int* idx, int n, int width, bool accumulate) override;
    void matmul_f32(float* y, const float* x, const float* W, int T, int n_in, int n_out) override;
    void matmul_f32_bwd_x(float* dx, const float* dy, const float* W, int T, int n_in, int n_out, bool accumulate) override;
    void matmul_f32_bwd_w(float* dW, const float* dy, const float* x, int T, int n_in, int n_out) override;
    void rmsnorm_f32(float* y, float* rstd, const float* x, const float* w, int T, int dim, float eps) override;
    void rmsnorm_f32_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int T,
                     int dim) override;
    void rope(float* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) override;
    void rope_qk(float* q, float* k, const int* pos, int T, int n_heads, int n_kv_heads, const RopeParams& rp) override;
    void xattn(float* out, float* lse, const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads,
                   int n_kv_heads, int head_dim, const XAttnMask& mask) override;
    void xattn_bwd(float* dq, const XAttnGrads& dkeys, const float* dout, const float* out, const float* lse,
                   const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads, int n_kv_heads,
                   int head_dim, const XAttnMask& mask) override;
    void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) override;
    void lse_update(float* m, float* s, const float* z, int n, int C) override;
    void ce_soft_chunk(float* dz, float* loss, const float* zt, const float* zd, const float* m_t, const float* s_t,
                       const float* m_d, const float* s_d, int n, int C, float scale) override;
    void ce_hard_chunk(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d, const int* labels,
                       int v0, int n, int C, float scale) override;
    void smoothl1(float* dx, float* loss, const float* x, const float* target, int n, int dim, float beta,
                  float scale) override;
    double sumsq(const float* x, size_t n) override;
    void adamw(float* w, float* m, float* v, const float* g, size_t n, const AdamWParams& p) override;

    double sumsq_all(const float* const* xs, const size_t* ns, int count) override;
    void tree_expand(const float* logits, int n_cols, const TreeExpandArgs& a) override;
    void topk_rows(int* idx, float* val, float* lse, const float* x, int rows, int n_cols, int k,
                   bool on_backend = false) override;
    void warp_rows(float* p, int* ids, const float* coins, const float* x, int rows, int n_cols,
                   const WarpParams& wp) override;

    // Kernel launches so far, by kernel name (tests check which kernels an op ran).
    const std::map<std::string, long>& launch_counts() const;

private:
    // device scratch slots (host arrays staged for kernels, temporaries)
    enum Slot : int { S_TOKENS, S_POS, S_MASK, S_START, S_LEN, S_IDX, S_IDX2, S_QROW, S_BITS, S_QACT, S_D, S_PART,
                      S_FREQ, S_LABELS, S_TMP, S_TOPK, S_ATTN_PART, S_NPAST, S_COINS, S_N0, S_MIN_SCORE,
                      S_COUNT };
    // Device copy of a host array in scratch slot `slot` (grown on demand, reused by the next call),
    // uploaded asynchronously through the pinned arena; bytes equal to what the slot already holds
    // are not uploaded again (the positions of a forward go up once, not at every layer's RoPE).
    void* stage(int slot, const void* host, size_t bytes);
    void* scratch(int slot, size_t bytes);  // device scratch without upload
    const float* rope_freq(const RopeParams& rp);
    ::XAttnArgs xattn_args(const float* q, const int* qrow, int n_q, const XAttnKeys& K, int n_heads, int n_kv_heads,
                           int head_dim, const XAttnMask& mask);

    std::unique_ptr<CudaRt> rt_;
    std::unique_ptr<CudaRunner> run_;
    struct DevWeight {
        void* d;
        uint64_t nbytes, fingerprint;  // a reused host address with other contents is uploaded again
    };
    std::unordered_map<const void*, DevWeight> weights_;  // host tensor bytes -> device copy (tied tables share)
    std::vector<void*> slot_ptr_;
    std::vector<size_t> slot_bytes_;
    std::vector<std::vector<unsigned char>> slot_host_;  // what each staged slot holds (the last upload)
    RopeParams rope_rp_;  // the frequencies S_FREQ holds, when slot_host_[S_FREQ] is not empty

    // CUDA graphs of fixed-shape steps (step_begin .. step_end; docs/gpu.md "CUDA graphs"). Each graph owns a
    // block of the step arena (kStepBlocks blocks of kStepBlockBytes, device memory and a pinned mirror):
    // every host array its step stages gets its own piece of the block, which a copy node of the graph
    // uploads from the mirror at each launch, so graphs launched back to back never share a mirror.
    struct StepGraph {
        void* exec = nullptr;  // cudaGraphExec_t
        int max_past = 0;
        int block = -1;        // its block of the step arena
        struct Stage {
            int slot;
            size_t bytes, offset;  // offset in the block
        };
        std::vector<const char*> kernels;  // the captured launches, in order
        std::vector<Stage> stages;         // the copy nodes, in order
        std::vector<int> calls;            // each stage() call of the step: the stage it used
        size_t used = 0;                   // bytes of the block in use
        long long h2d_bytes = 0;
        long long launched_syncs = -1;     // rt_->n.syncs at its last launch
        long long last_use = 0;            // step_uses_ at its last launch
    };
    enum StepMode { STEP_OFF, STEP_CAPTURE, STEP_REPLAY };
    static constexpr int kStepBlocks = 128;
    static constexpr size_t kStepBlockBytes = 8192, kStepStageMax = 4096;
    void* stage_step(int slot, const void* host, size_t bytes);
    bool step_arena();  // the arena, allocated on first use (false: no memory for it, graphs off)
    void drop_graph(StepGraph& g);
    void drop_graphs();
    std::map<std::pair<const void*, int>, StepGraph> graphs_;
    bool graphs_on_ = true;              // BEAGLE_CUDA_GRAPH=0: off
    StepMode step_mode_ = STEP_OFF;
    StepGraph* step_ = nullptr;          // the graph being captured or replayed
    size_t step_call_ = 0;               // stage() calls so far in this step
    std::vector<int> step_last_;         // capture: per slot, the stage this step used last (-1: none)
    std::vector<const void*> step_last_host_;  // and the host array it came from
    std::vector<char> step_written_;     // replay: the stages written so far
    unsigned char* step_pinned_ = nullptr;  // the arena's pinned mirrors
    unsigned char* step_dev_ = nullptr;     // and device blocks
    std::vector<int> step_free_;            // its free blocks
    long long step_uses_ = 0;               // graph launches so far
};

// The CUDA backend, or Error "no CUDA device found (...)" when cudaGetDeviceCount fails or finds none.
std::unique_ptr<Ops> make_cuda_ops();

}  // namespace beagle
