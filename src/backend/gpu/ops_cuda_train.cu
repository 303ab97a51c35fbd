// ops_cuda_train.cu: the training ops of the CUDA backend (the "training ops" section of
// src/backend/ops.h, called by src/train/ and the draft's inference in src/model/draft.cpp):
// dense products and their transposes (cuda/gemm.cu), RMSNorm backward, the draft's cross-attention
// forward/backward with the parametric mask (cuda/xattn.cu), SwiGLU backward, chunked cross-entropy,
// SmoothL1, the global gradient norm and AdamW. Same conventions as the CPU backend: parameter
// gradients accumulate, activation gradients are assigned unless the op says "accumulate".
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../../core/common.h"
#include "cuda_ops.h"
#include "kernels.cuh"

namespace beagle {

#define LAUNCH(grid, block, smem, kernel, ...)                      \
    do {                                                            \
        const double t0_ = profile_ ? now_seconds() : 0.0;          \
        KLAUNCH((grid), (block), (smem), 0, kernel)(__VA_ARGS__);  \
        check_launch(#kernel, t0_);                                 \
    } while (0)

static int elementwise_grid(size_t n) { return (int)std::min<size_t>((n + 255) / 256, 4096); }

void CudaOps::zero(float* p, size_t n) {
    if (!n) return;
    cudaError_t e = cudaMemset(p, 0, n * sizeof(float));
    if (e != cudaSuccess) fail("CUDA cudaMemset failed: %s", cudaGetErrorString(e));
}

void CudaOps::gather_rows(float* dst, const float* src, const int* idx, int n, int width) {
    if (n <= 0 || width <= 0) return;
    const int* d_idx = (const int*)stage(S_IDX, idx, (size_t)n * sizeof(int));
    LAUNCH(dim3(n, cdiv(width, 256)), 256, 0, rows_gather_kernel, dst, src, d_idx, n, width);
}

void CudaOps::scatter_rows(float* dst, const float* src, const int* idx, int n, int width, bool accumulate) {
    if (n <= 0 || width <= 0) return;
    const int* d_idx = (const int*)stage(S_IDX, idx, (size_t)n * sizeof(int));
    LAUNCH(cdiv(width, 256), 256, 0, rows_scatter_kernel, dst, src, d_idx, n, width, accumulate ? 1 : 0);
}

// ---- dense products: y = x W^T and its two backward products, one strided GEMM kernel ------------
void CudaOps::matmul_f32(float* y, const float* x, const float* W, int T, int n_in, int n_out) {
    GemmArgs g;
    g.M = T; g.N = n_out; g.K = n_in;
    g.A = x; g.a_m = n_in; g.a_k = 1;   // x: T x n_in
    g.b_k = 1; g.b_n = n_in;            // B[k, n] = W[n, k]
    g.C = y; g.c_m = n_out;
    g.accumulate = 0;
    gemm(&g, W);
}

void CudaOps::matmul_f32_bwd_x(float* dx, const float* dy, const float* W, int T, int n_in, int n_out, bool accumulate) {
    GemmArgs g;
    g.M = T; g.N = n_in; g.K = n_out;
    g.A = dy; g.a_m = n_out; g.a_k = 1;  // dy: T x n_out
    g.b_k = n_in; g.b_n = 1;             // B[k, n] = W[k, n]
    g.C = dx; g.c_m = n_in;
    g.accumulate = accumulate ? 1 : 0;
    gemm(&g, W);
}

void CudaOps::matmul_f32_bwd_w(float* dW, const float* dy, const float* x, int T, int n_in, int n_out) {
    GemmArgs g;
    g.M = n_out; g.N = n_in; g.K = T;
    g.A = dy; g.a_m = 1; g.a_k = n_out;  // A[o, t] = dy[t, o]
    g.b_k = n_in; g.b_n = 1;             // B[t, i] = x[t, i]
    g.C = dW; g.c_m = n_in;
    g.accumulate = 1;
    gemm(&g, x);
}

// ---- RMSNorm ---------------------------------------------------------------------------------------
void CudaOps::rmsnorm_f32(float* y, float* rstd, const float* x, const float* w, int T, int dim, float eps) {
    if (T > 0) LAUNCH(T, norm_block(dim), 0, rmsnorm_fwd_kernel, y, rstd, x, w, dim, eps);
}

void CudaOps::rmsnorm_f32_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                          int T, int dim) {
    if (T <= 0) return;
    if (dx) LAUNCH(T, norm_block(dim), 0, rmsnorm_bwd_dx_kernel, dx, dy, x, w, rstd, dim);
    if (dw) LAUNCH(cdiv(dim, 256), 256, 0, rmsnorm_bwd_dw_kernel, dw, dy, x, rstd, T, dim);
}

// ---- cross-attention ---------------------------------------------------------------------------------
static XAttnArgs xattn_args(const float* q, const int* d_qrow, int n_q, const XAttnKeys& K, int n_heads,
                            int n_kv_heads, int head_dim, const XAttnMask& mask, const uint64_t* d_bits) {
    XAttnArgs a;
    memset(&a, 0, sizeof a);
    a.q = q;
    a.qrow = d_qrow;
    a.n_q = n_q;
    a.k0 = K.k0;
    a.v0 = K.v0;
    a.n0 = K.n0;
    a.k1 = K.k1;
    a.v1 = K.v1;
    a.n1 = K.k1 ? K.n1 : 0;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.scale = 1.0f / sqrtf((float)head_dim);
    a.kind = mask.kind == XAttnMask::BLOCK ? 1 : 0;
    a.set1_bits = d_bits;
    a.set1_words = mask.set1_words;
    a.w = mask.w;
    a.offset = mask.offset;
    a.n_pred = mask.n_pred;
    return a;
}

// Checks and device copies of the mask's host arrays; returns the args without outputs.
static void xattn_check(int n_heads, int n_kv_heads, int head_dim, const XAttnMask& mask, const int* qrow) {
    BEAGLE_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "xattn: n_heads %d not a multiple of n_kv_heads %d",
                 n_heads, n_kv_heads);
    BEAGLE_CHECK(head_dim > 0 && head_dim <= ATTN_MAX_HD, "xattn: head_dim %d outside 1..%d (CUDA backend)", head_dim,
                 ATTN_MAX_HD);
    BEAGLE_CHECK(n_heads / n_kv_heads <= 64, "xattn: GQA group of %d heads is larger than 64", n_heads / n_kv_heads);
    if (mask.kind == XAttnMask::BLOCK) {
        BEAGLE_CHECK(qrow != nullptr, "xattn: a BLOCK mask needs the query rows (qrow)");
        BEAGLE_CHECK(mask.w >= 1 && mask.offset >= 0, "xattn: BLOCK mask needs w >= 1 and offset >= 0 (w %d, offset %d)",
                     mask.w, mask.offset);
    }
}

