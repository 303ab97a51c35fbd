// ops_cuda.cu: the CUDA backend (cuda_ops.h): device memory, weight upload, the staging of the host
// arrays the op interface passes (tokens, positions, masks, indices) into device scratch, and each op
// of src/backend/ops.h mapped onto the host launchers of cuda/<op>.cu (declared in cuda/kernels.cuh),
// which check the arguments, pick grid and block, and launch. No kernel is launched here.
// Compiled by nvcc (build/beagle-cuda) or by g++ with cuda/compat.cuh forced in (build/beagle-cuda-emu,
// kernels run in the CPU emulator). Not part of libbeagle.a (the main Makefile compiles only *.cpp).
#include "cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../../core/comm.h"
#include "../../core/common.h"
#include "../cpu/cpu_ops.h"
#include "cuda_rt.h"
#include "kernels.cuh"

namespace beagle {

static void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("CUDA %s failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

// What the launchers report to: every launch checked for errors and counted by kernel name;
// BEAGLE_CUDA_SYNC=1 synchronizes after every launch (errors at their kernel), BEAGLE_CUDA_PROFILE=1
// too and adds up the seconds and the thread blocks per kernel (printed at exit; the fewest blocks of one
// launch says whether a kernel ever fills the GPU). A failed argument check is an Error.
struct CudaRunner : KernelRunner {
    explicit CudaRunner(CudaRt& r) : rt(r) {}
    CudaRt& rt;
    std::map<std::string, long> launches;
    std::map<std::string, double> seconds;
    std::map<std::string, long long> blocks, fewest_blocks;  // profile: all launches' blocks, one launch's fewest
    long long grid_blocks = 0;
    bool sync_each = false, profile = false;
    double t0 = 0;
    // A captured decode step (CudaOps::step_begin): capture records the kernels in order (they run at the
    // graph launch, counted there); replay (skip set) checks the same kernels come in the same order.
    std::vector<const char*>* step_kernels = nullptr;
    const std::vector<const char*>* step_expect = nullptr;
    size_t step_i = 0;
    void before(const char*, const dim3& grid) override {
        grid_blocks = (long long)grid.x * grid.y * grid.z;
        if (profile) t0 = now_seconds();
    }
    void after(const char* kernel) override {
        if (skip) {
            if (step_i >= step_expect->size() || strcmp((*step_expect)[step_i], kernel) != 0)
                fail(strfmt("CUDA graph: the replayed step launches %s where the captured one launched %s", kernel,
                            step_i < step_expect->size() ? (*step_expect)[step_i] : "nothing"));
            step_i++;
            return;
        }
        if (step_kernels) {
            step_kernels->push_back(kernel);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess)
                fail(strfmt("CUDA kernel %s failed in a captured step: %s (%s)", kernel, cudaGetErrorName(e),
                            cudaGetErrorString(e)));
            return;
        }
        launches[kernel]++;
        rt.launched();
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess && (sync_each || profile)) {
            e = cudaDeviceSynchronize();
            rt.n.syncs++;
        }
        if (profile) {
            seconds[kernel] += now_seconds() - t0;
            blocks[kernel] += grid_blocks;
            auto f = fewest_blocks.find(kernel);
            if (f == fewest_blocks.end() || grid_blocks < f->second) fewest_blocks[kernel] = grid_blocks;
        }
        if (e != cudaSuccess)
            fail(strfmt("CUDA kernel %s failed: %s (%s)", kernel, cudaGetErrorName(e), cudaGetErrorString(e)));
    }
    [[noreturn]] void fail(const std::string& msg) override { throw Error(msg); }
};

CudaOps::CudaOps()
    : rt_(new CudaRt), run_(new CudaRunner(*rt_)), slot_ptr_(S_COUNT, nullptr), slot_bytes_(S_COUNT, 0),
      slot_host_(S_COUNT), step_last_(S_COUNT, -1), step_last_host_(S_COUNT, nullptr) {
    run_->stream = rt_->stream;
    const char* s = getenv("BEAGLE_CUDA_SYNC");
    run_->sync_each = s && atoi(s) > 0;
    const char* p = getenv("BEAGLE_CUDA_PROFILE");
    run_->profile = p && atoi(p) > 0;
    const char* g = getenv("BEAGLE_CUDA_GRAPH");
    // a synchronized launch cannot be captured; the legacy stream cannot capture
    graphs_on_ = !(g && atoi(g) == 0) && !run_->sync_each && !run_->profile && rt_->stream != 0;
}

CudaOps::~CudaOps() {
    drop_graphs();
    if (run_->profile) {
        fprintf(stderr, "CUDA backend profile (synchronized launches):\n");
        for (auto& kv : run_->launches)
            fprintf(stderr, "  %-26s %8ld launches %10.3f s %12lld blocks %8lld fewest\n", kv.first.c_str(), kv.second,
                    run_->seconds[kv.first], run_->blocks[kv.first], run_->fewest_blocks[kv.first]);
    }
    for (void* p : slot_ptr_)
        if (p) cudaFree(p);
    if (step_dev_) cudaFree(step_dev_);
    for (auto& kv : weights_) cudaFree(kv.second.d);
}

const std::map<std::string, long>& CudaOps::launch_counts() const { return run_->launches; }
const DeviceCounters* CudaOps::device_counters() const { return &rt_->n; }

