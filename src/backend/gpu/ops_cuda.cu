// ops_cuda.cu: the CUDA backend (cuda_ops.h): device memory, weight upload, the target's inference
// ops and make_cuda_ops(). Each op checks its arguments, stages the host arrays the op interface
// passes (tokens, positions, masks) into device scratch, and launches kernels of cuda/*.cu through
// LAUNCH = KLAUNCH + an error check. Training ops are in ops_cuda_train.cu.
// Compiled by nvcc (build/beagle-cuda) or by g++ with cuda/compat.cuh forced in (build/beagle-cuda-emu,
// kernels run in the CPU emulator). Not part of libbeagle.a (the main Makefile compiles only *.cpp).
#include "cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../../core/common.h"
#include "../cpu/cpu_ops.h"
#include "kernels.cuh"

namespace beagle {

// LAUNCH(grid, block, smem, kernel, args...): launch on the default stream, then check for errors.
#define LAUNCH(grid, block, smem, kernel, ...)                      \
    do {                                                            \
        const double t0_ = profile_ ? now_seconds() : 0.0;          \
        KLAUNCH((grid), (block), (smem), 0, kernel)(__VA_ARGS__);  \
        check_launch(#kernel, t0_);                                 \
    } while (0)

static void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("CUDA %s failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

CudaOps::CudaOps() : slot_ptr_(S_COUNT, nullptr), slot_bytes_(S_COUNT, 0) {
    const char* s = getenv("BEAGLE_CUDA_SYNC");
    sync_each_ = s && atoi(s) > 0;
    const char* p = getenv("BEAGLE_CUDA_PROFILE");
    profile_ = p && atoi(p) > 0;
}

CudaOps::~CudaOps() {
    if (profile_) {
        fprintf(stderr, "CUDA backend profile (synchronized launches):\n");
        for (auto& kv : launches_)
            fprintf(stderr, "  %-26s %8ld launches %10.3f s\n", kv.first.c_str(), kv.second, seconds_[kv.first]);
    }
    for (void* p : slot_ptr_)
        if (p) cudaFree(p);
    for (auto& kv : weights_) cudaFree(kv.second.d);
}

void CudaOps::check_launch(const char* kernel, double t0) {
    launches_[kernel]++;
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && (sync_each_ || profile_)) e = cudaDeviceSynchronize();
    if (profile_) seconds_[kernel] += now_seconds() - t0;
    if (e != cudaSuccess) fail("CUDA kernel %s failed: %s (%s)", kernel, cudaGetErrorName(e), cudaGetErrorString(e));
}

void* CudaOps::scratch(int slot, size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (slot_bytes_[slot] < bytes) {
        if (slot_ptr_[slot]) cuda_check(cudaFree(slot_ptr_[slot]), "cudaFree");
        slot_ptr_[slot] = nullptr;
        slot_bytes_[slot] = 0;
        size_t want = bytes + bytes / 2;
        cuda_check(cudaMalloc(&slot_ptr_[slot], want), "cudaMalloc (scratch)");
        slot_bytes_[slot] = want;
    }
    return slot_ptr_[slot];
}

void* CudaOps::stage(int slot, const void* host, size_t bytes) {
    void* d = scratch(slot, bytes);
    if (bytes) cuda_check(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (stage)");
    return d;
}

// ---- memory ------------------------------------------------------------------------------------
float* CudaOps::alloc(size_t n) {
    void* p = nullptr;
    size_t bytes = (n ? n : 1) * sizeof(float);
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) fail("CUDA out of memory allocating %zu bytes (%s)", bytes, cudaGetErrorString(e));
    cuda_check(cudaMemset(p, 0, bytes), "cudaMemset");
    return (float*)p;
}
void CudaOps::release(float* p) {
    if (p) cuda_check(cudaFree(p), "cudaFree");
}
void CudaOps::upload(float* dst, const float* src, size_t n) {
    if (n) cuda_check(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
}
void CudaOps::download(float* dst, const float* src, size_t n) {
    if (n) cuda_check(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
}
void CudaOps::copy(float* dst, const float* src, size_t n) {
    if (!n || dst == src) return;
    size_t bytes = n * sizeof(float);
    bool overlap = dst < src + n && src < dst + n;
    if (overlap) {  // cudaMemcpy does not allow overlap (the op is memmove): go through scratch
        void* tmp = scratch(S_TMP, bytes);
        cuda_check(cudaMemcpy(tmp, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy (copy)");
        src = (const float*)tmp;
    }
    cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy (copy)");
}

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
        cuda_check(cudaFree(it->second.d), "cudaFree");
        weights_.erase(it);
        it = weights_.end();
    }
    if (it == weights_.end()) {  // tied embedding / LM head: one device copy
        void* d = nullptr;
        cudaError_t e = cudaMalloc(&d, t.nbytes);
        if (e != cudaSuccess)
            fail("CUDA out of memory uploading tensor '%s' (%llu bytes, %s)", t.name.c_str(), (unsigned long long)t.nbytes,
                 cudaGetErrorString(e));
        cuda_check(cudaMemcpy(d, t.data, t.nbytes, cudaMemcpyHostToDevice), "cudaMemcpy (weight)");
        it = weights_.emplace(t.data, DevWeight{d, t.nbytes, fp}).first;
    }
    w.data = it->second.d;
    return w;
}

// ---- dense products --------------------------------------------------------------------------
void CudaOps::gemm(const void* args, const float* B) {
    const GemmArgs& g = *(const GemmArgs*)args;
    if (g.M <= 0 || g.N <= 0) return;
    if (g.M <= GEMV_MAX_M) {  // same bits as the tiled kernel (gemm.cu): batch invariant either way
        LAUNCH(cdiv(g.N, 128), 128, 0, gemv_f32_kernel, g, B);
        return;
    }
    dim3 grid(cdiv(g.N, GEMM_BN), cdiv(g.M, GEMM_BM));
    LAUNCH(grid, GEMM_THREADS, 0, gemm_f32_kernel, g, B);
}

static GemmArgs linear_fwd_args(float* y, const float* x, int T, int n_in, int n_out) {
    GemmArgs g;  // y (T x n_out) = x (T x n_in) W^T, W: n_out x n_in
    g.M = T;
    g.N = n_out;
    g.K = n_in;
    g.A = x;
    g.a_m = n_in;
    g.a_k = 1;
    g.b_k = 1;
    g.b_n = n_in;
    g.C = y;
    g.c_m = n_out;
    g.accumulate = 0;
    return g;
}

void CudaOps::matmul(float* y, const float* x, const Weight& W, int T) {
    if (T <= 0) return;
    const int rows = (int)W.rows, cols = (int)W.cols;
    switch (W.dtype) {
        case DType::F32: {
            GemmArgs g = linear_fwd_args(y, x, T, cols, rows);
            gemm(&g, (const float*)W.data);
            return;
        }
        case DType::F16:
        case DType::BF16: {
            GemmArgs g = linear_fwd_args(y, x, T, cols, rows);
            dim3 grid(cdiv(rows, WMMA_BN), cdiv(T, WMMA_BM));
            if (W.dtype == DType::BF16)
                LAUNCH(grid, WMMA_THREADS, 0, gemm_wmma_bf16_kernel, g, (const __nv_bfloat16*)W.data);
            else
                LAUNCH(grid, WMMA_THREADS, 0, gemm_wmma_f16_kernel, g, (const __half*)W.data);
            return;
        }
        case DType::Q8_0:
        case DType::Q4_0:
        case DType::Q4_1: {
            BEAGLE_CHECK(cols % 32 == 0, "matmul: quantized weight '%s' has %d columns, not a multiple of 32",
                         W.host ? W.host->name.c_str() : "?", cols);
            const int nb = cols / 32;
            // int8 activations: T x cols bytes, then T x nb scales d and T x nb sums s (4-byte aligned)
            size_t qbytes = ((size_t)T * cols + 15) / 16 * 16;
            uint8_t* base = (uint8_t*)scratch(S_QACT, qbytes + 2 * (size_t)T * nb * sizeof(float));
            int8_t* xq = (int8_t*)base;
            float* xd = (float*)(base + qbytes);
            float* xs = xd + (size_t)T * nb;
            LAUNCH(cdiv(T * nb, 256), 256, 0, quantize_q8_kernel, x, xq, xd, xs, T, cols);
            QGemmArgs a;
            a.w = (const uint8_t*)W.data;
            a.row_bytes = (long long)dtype_row_bytes(W.dtype, (uint64_t)cols);
            a.rows = rows;
            a.cols = cols;
            a.xq = xq;
            a.xd = xd;
            a.xs = xs;
            a.y = y;
            a.T = T;
            dim3 grid(cdiv(rows, QGEMM_WARPS), cdiv(T, QGEMM_TOKENS));
            if (W.dtype == DType::Q8_0) LAUNCH(grid, 32 * QGEMM_WARPS, 0, gemm_q8_0_kernel, a);
            if (W.dtype == DType::Q4_0) LAUNCH(grid, 32 * QGEMM_WARPS, 0, gemm_q4_0_kernel, a);
            if (W.dtype == DType::Q4_1) LAUNCH(grid, 32 * QGEMM_WARPS, 0, gemm_q4_1_kernel, a);
            return;
        }
        default:
            fail("matmul: weight '%s' has dtype %s, which the CUDA backend does not support",
                 W.host ? W.host->name.c_str() : "?", dtype_name(W.dtype));
    }
}

// ---- row ops -----------------------------------------------------------------------------------
void CudaOps::embed(float* x, const Weight& E, const int* tokens, int T) {
    if (T <= 0) return;
    for (int t = 0; t < T; t++)
        BEAGLE_CHECK(tokens[t] >= 0 && tokens[t] < E.rows, "token id %d out of range [0, %lld)", tokens[t],
                     (long long)E.rows);
    BEAGLE_CHECK(E.dtype != DType::I32, "embedding table '%s' has dtype I32", E.host ? E.host->name.c_str() : "?");
    const int* d_tok = (const int*)stage(S_TOKENS, tokens, (size_t)T * sizeof(int));
    long long rb = (long long)dtype_row_bytes(E.dtype, (uint64_t)E.cols);
    LAUNCH(T, 256, 0, embed_kernel, x, (const uint8_t*)E.data, (int)E.dtype, rb, d_tok, (int)E.cols);
}

void CudaOps::rmsnorm(float* y, const float* x, const Weight& w, int T, int dim, float eps) {
    BEAGLE_CHECK(w.dtype == DType::F32, "rmsnorm weight must be F32, got %s", dtype_name(w.dtype));
    if (T <= 0) return;
    LAUNCH(T, norm_block(dim), 0, rmsnorm_fwd_kernel, y, (float*)nullptr, x, (const float*)w.data, dim, eps);
}

// The inverse frequencies of the CPU backend (same float values), on the device; cached per RopeParams.
const float* CudaOps::rope_freq(const RopeParams& rp) {
    BEAGLE_CHECK(rp.head_dim > 0 && rp.head_dim % 2 == 0, "rope: head_dim %d must be even and positive", rp.head_dim);
    const size_t bytes = (size_t)(rp.head_dim / 2) * sizeof(float);
    bool same = rope_valid_ && rp.head_dim == rope_rp_.head_dim && rp.theta == rope_rp_.theta &&
                rp.llama3_scaling == rope_rp_.llama3_scaling && rp.factor == rope_rp_.factor &&
                rp.low_freq_factor == rope_rp_.low_freq_factor && rp.high_freq_factor == rope_rp_.high_freq_factor &&
                rp.orig_max_pos == rope_rp_.orig_max_pos;
    if (!same) {
        std::vector<float> f(rp.head_dim / 2);
        CpuOps::rope_freqs(rp, f.data());
        stage(S_FREQ, f.data(), bytes);
        rope_rp_ = rp;
        rope_valid_ = true;
    }
    return (const float*)slot_ptr_[S_FREQ];
}

void CudaOps::rope(float* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    if (T <= 0 || n_heads <= 0) return;
    const float* freq = rope_freq(rp);
    const int* d_pos = (const int*)stage(S_POS, pos, (size_t)T * sizeof(int));
    long long n = (long long)T * n_heads * (rp.head_dim / 2);
    LAUNCH((int)((n + 255) / 256), 256, 0, rope_kernel, x, d_pos, freq, T, n_heads, rp.head_dim, inverse ? 1 : 0);
}

static int elementwise_grid(size_t n) { return (int)std::min<size_t>((n + 255) / 256, 4096); }

void CudaOps::swiglu(float* out, const float* gate, const float* up, size_t n) {
    if (n) LAUNCH(elementwise_grid(n), 256, 0, swiglu_fwd_kernel, out, gate, up, (long long)n);
}

void CudaOps::add(float* y, const float* x, size_t n) {
    if (n) LAUNCH(elementwise_grid(n), 256, 0, add_kernel, y, x, (long long)n);
}

void CudaOps::move_rows(float* buf, const int* src, const int* dst, int n, int width) {
    if (n <= 0 || width <= 0) return;
    const int* d_src = (const int*)stage(S_IDX, src, (size_t)n * sizeof(int));
    const int* d_dst = (const int*)stage(S_IDX2, dst, (size_t)n * sizeof(int));
    LAUNCH(cdiv(width, 256), 256, 0, move_rows_kernel, buf, d_src, d_dst, n, width);
}

// ---- attention -----------------------------------------------------------------------------------
void CudaOps::attention(float* out, const float* q, const float* kcache, const float* vcache, int T, int n_heads,
                        int n_kv_heads, int head_dim, const AttnMask& mask) {
    if (T <= 0) return;
    BEAGLE_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "attention: n_heads %d not a multiple of n_kv_heads %d",
                 n_heads, n_kv_heads);
    BEAGLE_CHECK(head_dim > 0 && head_dim <= ATTN_MAX_HD, "attention: head_dim %d outside 1..%d (CUDA backend)", head_dim,
                 ATTN_MAX_HD);
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
    a.tree = nullptr;
    a.mask_words = mask.mask_words;
    a.kv_start = nullptr;
    a.kv_len = nullptr;
    if (mask.kv_start) {
        a.kv_start = (const int*)stage(S_START, mask.kv_start, (size_t)T * sizeof(int));
        a.kv_len = (const int*)stage(S_LEN, mask.kv_len, (size_t)T * sizeof(int));
    } else if (mask.tree_mask) {
        BEAGLE_CHECK(mask.mask_words * 64 >= T, "attention: tree mask of %d words cannot cover %d tokens",
                     mask.mask_words, T);
        a.tree = (const uint64_t*)stage(S_MASK, mask.tree_mask, (size_t)T * mask.mask_words * sizeof(uint64_t));
    }
    const int group = n_heads / n_kv_heads, warps = std::min(group, 4);
    const size_t smem = (size_t)attn_smem_floats(head_dim, warps) * sizeof(float);
    LAUNCH(dim3(T, n_kv_heads), 32 * warps, smem, attn_fwd_kernel, a);
}

// ---- drafting helper ----------------------------------------------------------------------------
void CudaOps::topk(const float* x, int rows, int n_cols, int k, int* idx, float* val) {
    if (rows <= 0 || k <= 0) return;
    int* d_idx = (int*)scratch(S_TOPK_I, (size_t)rows * k * sizeof(int));
    float* d_val = (float*)scratch(S_TOPK_V, (size_t)rows * k * sizeof(float));
    LAUNCH(rows, 256, 0, topk_kernel, x, n_cols, k, d_idx, d_val);
    cuda_check(cudaMemcpy(idx, d_idx, (size_t)rows * k * sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy (topk)");
    cuda_check(cudaMemcpy(val, d_val, (size_t)rows * k * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (topk)");
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
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    if (prop.major < 8)
        fail("CUDA device '%s' has compute capability %d.%d; this build needs 8.0 or newer (sm_80/86/89/90)", prop.name,
             prop.major, prop.minor);
    return std::unique_ptr<Ops>(new CudaOps());
}

}  // namespace beagle