void CudaOps::xattn(float* out, float* lse, const float* q, const int* qrow, int n_q, const XAttnKeys& keys,
                        int n_heads, int n_kv_heads, int head_dim, const XAttnMask& mask) {
    if (n_q <= 0) return;
    xattn_check(n_heads, n_kv_heads, head_dim, mask, qrow);
    const int* d_qrow = qrow ? (const int*)stage(S_QROW, qrow, (size_t)n_q * sizeof(int)) : nullptr;
    const uint64_t* d_bits = nullptr;
    if (mask.kind == XAttnMask::PREFIX && mask.set1_bits && keys.n1 > 0)
        d_bits = (const uint64_t*)stage(S_BITS, mask.set1_bits, (size_t)n_q * mask.set1_words * sizeof(uint64_t));
    XAttnArgs a = xattn_args(q, d_qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask, d_bits);
    a.out = out;
    a.lse = lse;
    const int group = n_heads / n_kv_heads, warps = std::min(group, 4);
    const size_t smem = (size_t)attn_smem_floats(head_dim, warps) * sizeof(float);
    LAUNCH(dim3(n_q, n_kv_heads), 32 * warps, smem, xattn_fwd_kernel, a);
}

void CudaOps::xattn_bwd(float* dq, const XAttnGrads& G, const float* dout, const float* out, const float* lse,
                        const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads, int n_kv_heads,
                        int head_dim, const XAttnMask& mask) {
    if (n_q <= 0) return;
    xattn_check(n_heads, n_kv_heads, head_dim, mask, qrow);
    const int* d_qrow = qrow ? (const int*)stage(S_QROW, qrow, (size_t)n_q * sizeof(int)) : nullptr;
    const uint64_t* d_bits = nullptr;
    if (mask.kind == XAttnMask::PREFIX && mask.set1_bits && keys.n1 > 0)
        d_bits = (const uint64_t*)stage(S_BITS, mask.set1_bits, (size_t)n_q * mask.set1_words * sizeof(uint64_t));
    XAttnArgs a = xattn_args(q, d_qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask, d_bits);
    a.lse = (float*)lse;
    a.dout = dout;
    a.o = out;
    a.dq = dq;
    a.D = (float*)scratch(S_D, (size_t)n_q * n_heads * sizeof(float));
    a.dk0 = G.dk0;
    a.dv0 = G.dv0;
    a.dk1 = G.dk1;
    a.dv1 = G.dv1;
    const int group = n_heads / n_kv_heads, warps = std::min(group, 4);
    const size_t smem = (size_t)attn_smem_floats(head_dim, warps) * sizeof(float);
    LAUNCH(dim3(n_q, n_kv_heads), 32 * warps, smem, xattn_bwd_dq_kernel, a);
    const bool set0 = G.dk0 && G.dv0 && keys.n0 > 0;
    const bool set1 = G.dk1 && G.dv1 && a.n1 > 0;
    a.tiles0 = set0 ? cdiv(keys.n0, XATTN_BKEYS) : 0;
    const int tiles = a.tiles0 + (set1 ? cdiv(a.n1, XATTN_BKEYS) : 0);
    const size_t smem2 = (size_t)xattn_dkdv_smem_floats(head_dim, group) * sizeof(float);
    BEAGLE_CHECK(smem2 <= 48 * 1024, "xattn_bwd: head_dim %d with a GQA group of %d needs %zu bytes of shared memory",
                 head_dim, group, smem2);
    if (tiles > 0) LAUNCH(dim3(tiles, n_kv_heads), XATTN_BKEYS, smem2, xattn_bwd_dkdv_kernel, a);
}