void* CudaOps::scratch(int slot, size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (slot_bytes_[slot] < bytes) {
        BEAGLE_CHECK(step_mode_ == STEP_OFF, "CUDA graph: scratch slot %d grows to %zu bytes inside a captured step",
                     slot, bytes);
        drop_graphs();  // they hold the old block's address
        rt_->free_raw(slot_ptr_[slot]);
        slot_ptr_[slot] = nullptr;
        slot_bytes_[slot] = 0;
        const size_t want = cuda_scratch_slot_bytes(bytes);
        slot_ptr_[slot] = rt_->malloc_raw(want);
        if (!slot_ptr_[slot]) fail("CUDA out of memory allocating %zu bytes of scratch", want);
        slot_bytes_[slot] = want;
        slot_host_[slot].clear();  // a new block holds nothing staged
    }
    return slot_ptr_[slot];
}

// Each slot at its largest use by calls up to s, with the formulas of the ops below (the split-KV
// partials: the most query rows that split, attn_split_max_t(), over s.keys keys).

void CudaOps::reserve(const ScratchSizes& s) {
    const int R = std::max(s.rows, 1);
    for (int slot : {S_TOKENS, S_POS, S_START, S_LEN, S_IDX, S_IDX2, S_QROW, S_COINS})
        scratch(slot, (size_t)R * sizeof(int));
    if (s.mask_words > 0) {
        scratch(S_MASK, (size_t)R * s.mask_words * sizeof(uint64_t));
        scratch(S_BITS, (size_t)R * s.mask_words * sizeof(uint64_t));
    }
    // quantized matmuls take inputs of a multiple of 32 columns: the widest of those is at most s.cols
    // rounded down (a model whose widest input is not quantized, e.g. stories260K's ffn of 172, still
    // quantizes its narrower ones)
    if (s.cols >= 32) scratch(S_QACT, matmul_q_scratch_bytes(R, s.cols / 32 * 32));
    if (s.topk > 0) scratch(S_TOPK, (size_t)R * s.topk * (sizeof(int) + sizeof(float)) + (size_t)R * sizeof(float));
    if (s.n_heads > 0 && s.keys > 0) {
        const int T = std::min(R, attn_split_max_t());
        scratch(S_ATTN_PART, attn_split_scratch_bytes(T, s.n_heads, s.head_dim, std::max(s.keys - T, 0)));
    }
    // the graphs' step arena, which the first captured step would otherwise allocate: a sampled or auto
    // run's first plain step may come rounds after the warm-up
    if (graphs_on_) step_arena();
}

void* CudaOps::stage(int slot, const void* host, size_t bytes) {
    if (step_mode_ != STEP_OFF) return stage_step(slot, host, bytes);
    void* d = scratch(slot, bytes);
    std::vector<unsigned char>& held = slot_host_[slot];
    if (held.size() == bytes && (bytes == 0 || memcmp(held.data(), host, bytes) == 0)) return d;
    rt_->h2d(d, host, bytes);
    held.assign((const unsigned char*)host, (const unsigned char*)host + bytes);
    return d;
}

// ---- memory ------------------------------------------------------------------------------------
float* CudaOps::alloc(size_t n) {
    size_t bytes = (n ? n : 1) * sizeof(float);
    void* p = rt_->alloc(bytes, true);
    if (!p) fail("CUDA out of memory allocating %zu bytes (%zu bytes cached)", bytes, rt_->cached_bytes());
    return (float*)p;
}
void CudaOps::release(float* p) { rt_->release(p); }
void CudaOps::upload(float* dst, const float* src, size_t n) { rt_->h2d(dst, src, n * sizeof(float)); }
void CudaOps::download(float* dst, const float* src, size_t n) { rt_->d2h(dst, src, n * sizeof(float)); }
void CudaOps::download_async(float* dst, const float* src, size_t n) { rt_->d2h_async(dst, src, n * sizeof(float)); }
void CudaOps::wait_downloads() { rt_->wait_d2h(); }
void CudaOps::copy(float* dst, const float* src, size_t n) {
    if (!n || dst == src) return;
    size_t bytes = n * sizeof(float);
    bool overlap = dst < src + n && src < dst + n;
    if (overlap) {  // cudaMemcpy does not allow overlap (the op is memmove): go through scratch
        void* tmp = scratch(S_TMP, bytes);
        rt_->d2d(tmp, src, bytes);
        src = (const float*)tmp;
    }
    rt_->d2d(dst, src, bytes);
}
void CudaOps::zero(float* p, size_t n) { rt_->memset0(p, n * sizeof(float)); }

// FNV-1a over the size and 256 bytes sampled across the tensor: tells a tied table (same bytes at the
// same address) from a new tensor that happens to reuse a freed host address.
static uint64_t weight_fingerprint(const Tensor& t) {
    const uint8_t* p = (const uint8_t*)t.data;
    uint64_t h = 1469598103934665603ull ^ t.nbytes;
    for (int i = 0; i < 256; i++) {
        h ^= p[(uint64_t)i * (t.nbytes - 1) / 255];
        h *= 1099511628211ull;
    }
    return h ^ (uint64_t)t.dtype;
}

