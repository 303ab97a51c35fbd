// losses.cpp: soft-label (or token-label) cross-entropy over vocabulary chunks plus SmoothL1 state
// regression, forward and backward in one call (see losses.h). Two passes over the vocabulary:
// pass A builds the logsumexp of the draft's (and the target's) logits chunk by chunk; pass B
// takes each chunk again (kept from pass A, or recomputed when n x vocab is too large to keep), adds
// its loss and back-propagates d logits through the frozen LM head.
#include "losses.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "../core/common.h"

namespace beagle {

bool draft_loss_keeps(const DraftConfig& c, int n, const LossOptions& lo) {
    return (size_t)n * c.head_rows() <= lo.keep_max;
}

size_t draft_loss_floats(const DraftConfig& c, int n, const LossOptions& lo) {
    size_t N = (size_t)n, C = (size_t)std::min(lo.vocab_chunk, c.head_rows());
    size_t Z = draft_loss_keeps(c, n, lo) ? (size_t)c.head_rows() : C;  // columns of zd and zt
    size_t per = 2 * N * c.dim + 3 * N + N * Z + N * C;  // xd, dxd, rstd_d, m_d, s_d, zd, dz
    if (!lo.hard_labels) per += N * c.dim + 3 * N + N * Z;  // xt, rstd_t, m_t, s_t, zt
    return per;
}

template <class O>
void draft_loss(DraftModelT<O>& m, BufAlloc<O>& al, const RealOf<O>* fh, const RealOf<O>* f, const int* labels, int n,
                const LossOptions& lo, float scale, RealOf<O>* dfh, RealOf<O>* ce, RealOf<O>* vl,
                std::vector<RealOf<O>>* logits_capture) {
    using R = RealOf<O>;
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    BEAGLE_CHECK(lo.vocab_chunk >= 1, "vocab_chunk must be >= 1, got %d", lo.vocab_chunk);
    BEAGLE_CHECK(!lo.hard_labels || labels, "hard-label loss needs labels");
    bool soft = !lo.hard_labels;
    // With a reduced vocabulary (EAGLE-3 style) both distributions live on its tokens: the target's is
    // renormalized over them (its logsumexp below runs over the head's rows only).
    BEAGLE_CHECK(!lo.hard_labels || c.draft_vocab == 0, "hard-label loss with a reduced draft vocabulary is not supported");
    int V = c.head_rows(), dim = c.dim, C = std::min(lo.vocab_chunk, V);
    size_t N = (size_t)n;
    bool keep = draft_loss_keeps(c, n, lo);
    size_t Z = keep ? (size_t)V : (size_t)C;  // columns of zd and zt: every chunk, or one at a time
    R* xd = al.alloc(N * dim);   // final_norm(f^)
    R* rd = al.alloc(N);
    R* md = al.alloc(N);
    R* sd = al.alloc(N);
    R* zd = al.alloc(N * Z);     // draft logits: chunk v0 at zd + N v0 when kept, else at zd
    R* dz = al.alloc(N * C);
    R* dxd = al.alloc(N * dim);
    R *xt = nullptr, *rt = nullptr, *mt = nullptr, *st = nullptr, *zt = nullptr;
    if (soft) {
        xt = al.alloc(N * dim);  // final_norm(f)
        rt = al.alloc(N);
        mt = al.alloc(N);
        st = al.alloc(N);
        zt = al.alloc(N * Z);    // target logits, laid out as zd
    }
    // where chunk v0 of z's logits lies: its own block when every chunk is kept, else the one chunk's buffer
    auto chunk_at = [&](R* z, int v0) { return keep && z ? z + N * v0 : z; };
    std::vector<R> neg_inf(N, -INFINITY);
    ops.upload(md, neg_inf.data(), N);
    if (soft) ops.upload(mt, neg_inf.data(), N);
    ops.rmsnorm_f32(xd, rd, fh, m.out_norm, n, dim, c.final_eps);
    if (soft) ops.rmsnorm_f32(xt, rt, f, m.out_norm, n, dim, c.final_eps);

    // pass A: logsumexp of both distributions
    for (int v0 = 0; v0 < V; v0 += C) {
        int Cc = std::min(C, V - v0);
        const R* W = m.lm_head + (size_t)v0 * dim;
        R *zdc = chunk_at(zd, v0), *ztc = chunk_at(zt, v0);
        ops.matmul_f32(zdc, xd, W, n, dim, Cc);
        ops.lse_update(md, sd, zdc, n, Cc);
        if (soft) {
            ops.matmul_f32(ztc, xt, W, n, dim, Cc);
            ops.lse_update(mt, st, ztc, n, Cc);
        }
    }
    // pass B: loss and d logits, back through the frozen head
    if (logits_capture) logits_capture->assign(N * V, R(0));
    std::vector<R> host_chunk;
    for (int v0 = 0; v0 < V; v0 += C) {
        int Cc = std::min(C, V - v0);
        const R* W = m.lm_head + (size_t)v0 * dim;
        R *zdc = chunk_at(zd, v0), *ztc = chunk_at(zt, v0);
        if (!keep) ops.matmul_f32(zdc, xd, W, n, dim, Cc);
        if (soft) {
            if (!keep) ops.matmul_f32(ztc, xt, W, n, dim, Cc);
            ops.ce_soft_chunk(dz, ce, ztc, zdc, mt, st, md, sd, n, Cc, scale);
        } else {
            ops.ce_hard_chunk(dz, ce, zdc, md, sd, labels, v0, n, Cc, scale);
        }
        ops.matmul_f32_bwd_x(dxd, dz, W, n, dim, Cc, v0 > 0);
        if (logits_capture) {
            host_chunk.resize(N * Cc);
            ops.download(host_chunk.data(), zdc, N * Cc);
            for (size_t r = 0; r < N; r++)
                for (int k = 0; k < Cc; k++) (*logits_capture)[r * V + v0 + k] = host_chunk[r * Cc + k];
        }
    }
    ops.zero(dfh, N * dim);
    ops.rmsnorm_f32_bwd(dfh, nullptr, dxd, fh, m.out_norm, rd, n, dim);  // final_norm is frozen
    ops.smoothl1(dfh, vl, fh, f, n, dim, lo.sl1_beta, scale * lo.w_v);
    for (R** p : {&xd, &rd, &md, &sd, &zd, &dz, &dxd, &xt, &rt, &mt, &st, &zt}) al.release(*p);
}

template void draft_loss<Ops>(DraftModelT<Ops>&, BufAlloc<Ops>&, const float*, const float*, const int*, int,
                              const LossOptions&, float, float*, float*, float*, std::vector<float>*);
template void draft_loss<CpuOps64>(DraftModelT<CpuOps64>&, BufAlloc<CpuOps64>&, const double*, const double*,
                                   const int*, int, const LossOptions&, float, double*, double*, double*,
                                   std::vector<double>*);

}  // namespace beagle