// ---- element-wise and losses ----------------------------------------------------------------------
void CudaOps::swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) {
    if (n) LAUNCH(elementwise_grid(n), 256, 0, swiglu_bwd_kernel, dgate, dup, dout, gate, up, (long long)n);
}

void CudaOps::lse_update(float* m, float* s, const float* z, int n, int C) {
    if (n > 0) LAUNCH(n, 256, 0, lse_update_kernel, m, s, z, C);
}

void CudaOps::ce_soft_chunk(float* dz, float* loss, const float* zt, const float* zd, const float* m_t,
                            const float* s_t, const float* m_d, const float* s_d, int n, int C, float scale) {
    if (n > 0) LAUNCH(n, 256, 0, ce_soft_kernel, dz, loss, zt, zd, m_t, s_t, m_d, s_d, C, scale);
}

void CudaOps::ce_hard_chunk(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d,
                            const int* labels, int v0, int n, int C, float scale) {
    if (n <= 0) return;
    const int* d_labels = (const int*)stage(S_LABELS, labels, (size_t)n * sizeof(int));
    LAUNCH(n, 256, 0, ce_hard_kernel, dz, loss, zd, m_d, s_d, d_labels, v0, C, scale);
}

void CudaOps::smoothl1(float* dx, float* loss, const float* x, const float* target, int n, int dim, float beta,
                       float scale) {
    if (n > 0) LAUNCH(n, 256, 0, smoothl1_kernel, dx, loss, x, target, dim, beta, scale);
}

double CudaOps::sumsq(const float* x, size_t n) {
    if (!n) return 0.0;
    const size_t nb = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double* part = (double*)scratch(S_PART, nb * sizeof(double));
    LAUNCH((int)nb, 256, 0, sumsq_kernel, x, (long long)n, part);
    std::vector<double> h(nb);
    cudaError_t e = cudaMemcpy(h.data(), part, nb * sizeof(double), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) fail("CUDA cudaMemcpy (sumsq) failed: %s", cudaGetErrorString(e));
    double s = 0;
    for (double p : h) s += p;  // chunk order: fixed
    return s;
}

void CudaOps::adamw(float* w, float* m, float* v, const float* g, size_t n, const AdamWParams& p) {
    if (!n) return;
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
    LAUNCH(elementwise_grid(n), 256, 0, adamw_kernel, a);
}

}  // namespace beagle