Weight CudaOps::weight(const Tensor& t) {
    Weight w;
    w.host = &t;
    w.dtype = t.dtype;
    w.rows = t.rows();
    w.cols = t.cols();
    BEAGLE_CHECK(t.data && t.nbytes > 0, "CUDA backend: tensor '%s' has no data", t.name.c_str());
    const uint64_t fp = weight_fingerprint(t);
    auto it = weights_.find(t.data);
    if (it != weights_.end() && (it->second.nbytes != t.nbytes || it->second.fingerprint != fp)) {
        drop_graphs();  // they may read the old copy
        rt_->free_raw(it->second.d);
        weights_.erase(it);
        it = weights_.end();
    }
    if (it == weights_.end()) {  // tied embedding / LM head: one device copy
        void* d = rt_->malloc_raw(t.nbytes);
        if (!d)
            fail("CUDA out of memory uploading tensor '%s' (%llu bytes)", t.name.c_str(), (unsigned long long)t.nbytes);
        rt_->h2d_sync(d, t.data, t.nbytes);
        it = weights_.emplace(t.data, DevWeight{d, t.nbytes, fp}).first;
    }
    w.data = it->second.d;
    return w;
}

// ---- matmul (gemm.cu, gemm_quant.cu) -----------------------------------------------------------------
void CudaOps::matmul(float* y, const float* x, const Weight& W, int T) {
    if (T <= 0) return;
    const int rows = (int)W.rows, cols = (int)W.cols;
    switch (W.dtype) {
        case DType::F32:
            launch_matmul_f32(y, x, (const float*)W.data, T, cols, rows, *run_);
            return;
        case DType::F16:
        case DType::BF16:
            launch_matmul_wmma(y, x, W.data, (int)W.dtype, T, cols, rows, *run_);
            return;
        case DType::Q8_0:
        case DType::Q4_0:
        case DType::Q4_1: {
            const Weight* Ws[1] = {&W};
            matmul_n(1, &y, x, Ws, T);
            return;
        }
        case DType::Q5_0:
        case DType::Q5_1:
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K:
            launch_matmul_kquant(y, x, (const uint8_t*)W.data, rows, (int)W.dtype,
                                 (long long)dtype_row_bytes(W.dtype, (uint64_t)cols), cols, T,
                                 scratch(S_QACT, matmul_q_scratch_bytes(T, cols)), *run_);
            return;
        default:
            fail("matmul: weight '%s' has dtype %s, which the CUDA backend does not support",
                 W.host ? W.host->name.c_str() : "?", dtype_name(W.dtype));
    }
}

// Quantized weights of one dtype and width: one launch for all of them (Q/K/V, gate/up; T <= 4 also
// quantizes x inside the GEMM). Anything else: one matmul per weight.
void CudaOps::matmul_n(int n, float* const* ys, const float* x, const Weight* const* Ws, int T) {
    if (T <= 0) return;
    const DType dt = Ws[0]->dtype;
    bool grouped = n >= 1 && n <= QGEMM_MATS && (dt == DType::Q8_0 || dt == DType::Q4_0 || dt == DType::Q4_1);
    for (int i = 1; i < n && grouped; i++) grouped = Ws[i]->dtype == dt && Ws[i]->cols == Ws[0]->cols;
    if (!grouped) {
        Ops::matmul_n(n, ys, x, Ws, T);
        return;
    }
    const int cols = (int)Ws[0]->cols;
    BEAGLE_CHECK(cols % 32 == 0, "matmul: quantized weight '%s' has %d columns, not a multiple of 32",
                 Ws[0]->host ? Ws[0]->host->name.c_str() : "?", cols);
    const uint8_t* w[QGEMM_MATS];
    int rows[QGEMM_MATS];
    for (int i = 0; i < n; i++) {
        w[i] = (const uint8_t*)Ws[i]->data;
        rows[i] = (int)Ws[i]->rows;
    }
    // which path runs (and whether it reads the scratch) is launch_matmul_q's choice (BEAGLE_CUDA_DP4A_MAX_T)
    void* acts = scratch(S_QACT, matmul_q_scratch_bytes(T, cols));
    launch_matmul_q(n, ys, x, w, rows, (int)dt, (long long)dtype_row_bytes(dt, (uint64_t)cols), cols, T, acts, *run_);
}

void CudaOps::matmul_f32(float* y, const float* x, const float* W, int T, int n_in, int n_out) {
    launch_matmul_f32(y, x, W, T, n_in, n_out, *run_);
}

void CudaOps::matmul_f32_bwd_x(float* dx, const float* dy, const float* W, int T, int n_in, int n_out, bool accumulate) {
    launch_matmul_f32_bwd_x(dx, dy, W, T, n_in, n_out, accumulate, *run_);
}

void CudaOps::matmul_f32_bwd_w(float* dW, const float* dy, const float* x, int T, int n_in, int n_out) {
    launch_matmul_f32_bwd_w(dW, dy, x, T, n_in, n_out, *run_);
}

// ---- rmsnorm (rmsnorm.cu) ---------------------------------------------------------------------------
void CudaOps::rmsnorm(float* y, const float* x, const Weight& w, int T, int dim, float eps) {
    BEAGLE_CHECK(w.dtype == DType::F32, "rmsnorm weight must be F32, got %s", dtype_name(w.dtype));
    launch_rmsnorm(y, nullptr, x, (const float*)w.data, T, dim, eps, *run_);
}

void CudaOps::add_rmsnorm(float* y, float* x, const float* dx, const Weight& w, int T, int dim, float eps) {
    BEAGLE_CHECK(w.dtype == DType::F32, "rmsnorm weight must be F32, got %s", dtype_name(w.dtype));
    launch_add_rmsnorm(y, x, dx, (const float*)w.data, T, dim, eps, *run_);
}

void CudaOps::rmsnorm_f32(float* y, float* rstd, const float* x, const float* w, int T, int dim, float eps) {
    launch_rmsnorm(y, rstd, x, w, T, dim, eps, *run_);
}

void CudaOps::rmsnorm_f32_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                              int T, int dim) {
    launch_rmsnorm_bwd(dx, dw, dy, x, w, rstd, T, dim, *run_);
}

// ---- rope (rope.cu) --------------------------------------------------------------------------------
// The inverse frequencies of the CPU backend (same float values), on the device; cached per RopeParams.
const float* CudaOps::rope_freq(const RopeParams& rp) {
    BEAGLE_CHECK(rp.head_dim > 0 && rp.head_dim % 2 == 0, "rope: head_dim %d must be even and positive", rp.head_dim);
    const size_t bytes = (size_t)(rp.head_dim / 2) * sizeof(float);
    // only rope_freq stages S_FREQ, so a slot holding something holds rope_rp_'s frequencies (a slot that
    // grew since, e.g. by a later Ops::reserve, holds nothing: scratch() clears slot_host_)
    bool same = !slot_host_[S_FREQ].empty() && rp.head_dim == rope_rp_.head_dim && rp.theta == rope_rp_.theta &&
                rp.llama3_scaling == rope_rp_.llama3_scaling && rp.factor == rope_rp_.factor &&
                rp.low_freq_factor == rope_rp_.low_freq_factor && rp.high_freq_factor == rope_rp_.high_freq_factor &&
                rp.orig_max_pos == rope_rp_.orig_max_pos;
    if (step_mode_ != STEP_OFF || !same) {  // a captured step uploads them at each launch (one copy node)
        std::vector<float> f(rp.head_dim / 2);
        CpuOps::rope_freqs(rp, f.data());
        const float* d = (const float*)stage(S_FREQ, f.data(), bytes);
        if (step_mode_ == STEP_OFF) rope_rp_ = rp;
        return d;
    }
    return (const float*)slot_ptr_[S_FREQ];
}

void CudaOps::rope(float* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    if (T <= 0 || n_heads <= 0) return;
    const float* freq = rope_freq(rp);
    const int* d_pos = (const int*)stage(S_POS, pos, (size_t)T * sizeof(int));
    launch_rope(x, n_heads, nullptr, 0, d_pos, freq, T, rp.head_dim, inverse, *run_);
}

void CudaOps::rope_qk(float* q, float* k, const int* pos, int T, int n_heads, int n_kv_heads, const RopeParams& rp) {
    if (T <= 0) return;
    const float* freq = rope_freq(rp);
    const int* d_pos = (const int*)stage(S_POS, pos, (size_t)T * sizeof(int));
    launch_rope(q, n_heads, k, n_kv_heads, d_pos, freq, T, rp.head_dim, false, *run_);
}

// ---- rows (embed.cu, rows.cu) ------------------------------------------------------------------------
// Host ids are checked and staged; ids on the backend (and their map) go to the kernel as they are.
void CudaOps::embed(float* x, const Weight& E, const int* tokens, int T, bool on_backend, const int* map) {
    if (T <= 0) return;
    BEAGLE_CHECK(on_backend || !map, "embed: a map is for ids on the backend");
    if (!on_backend)
        for (int t = 0; t < T; t++)
            BEAGLE_CHECK(tokens[t] >= 0 && tokens[t] < E.rows, "token id %d out of range [0, %lld)", tokens[t],
                         (long long)E.rows);
    BEAGLE_CHECK(E.dtype != DType::I32, "embedding table '%s' has dtype I32", E.host ? E.host->name.c_str() : "?");
    const int* d_tok = on_backend ? tokens : (const int*)stage(S_TOKENS, tokens, (size_t)T * sizeof(int));
    long long rb = (long long)dtype_row_bytes(E.dtype, (uint64_t)E.cols);
    launch_embed(x, (const uint8_t*)E.data, (int)E.dtype, rb, d_tok, map, T, (int)E.cols, *run_);
}

void CudaOps::gather_rows(float* dst, const float* src, const int* idx, int n, int width) {
    if (n <= 0 || width <= 0) return;
    const int* d_idx = (const int*)stage(S_IDX, idx, (size_t)n * sizeof(int));
    launch_gather_rows(dst, src, d_idx, n, width, *run_);
}

void CudaOps::scatter_rows(float* dst, const float* src, const int* idx, int n, int width, bool accumulate) {
    if (n <= 0 || width <= 0) return;
    const int* d_idx = (const int*)stage(S_IDX, idx, (size_t)n * sizeof(int));
    launch_scatter_rows(dst, src, d_idx, n, width, accumulate, *run_);
}

void CudaOps::move_rows(float* buf, const int* src, const int* dst, int n, int width) {
    if (n <= 0 || width <= 0) return;
    const int* d_src = (const int*)stage(S_IDX, src, (size_t)n * sizeof(int));
    const int* d_dst = (const int*)stage(S_IDX2, dst, (size_t)n * sizeof(int));
    launch_move_rows(buf, d_src, d_dst, n, width, *run_);
}

// ---- attention (attention.cu) ------------------------------------------------------------------------
void CudaOps::attention(float* out, const float* q, const float* kcache, const float* vcache, int T, int n_heads,
                        int n_kv_heads, int head_dim, const AttnMask& mask) {
    if (T <= 0) return;
    AttnArgs a;
    a.out = out;
    a.q = q;
    a.k = kcache;
    a.v = vcache;
    a.T = T;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.scale = 1.0f / sqrtf((float)head_dim);
    a.n_past = mask.n_past;
    a.n_past_dev = nullptr;
    a.tree = nullptr;
    a.mask_words = mask.mask_words;
    a.kv_start = nullptr;
    a.kv_len = nullptr;
    a.partial = nullptr;
    if (step_mode_ != STEP_OFF && !mask.kv_start) {  // a captured step: n_past from the device
        BEAGLE_CHECK(mask.n_past <= step_->max_past, "CUDA graph: n_past %d above the step's bound %d", mask.n_past,
                     step_->max_past);
        a.n_past = step_->max_past;
        a.n_past_dev = (const int*)stage(S_NPAST, &mask.n_past, sizeof(int));
    }
    if (mask.kv_start) {
        a.kv_start = (const int*)stage(S_START, mask.kv_start, (size_t)T * sizeof(int));
        a.kv_len = (const int*)stage(S_LEN, mask.kv_len, (size_t)T * sizeof(int));
    } else if (mask.tree_mask) {
        a.tree = (const uint64_t*)stage(S_MASK, mask.tree_mask, (size_t)T * mask.mask_words * sizeof(uint64_t));
    }
    if (!mask.kv_start && T <= attn_split_max_t() && attn_slices(a.n_past, T) > 1)  // split-KV partials
        a.partial = (float*)scratch(S_ATTN_PART, attn_split_scratch_bytes(T, n_heads, head_dim, a.n_past));
    launch_attention(a, *run_);
}

// ---- cross-attention (xattn.cu) ----------------------------------------------------------------------
// The kernels' arguments for the op's keys and mask, the mask's host arrays staged on the device.
XAttnArgs CudaOps::xattn_args(const float* q, const int* qrow, int n_q, const XAttnKeys& K, int n_heads, int n_kv_heads,
                              int head_dim, const XAttnMask& mask) {
    XAttnArgs a{};
    a.q = q;
    a.qrow = qrow ? (const int*)stage(S_QROW, qrow, (size_t)n_q * sizeof(int)) : nullptr;
    a.n_q = n_q;
    a.k0 = K.k0;
    a.v0 = K.v0;
    a.n0 = K.n0;
    if (step_mode_ != STEP_OFF && mask.kind == XAttnMask::PREFIX) {  // a captured step: the window from the device
        const int range[2] = {K.start0, K.n0};
        a.k0 = K.k0 - (size_t)K.start0 * n_kv_heads * head_dim;
        a.v0 = K.v0 - (size_t)K.start0 * n_kv_heads * head_dim;
        a.n0_dev = (const int*)stage(S_N0, range, sizeof range);
    }
    a.k1 = K.k1;
    a.v1 = K.v1;
    a.n1 = K.k1 ? K.n1 : 0;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.scale = 1.0f / sqrtf((float)head_dim);
    a.kind = mask.kind == XAttnMask::BLOCK ? 1 : 0;
    a.set0_qrow = mask.kind == XAttnMask::PREFIX && mask.set0_qrow;
    if (mask.kind == XAttnMask::PREFIX && mask.set1_bits && K.n1 > 0)  // bits an op wrote stay where they are
        a.set1_bits = mask.set1_on_backend ? mask.set1_bits
                                           : (const uint64_t*)stage(S_BITS, mask.set1_bits,
                                                                    (size_t)n_q * mask.set1_words * sizeof(uint64_t));
    a.set1_words = mask.set1_words;
    a.w = mask.w;
    a.offset = mask.offset;
    a.n_pred = mask.n_pred;
    return a;
}

void CudaOps::xattn(float* out, float* lse, const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads,
                    int n_kv_heads, int head_dim, const XAttnMask& mask) {
    if (n_q <= 0) return;
    XAttnArgs a = xattn_args(q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
    a.out = out;
    a.lse = lse;
    launch_xattn(a, *run_);
}

void CudaOps::xattn_bwd(float* dq, const XAttnGrads& G, const float* dout, const float* out, const float* lse,
                        const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads, int n_kv_heads,
                        int head_dim, const XAttnMask& mask) {
    if (n_q <= 0) return;
    XAttnArgs a = xattn_args(q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
    a.lse = (float*)lse;
    a.dout = dout;
    a.o = out;
    a.dq = dq;
    a.D = (float*)scratch(S_D, (size_t)n_q * n_heads * sizeof(float));
    a.dk0 = G.dk0;
    a.dv0 = G.dv0;
    a.dk1 = G.dk1;
    a.dv1 = G.dv1;
    launch_xattn_bwd(a, *run_);
}

// ---- element-wise (swiglu.cu, add.cu) ----------------------------------------------------------------
void CudaOps::swiglu(float* out, const float* gate, const float* up, size_t n) {
    launch_swiglu(out, gate, up, (long long)n, *run_);
}

void CudaOps::swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) {
    launch_swiglu_bwd(dgate, dup, dout, gate, up, (long long)n, *run_);
}

void CudaOps::add(float* y, const float* x, size_t n, size_t period) {
    BEAGLE_CHECK(period == 0 || n % period == 0, "add: %zu floats are not rows of period %zu", n, period);
    launch_add(y, x, (long long)n, (long long)period, *run_);
}

// ---- losses (cross_entropy.cu, smoothl1.cu) ----------------------------------------------------------
void CudaOps::lse_update(float* m, float* s, const float* z, int n, int C) { launch_lse_update(m, s, z, n, C, *run_); }

void CudaOps::ce_soft_chunk(float* dz, float* loss, const float* zt, const float* zd, const float* m_t,
                            const float* s_t, const float* m_d, const float* s_d, int n, int C, float scale) {
    launch_ce_soft(dz, loss, zt, zd, m_t, s_t, m_d, s_d, n, C, scale, *run_);
}

void CudaOps::ce_hard_chunk(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d,
                            const int* labels, int v0, int n, int C, float scale) {
    if (n <= 0) return;
    const int* d_labels = (const int*)stage(S_LABELS, labels, (size_t)n * sizeof(int));
    launch_ce_hard(dz, loss, zd, m_d, s_d, d_labels, v0, n, C, scale, *run_);
}

void CudaOps::smoothl1(float* dx, float* loss, const float* x, const float* target, int n, int dim, float beta,
                       float scale) {
    launch_smoothl1(dx, loss, x, target, n, dim, beta, scale, *run_);
}

// ---- optimizer (adamw.cu) ----------------------------------------------------------------------------
double CudaOps::sumsq(const float* x, size_t n) {
    if (!n) return 0.0;
    const size_t nb = (size_t)sumsq_blocks((long long)n);
    double* part = (double*)scratch(S_PART, nb * sizeof(double));
    launch_sumsq(x, (long long)n, part, *run_);
    std::vector<double> h(nb);
    rt_->d2h(h.data(), part, nb * sizeof(double));
    double s = 0;
    for (double p : h) s += p;  // chunk order: fixed
    return s;
}

// Every buffer's chunk partials in one scratch block, one copy down, then added as sumsq() adds them,
// buffer after buffer: the same double.
double CudaOps::sumsq_all(const float* const* xs, const size_t* ns, int count) {
    std::vector<size_t> first(count + 1, 0);
    for (int i = 0; i < count; i++) first[i + 1] = first[i] + (size_t)sumsq_blocks((long long)ns[i]);
    if (first[count] == 0) return 0.0;
    double* part = (double*)scratch(S_PART, first[count] * sizeof(double));
    for (int i = 0; i < count; i++) launch_sumsq(xs[i], (long long)ns[i], part + first[i], *run_);
    std::vector<double> h(first[count]);
    rt_->d2h(h.data(), part, h.size() * sizeof(double));
    double total = 0;
    for (int i = 0; i < count; i++) {
        double s = 0;
        for (size_t j = first[i]; j < first[i + 1]; j++) s += h[j];
        total += s;
    }
    return total;
}

void CudaOps::adamw(float* w, float* m, float* v, const float* g, size_t n, const AdamWParams& p) {
    AdamWArgs a;
    a.w = w;
    a.m = m;
    a.v = v;
    a.g = g;
    a.n = (long long)n;
    a.beta1 = p.beta1;
    a.beta2 = p.beta2;
    a.lr = p.lr;
    a.eps = p.eps;
    a.decay = 1.0f - p.lr * p.weight_decay;
    a.grad_scale = p.grad_scale;
    a.bc1 = 1.0f - (float)std::pow((double)p.beta1, p.step);  // as the CPU backend
    a.bc2 = 1.0f - (float)std::pow((double)p.beta2, p.step);
    launch_adamw(a, *run_);
}

// ---- selection (topk.cu) -----------------------------------------------------------------------------
// idx (rows x k ints), val (rows x k floats) and lse (rows floats) side by side in one scratch block, so
// one copy brings down what the host asked for. on_backend: the ids go straight to the caller's device
// buffer (the values to scratch, unread) and nothing comes down: no sync.
void CudaOps::topk_rows(int* idx, float* val, float* lse, const float* x, int rows, int n_cols, int k, bool on_backend) {
    if (rows <= 0 || k <= 0) return;
    BEAGLE_CHECK(!on_backend || (!val && !lse), "topk_rows: on the backend only the ids are written");
    const size_t nk = (size_t)rows * k;
    char* d = (char*)scratch(S_TOPK, nk * (sizeof(int) + sizeof(float)) + (size_t)rows * sizeof(float));
    int* d_idx = (int*)d;
    float* d_val = (float*)(d + nk * sizeof(int));
    float* d_lse = d_val + nk;
    if (on_backend) {
        launch_topk(x, rows, n_cols, k, idx, d_val, *run_);
        return;
    }
    launch_topk(x, rows, n_cols, k, d_idx, d_val, *run_);
    if (lse) launch_row_lse(x, rows, n_cols, d_lse, *run_);
    std::vector<char> h;
    const size_t bytes = lse ? nk * 8 + (size_t)rows * 4 : val ? nk * 8 : nk * 4;
    h.resize(bytes);
    rt_->d2h(h.data(), d, bytes);
    memcpy(idx, h.data(), nk * sizeof(int));  // k = 1: argmax, 0 for a row without a number (topk_kernel)
    if (val) memcpy(val, h.data() + nk * sizeof(int), nk * sizeof(float));
    if (lse) memcpy(lse, h.data() + nk * 8, (size_t)rows * sizeof(float));
}

// Sampling distributions and draws (sample.cu): the coins go up with the launch (staged, asynchronous),
// the rows and ids stay on the device: no sync.
void CudaOps::warp_rows(float* p, int* ids, const float* coins, const float* x, int rows, int n_cols, const WarpParams& wp) {
    if (rows <= 0) return;
    BEAGLE_CHECK(wp.temperature > 0, "warp_rows: temperature %g (greedy rows have no distribution)", wp.temperature);
    const float* d_coins = coins ? (const float*)stage(S_COINS, coins, (size_t)rows * sizeof(float)) : nullptr;
    launch_warp_rows(p, coins ? ids : nullptr, d_coins, x, rows, n_cols, wp.temperature, wp.top_k, wp.top_p, *run_);
}

// One depth of the dynamic tree (tree.cu): the top-k and logsumexps into the S_TOPK scratch as topk_rows
// (the same kernels), then tree_expand_kernel; every buffer stays on the device, nothing is copied.
void CudaOps::tree_expand(const float* logits, int n_cols, const TreeExpandArgs& t) {
    BEAGLE_CHECK(t.n >= 1 && t.k >= 1, "tree_expand: n %d k %d", t.n, t.k);
    const size_t nk = (size_t)t.n * t.k;
    char* d = (char*)scratch(S_TOPK, nk * (sizeof(int) + sizeof(float)) + (size_t)t.n * sizeof(float));
    int* d_idx = (int*)d;
    float* d_val = (float*)(d + nk * sizeof(int));
    float* d_lse = d_val + nk;
    launch_topk(logits, t.n, n_cols, t.k, d_idx, d_val, *run_);
    launch_row_lse(logits, t.n, n_cols, d_lse, *run_);
    TreeExpandKArgs a;
    a.idx = d_idx;
    a.val = d_val;
    a.lse = d_lse;
    a.nodes = (int*)t.nodes;  // TreeNode: 4 ints (the score as float bits)
    a.rows = t.rows;
    a.mask = t.mask;
    a.rows_next = t.rows_next;
    a.mask_next = t.mask_next;
    a.ids_next = t.ids_next;
    a.words = t.words;
    a.n = t.n;
    a.k = t.k;
    a.n_nodes = t.n_nodes;
    a.depth = t.depth;
    a.n_next = t.n_next;
    a.base = t.base;
    a.min_score = t.min_score;
    a.min_score_dev = step_mode_ != STEP_OFF ? (const float*)stage(S_MIN_SCORE, &t.min_score, sizeof(float)) : nullptr;
    launch_tree_expand(a, *run_);
}

// ---- CUDA graphs of fixed-shape steps (ops.h step_begin; docs/gpu.md "CUDA graphs") ---------------------
// The first step of (owner, variant) is captured on the stream and launched as a graph; later steps run
// the same op calls with the kernel launches skipped (their arguments are the same: K/V rows go through
// staged indices, attention reads n_past and cross-attention its key count from staged values) and launch
// the graph. What differs between steps are the staged host arrays (tokens, positions, K/V rows, masks,
// counts): each stage() call of the captured step got a piece of the graph's arena block; a replay writes
// the call's array into the piece's pinned mirror, which the graph's copy node uploads at its launch. A
// call that repeats the slot's last array (the same host array, the same bytes: the positions at each
// layer's RoPE) reuses its piece. A replay must make the captured calls in order (kernels, slots, sizes);
// anything else is an error, never a silent wrong step. When every block is in use, a new shape takes the
// block of the least recently launched graph.

bool CudaOps::step_arena() {
    if (step_dev_) return true;
    const size_t bytes = (size_t)kStepBlocks * kStepBlockBytes;
    step_pinned_ = (unsigned char*)rt_->pinned(bytes);
    step_dev_ = step_pinned_ ? (unsigned char*)rt_->malloc_raw(bytes) : nullptr;
    if (!step_dev_) {  // no memory for it: no graphs (the ops run as usual)
        graphs_on_ = false;
        return false;
    }
    for (int b = kStepBlocks - 1; b >= 0; b--) step_free_.push_back(b);
    return true;
}

bool CudaOps::step_begin(const void* owner, int variant, int max_past, size_t max_staged) {
    if (!graphs_on_ || max_staged > kStepStageMax || !step_arena()) return false;
    BEAGLE_CHECK(step_mode_ == STEP_OFF, "CUDA graph: step_begin inside a step");
    const auto key = std::make_pair(owner, variant);
    auto it = graphs_.find(key);
    if (it != graphs_.end() && it->second.max_past != max_past) {
        drop_graph(it->second);
        graphs_.erase(it);
        it = graphs_.end();
    }
    if (it == graphs_.end() && step_free_.empty()) {  // every block in use: the least recently launched graph goes
        auto lru = graphs_.begin();
        for (auto g = graphs_.begin(); g != graphs_.end(); ++g)
            if (g->second.last_use < lru->second.last_use) lru = g;
        drop_graph(lru->second);
        graphs_.erase(lru);
    }
    if (it != graphs_.end() && it->second.launched_syncs == rt_->n.syncs)
        return false;  // its last launch may still read its mirrors (no sync since): the ops run as usual this time
    step_call_ = 0;
    if (it != graphs_.end()) {
        StepGraph& g = it->second;
        step_ = &g;
        step_mode_ = STEP_REPLAY;
        step_written_.assign(g.stages.size(), 0);
        run_->skip = true;
        run_->step_expect = &g.kernels;
        run_->step_i = 0;
    } else {
        StepGraph& g = graphs_[key];
        g.max_past = max_past;
        g.block = step_free_.back();
        step_free_.pop_back();
        step_ = &g;
        step_mode_ = STEP_CAPTURE;
        std::fill(step_last_.begin(), step_last_.end(), -1);
        run_->step_kernels = &g.kernels;
        rt_->begin_capture();
    }
    return true;
}

void* CudaOps::stage_step(int slot, const void* host, size_t bytes) {
    StepGraph& g = *step_;
    const size_t block = (size_t)g.block * kStepBlockBytes;
    unsigned char* pin = step_pinned_ + block;
    int s = step_last_[slot];
    if (step_mode_ == STEP_CAPTURE) {  // a new piece unless the call repeats the slot's last array
        const bool repeat = s >= 0 && step_last_host_[slot] == host && g.stages[s].bytes == bytes &&
                            memcmp(pin + g.stages[s].offset, host, bytes) == 0;
        if (!repeat) {
            const size_t off = (g.used + 63) / 64 * 64;
            BEAGLE_CHECK(bytes <= kStepStageMax && off + bytes <= kStepBlockBytes,
                         "CUDA graph: a captured step stages %zu more bytes into slot %d (%zu of its %zu in use)", bytes,
                         slot, off, kStepBlockBytes);
            s = (int)g.stages.size();
            g.stages.push_back({slot, bytes, off});
            g.used = off + bytes;
            g.h2d_bytes += (long long)bytes;
            memcpy(pin + off, host, bytes);
            rt_->h2d_pinned(step_dev_ + block + off, pin + off, bytes);  // recorded: reads the mirror at each launch
        }
        g.calls.push_back(s);
        step_last_[slot] = s;
        step_last_host_[slot] = host;
    } else {  // the captured call's piece
        BEAGLE_CHECK(step_call_ < g.calls.size(), "CUDA graph: the replayed step stages more arrays than the captured one");
        s = g.calls[step_call_];
        const StepGraph::Stage& st = g.stages[s];
        BEAGLE_CHECK(st.slot == slot && st.bytes == bytes,
                     "CUDA graph: the replayed step stages %zu bytes into slot %d where the captured one staged %zu into "
                     "slot %d", bytes, slot, st.bytes, st.slot);
        if (!step_written_[s]) {
            memcpy(pin + st.offset, host, bytes);
            step_written_[s] = 1;
        } else {
            BEAGLE_CHECK(memcmp(pin + st.offset, host, bytes) == 0,
                         "CUDA graph: the replayed step stages two different arrays where the captured one staged one "
                         "(slot %d)", slot);
        }
    }
    step_call_++;
    return step_dev_ + block + g.stages[s].offset;
}

void CudaOps::step_end() {
    BEAGLE_CHECK(step_mode_ != STEP_OFF, "CUDA graph: step_end without step_begin");
    StepGraph& g = *step_;
    if (step_mode_ == STEP_CAPTURE) {
        run_->step_kernels = nullptr;
        g.exec = rt_->end_capture();
    } else {
        run_->skip = false;
        run_->step_expect = nullptr;
        BEAGLE_CHECK(run_->step_i == g.kernels.size() && step_call_ == g.calls.size(),
                     "CUDA graph: the replayed step made %zu launches and %zu stages, the captured one %zu and %zu",
                     run_->step_i, step_call_, g.kernels.size(), g.calls.size());
    }
    step_mode_ = STEP_OFF;
    step_ = nullptr;
    rt_->graph_launch(g.exec);
    rt_->n.h2d_bytes += g.h2d_bytes;
    g.launched_syncs = rt_->n.syncs;
    g.last_use = ++step_uses_;
}

void CudaOps::drop_graph(StepGraph& g) {
    if (g.launched_syncs == rt_->n.syncs) rt_->sync();  // its block may be reused while its copies still read it
    rt_->graph_destroy(g.exec);
    if (g.block >= 0) step_free_.push_back(g.block);
}

void CudaOps::step_drop(const void* owner) {
    for (auto it = graphs_.begin(); it != graphs_.end();) {
        if (it->first.first == owner) {
            drop_graph(it->second);
            it = graphs_.erase(it);
        } else {
            ++it;
        }
    }
}

void CudaOps::drop_graphs() {
    for (auto& kv : graphs_) drop_graph(kv.second);
    graphs_.clear();
}

// ---- factory -------------------------------------------------------------------------------------
std::unique_ptr<Ops> make_cuda_ops() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear the sticky error
        fail("no CUDA device found (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    }
    if (n <= 0) fail("no CUDA device found (cudaGetDeviceCount returned 0 devices)");
    const int dev = env_local_rank() % n;  // under mpirun: one GPU per rank of this node (core/comm.h)
    cuda_check(cudaSetDevice(dev), "cudaSetDevice");
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    if (prop.major < 8)
        fail("CUDA device '%s' has compute capability %d.%d; this build needs 8.0 or newer (sm_80/86/89/90)", prop.name,
             prop.major, prop.minor);
    return std::unique_ptr<Ops>(new CudaOps());
}

}  // namespace beagle
