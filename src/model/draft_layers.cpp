// draft_layers.cpp: the draft's forward/backward per layer (see draft_layers.h), instantiated for
// Ops (float) and CpuOps64 (double). Called by the trainer (trainer.cpp), the inference Draft
// (src/model/draft.cpp) and the gradient check.
#include "draft_layers.h"

#include <cstring>
#include <type_traits>

#include "../core/common.h"

namespace beagle {

// ---- DraftModelT -----------------------------------------------------------------------------------
template <class O>
DraftModelT<O>::DraftModelT(O& ops_, const DraftWeights& dw, const DraftFrozen& fz) : ops(ops_), cfg(dw.cfg) {
    cfg.validate("draft weights");
    BEAGLE_CHECK(fz.vocab == cfg.vocab_size && fz.dim == cfg.dim,
                 "frozen target tensors are %d x %d, the draft expects vocab %d x dim %d", fz.vocab, fz.dim,
                 cfg.vocab_size, cfg.dim);
    BEAGLE_CHECK((fz.embd.empty() || fz.embd.size() == (size_t)cfg.vocab_size * cfg.dim) &&
                     fz.out_norm.size() == (size_t)cfg.dim && (fz.lm_head.empty() || fz.lm_head.size() == fz.embd.size()),
                 "frozen target tensors have wrong sizes");
    for (int i = 0; i < DT_COUNT; i++)
        if (cfg.has(i)) w[i] = ops.alloc((size_t)cfg.numel(i));  // tensors of another architecture stay null
    set_weights(dw);
    size_t ve = (size_t)cfg.vocab_size * cfg.dim;
    out_norm = ops.alloc(cfg.dim);
    upload_f(ops, out_norm, fz.out_norm.data(), cfg.dim);
    tied = fz.lm_head.empty();
    if (cfg.draft_vocab > 0) {
        check_d2t(cfg, dw.d2t, "draft weights");
        d2t = dw.d2t;
    }
    if (fz.embd.empty()) return;  // no f32 tables: inference with the target's weights only
    embd = ops.alloc(ve);
    upload_f(ops, embd, fz.embd.data(), ve);
    const std::vector<float>& head = tied ? fz.embd : fz.lm_head;
    if (cfg.draft_vocab > 0) {  // reduced vocabulary: the frozen head's rows for d2t only
        std::vector<float> rows((size_t)cfg.draft_vocab * cfg.dim);
        for (int i = 0; i < cfg.draft_vocab; i++)
            std::copy(head.begin() + (size_t)d2t[i] * cfg.dim, head.begin() + (size_t)(d2t[i] + 1) * cfg.dim,
                      rows.begin() + (size_t)i * cfg.dim);
        lm_head = ops.alloc(rows.size());
        upload_f(ops, lm_head, rows.data(), rows.size());
        own_head = true;
    } else if (tied) {
        lm_head = embd;
    } else {
        lm_head = ops.alloc(ve);
        upload_f(ops, lm_head, fz.lm_head.data(), ve);
        own_head = true;
    }
}

template <class O>
DraftModelT<O>::~DraftModelT() {
    for (int i = 0; i < DT_COUNT; i++) {
        if (w[i]) ops.release(w[i]);
        if (g[i]) ops.release(g[i]);
    }
    if (lm_head && own_head) ops.release(lm_head);
    if (embd) ops.release(embd);
    ops.release(out_norm);
}

template <class O>
void DraftModelT<O>::set_weights(const DraftWeights& dw) {
    BEAGLE_CHECK(dw.cfg.arch == cfg.arch, "draft weights of a %s draft given to a %s draft", draft_arch_name(dw.cfg.arch),
                 draft_arch_name(cfg.arch));
    for (int i = 0; i < DT_COUNT; i++) {
        BEAGLE_CHECK(dw.t[i].size() == (size_t)cfg.numel(i), "draft tensor %s has %zu values, expected %lld",
                     draft_tensor_name(i), dw.t[i].size(), (long long)cfg.numel(i));
        if (cfg.has(i)) upload_f(ops, w[i], dw.t[i].data(), dw.t[i].size());
    }
}

template <class O>
void DraftModelT<O>::get_weights(DraftWeights* dw) const {
    dw->cfg = cfg;
    dw->d2t = d2t;
    for (int i = 0; i < DT_COUNT; i++) {
        dw->t[i].resize((size_t)cfg.numel(i));
        if (cfg.has(i)) download_f(ops, dw->t[i].data(), w[i], dw->t[i].size());
    }
}

template <class O>
void DraftModelT<O>::enable_grads() {
    for (int i = 0; i < DT_COUNT; i++)
        if (!g[i] && cfg.has(i)) g[i] = ops.alloc((size_t)cfg.numel(i));
}

template <class O>
void DraftModelT<O>::zero_grads() {
    for (int i = 0; i < DT_COUNT; i++)
        if (g[i]) ops.zero(g[i], (size_t)cfg.numel(i));
}

template <class O>
void upload_f(O& ops, RealOf<O>* dst, const float* src, size_t n) {
    if constexpr (std::is_same<RealOf<O>, float>::value) ops.upload(dst, src, n);
    else {
        std::vector<RealOf<O>> tmp(src, src + n);
        ops.upload(dst, tmp.data(), n);
    }
}

template <class O>
void download_f(O& ops, float* dst, const RealOf<O>* src, size_t n) {
    if constexpr (std::is_same<RealOf<O>, float>::value) ops.download(dst, src, n);
    else {
        std::vector<RealOf<O>> tmp(n);
        ops.download(tmp.data(), src, n);
        for (size_t i = 0; i < n; i++) dst[i] = (float)tmp[i];
    }
}

template <class O>
void draft_matmul(DraftModelT<O>& m, int t, RealOf<O>* y, const RealOf<O>* x, int n, int n_in, int n_out) {
    if constexpr (std::is_same<O, Ops>::value)
        if (m.fast_w[t].data) {
            m.ops.matmul(y, x, m.fast_w[t], n);
            return;
        }
    m.ops.matmul_f32(y, x, m.w[t], n, n_in, n_out);
}

template <class O>
void draft_embed(DraftModelT<O>& m, RealOf<O>* u, const int* tokens, int n) {
    for (int i = 0; i < n; i++)
        BEAGLE_CHECK(tokens[i] >= 0 && tokens[i] < m.cfg.vocab_size, "draft query token %d out of range [0, %d)",
                     tokens[i], m.cfg.vocab_size);
    if constexpr (std::is_same<O, Ops>::value)
        if (m.embd_w.data) {
            m.ops.embed(u, m.embd_w, tokens, n);
            return;
        }
    BEAGLE_CHECK(m.embd, "draft: no embedding table (frozen tables not loaded, no target weights given)");
    m.ops.gather_rows(u, m.embd, tokens, n, m.cfg.dim);
}

// ---- state layers -----------------------------------------------------------------------------------
template <class O>
void fuse_forward(DraftModelT<O>& m, const RealOf<O>* f, const RealOf<O>* h, RealOf<O>* s, int n) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    draft_matmul(m, DT_MIX, s, h, n, c.n_extra() * c.dim, c.dim);
    m.ops.add(s, f, (size_t)n * c.dim);
}

template <class O>
void fuse_backward(DraftModelT<O>& m, const RealOf<O>* ds, const RealOf<O>* h, int n) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    m.ops.matmul_f32_bwd_w(m.g[DT_MIX], ds, h, n, c.n_extra() * c.dim, c.dim);
}

// ---- key side ---------------------------------------------------------------------------------------
template <class O>
void key_forward(DraftModelT<O>& m, const RealOf<O>* s, RealOf<O>* ns, RealOf<O>* rstd, RealOf<O>* K, RealOf<O>* V,
                 int n, const int* pos, float eps) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    ops.rmsnorm_f32(ns, rstd, s, m.w[DT_NORM_KV], n, c.dim, eps > 0 ? eps : c.norm_eps);
    draft_matmul(m, DT_WK, K, ns, n, c.dim, c.kv_dim());
    ops.rope(K, pos, n, c.n_kv_heads, c.rope(), false);
    draft_matmul(m, DT_WV, V, ns, n, c.dim, c.kv_dim());
}

template <class O>
void key_backward(DraftModelT<O>& m, BufAlloc<O>& al, const RealOf<O>* s, const RealOf<O>* ns, const RealOf<O>* rstd,
                  RealOf<O>* dK, const RealOf<O>* dV, int n, const int* pos, RealOf<O>* ds) {
    using R = RealOf<O>;
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    ops.rope(dK, pos, n, c.n_kv_heads, c.rope(), true);
    ops.matmul_f32_bwd_w(m.g[DT_WK], dK, ns, n, c.dim, c.kv_dim());
    ops.matmul_f32_bwd_w(m.g[DT_WV], dV, ns, n, c.dim, c.kv_dim());
    R* dns = al.alloc((size_t)n * c.dim);
    ops.matmul_f32_bwd_x(dns, dK, m.w[DT_WK], n, c.dim, c.kv_dim(), false);
    ops.matmul_f32_bwd_x(dns, dV, m.w[DT_WV], n, c.dim, c.kv_dim(), true);
    ops.rmsnorm_f32_bwd(ds, m.g[DT_NORM_KV], dns, s, m.w[DT_NORM_KV], rstd, n, c.dim);
    al.release(dns);
}

template <class O>
void qkv_backward(DraftModelT<O>& m, int tq, int tk, int tv, const RealOf<O>* dq, const RealOf<O>* dK,
                  const RealOf<O>* dV, const RealOf<O>* xn, int n, RealOf<O>* dxn) {
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    ops.matmul_f32_bwd_w(m.g[tq], dq, xn, n, c.dim, c.q_dim());
    ops.matmul_f32_bwd_w(m.g[tk], dK, xn, n, c.dim, c.kv_dim());
    ops.matmul_f32_bwd_w(m.g[tv], dV, xn, n, c.dim, c.kv_dim());
    ops.matmul_f32_bwd_x(dxn, dq, m.w[tq], n, c.dim, c.q_dim(), false);
    ops.matmul_f32_bwd_x(dxn, dK, m.w[tk], n, c.dim, c.kv_dim(), true);
    ops.matmul_f32_bwd_x(dxn, dV, m.w[tv], n, c.dim, c.kv_dim(), true);
}

// ---- query side -------------------------------------------------------------------------------------
size_t query_acts_floats_per_row(const DraftConfig& c) {
    return (size_t)5 * c.dim + 2 * c.q_dim() + 3 * c.ffn_dim + c.n_heads + 2;
}

template <class O>
void query_acts_alloc(BufAlloc<O>& al, const DraftConfig& c, QueryActs<RealOf<O>>* A, int n) {
    size_t N = (size_t)n;
    A->n = n;
    A->u = al.alloc(N * c.dim);
    A->nq = al.alloc(N * c.dim);
    A->rstd_q = al.alloc(N);
    A->q = al.alloc(N * c.q_dim());
    A->att = al.alloc(N * c.q_dim());
    A->lse = al.alloc(N * c.n_heads);
    A->a = al.alloc(N * c.dim);
    A->nm = al.alloc(N * c.dim);
    A->rstd_m = al.alloc(N);
    A->gate = al.alloc(N * c.ffn_dim);
    A->up = al.alloc(N * c.ffn_dim);
    A->h = al.alloc(N * c.ffn_dim);
    A->fh = al.alloc(N * c.dim);
}

template <class O>
void query_acts_free(BufAlloc<O>& al, QueryActs<RealOf<O>>* A) {
    for (auto* p : {&A->u, &A->nq, &A->rstd_q, &A->q, &A->att, &A->lse, &A->a, &A->nm, &A->rstd_m, &A->gate, &A->up,
                    &A->h, &A->fh})
        al.release(*p);
    A->n = 0;
}

template <class O>
void query_forward(DraftModelT<O>& m, QueryActs<RealOf<O>>& A, int n, const int* tokens, const int* pos,
                   const int* qrow, const XAttnKeysT<RealOf<O>>& keys, const XAttnMask& mask) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    BEAGLE_CHECK(n <= A.n, "query_forward: %d queries but activations for %d", n, A.n);
    if (tokens) draft_embed(m, A.u, tokens, n);                                   // u = E(t) (null: A.u holds it)
    ops.rmsnorm_f32(A.nq, A.rstd_q, A.u, m.w[DT_NORM_Q], n, c.dim, c.norm_eps);   // RMSNorm_q(u)
    draft_matmul(m, DT_WQ, A.q, A.nq, n, c.dim, c.q_dim());                       // Wq .
    ops.rope(A.q, pos, n, c.n_heads, c.rope(), false);                            // RoPE_i
    ops.xattn(A.att, A.lse, A.q, qrow, n, keys, c.n_heads, c.n_kv_heads, c.head_dim, mask);
    block_out_forward(m, A, n);                                                   // a = u + Wo Attn; f^ = a + MLP
}

template <class O>
void block_out_forward(DraftModelT<O>& m, QueryActs<RealOf<O>>& A, int n) {
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    size_t nd = (size_t)n * c.dim;
    draft_matmul(m, DT_WO, A.a, A.att, n, c.q_dim(), c.dim);                      // Wo Attn
    ops.add(A.a, A.u, nd);                                                        // a = u + Wo Attn
    ops.rmsnorm_f32(A.nm, A.rstd_m, A.a, m.w[DT_NORM_M], n, c.dim, c.norm_eps);   // RMSNorm_m(a)
    draft_matmul(m, DT_W_GATE, A.gate, A.nm, n, c.dim, c.ffn_dim);
    draft_matmul(m, DT_W_UP, A.up, A.nm, n, c.dim, c.ffn_dim);
    ops.swiglu(A.h, A.gate, A.up, (size_t)n * c.ffn_dim);
    draft_matmul(m, DT_W_DOWN, A.fh, A.h, n, c.ffn_dim, c.dim);
    ops.add(A.fh, A.a, nd);                                                       // f^ = a + SwiGLU(...)
}

size_t query_backward_floats_per_row(const DraftConfig& c) {
    return (size_t)3 * c.ffn_dim + 2 * c.dim + 2 * c.q_dim();
}

template <class O>
void query_backward(DraftModelT<O>& m, BufAlloc<O>& al, QueryActs<RealOf<O>>& A, RealOf<O>* dfh, const int* pos,
                    const int* qrow, const XAttnKeysT<RealOf<O>>& keys, const XAttnGradsT<RealOf<O>>& dkeys,
                    const XAttnMask& mask, bool grad_u) {
    using R = RealOf<O>;
    int n = A.n;
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    size_t N = (size_t)n;
    R* datt = al.alloc(N * c.q_dim());
    R* dq = al.alloc(N * c.q_dim());
    R* dnq = al.alloc(N * c.dim);
    block_out_backward(m, al, A, dfh, datt);  // dfh is now d loss / d a = the residual's part of d loss / d u
    ops.xattn_bwd(dq, dkeys, datt, A.att, A.lse, A.q, qrow, n, keys, c.n_heads, c.n_kv_heads, c.head_dim, mask);
    // q = RoPE(Wq RMSNorm_q(u))
    ops.rope(dq, pos, n, c.n_heads, c.rope(), true);
    ops.matmul_f32_bwd_w(m.g[DT_WQ], dq, A.nq, n, c.dim, c.q_dim());
    ops.matmul_f32_bwd_x(dnq, dq, m.w[DT_WQ], n, c.dim, c.q_dim(), false);
    ops.rmsnorm_f32_bwd(grad_u ? dfh : nullptr, m.g[DT_NORM_Q], dnq, A.u, m.w[DT_NORM_Q], A.rstd_q, n, c.dim);
    for (R** p : {&datt, &dq, &dnq}) al.release(*p);
}

template <class O>
void block_out_backward(DraftModelT<O>& m, BufAlloc<O>& al, QueryActs<RealOf<O>>& A, RealOf<O>* dfh, RealOf<O>* datt) {
    using R = RealOf<O>;
    const int n = A.n;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    size_t N = (size_t)n;
    R* dh = al.alloc(N * c.ffn_dim);
    R* dgate = al.alloc(N * c.ffn_dim);
    R* dup = al.alloc(N * c.ffn_dim);
    R* dnm = al.alloc(N * c.dim);
    R* da = dfh;  // f^ = a + mlp: da starts as dfh (the residual), dmlp = dfh
    ops.matmul_f32_bwd_w(m.g[DT_W_DOWN], dfh, A.h, n, c.ffn_dim, c.dim);
    ops.matmul_f32_bwd_x(dh, dfh, m.w[DT_W_DOWN], n, c.ffn_dim, c.dim, false);
    ops.swiglu_bwd(dgate, dup, dh, A.gate, A.up, N * c.ffn_dim);
    ops.matmul_f32_bwd_w(m.g[DT_W_GATE], dgate, A.nm, n, c.dim, c.ffn_dim);
    ops.matmul_f32_bwd_w(m.g[DT_W_UP], dup, A.nm, n, c.dim, c.ffn_dim);
    ops.matmul_f32_bwd_x(dnm, dgate, m.w[DT_W_GATE], n, c.dim, c.ffn_dim, false);
    ops.matmul_f32_bwd_x(dnm, dup, m.w[DT_W_UP], n, c.dim, c.ffn_dim, true);
    ops.rmsnorm_f32_bwd(da, m.g[DT_NORM_M], dnm, A.a, m.w[DT_NORM_M], A.rstd_m, n, c.dim);
    // a = u + Wo att
    ops.matmul_f32_bwd_w(m.g[DT_WO], da, A.att, n, c.q_dim(), c.dim);
    ops.matmul_f32_bwd_x(datt, da, m.w[DT_WO], n, c.q_dim(), c.dim, false);
    for (R** p : {&dh, &dgate, &dup, &dnm}) al.release(*p);
}

template <class O>
void head_logits(DraftModelT<O>& m, const RealOf<O>* fh, int n, RealOf<O>* xn, RealOf<O>* rstd, RealOf<O>* logits) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    m.ops.rmsnorm_f32(xn, rstd, fh, m.out_norm, n, c.dim, c.final_eps);
    if constexpr (std::is_same<O, Ops>::value)
        if (m.head_w.data) {
            m.ops.matmul(logits, xn, m.head_w, n);
            return;
        }
    BEAGLE_CHECK(m.lm_head, "draft: no LM head (frozen tables not loaded, no target weights given)");
    m.ops.matmul_f32(logits, xn, m.lm_head, n, c.dim, c.head_rows());
}

// ---- instantiations -----------------------------------------------------------------------------------
#define BEAGLE_DRAFT_LAYERS(O)                                                                                     \
    template struct DraftModelT<O>;                                                                                \
    template void upload_f<O>(O&, RealOf<O>*, const float*, size_t);                                               \
    template void download_f<O>(O&, float*, const RealOf<O>*, size_t);                                             \
    template void fuse_forward<O>(DraftModelT<O>&, const RealOf<O>*, const RealOf<O>*, RealOf<O>*, int);          \
    template void fuse_backward<O>(DraftModelT<O>&, const RealOf<O>*, const RealOf<O>*, int);                      \
    template void key_forward<O>(DraftModelT<O>&, const RealOf<O>*, RealOf<O>*, RealOf<O>*, RealOf<O>*, RealOf<O>*, \
                                 int, const int*, float);                                                          \
    template void key_backward<O>(DraftModelT<O>&, BufAlloc<O>&, const RealOf<O>*, const RealOf<O>*,               \
                                  const RealOf<O>*, RealOf<O>*, const RealOf<O>*, int, const int*, RealOf<O>*);    \
    template void qkv_backward<O>(DraftModelT<O>&, int, int, int, const RealOf<O>*, const RealOf<O>*,             \
                                  const RealOf<O>*, const RealOf<O>*, int, RealOf<O>*);                            \
    template void query_acts_alloc<O>(BufAlloc<O>&, const DraftConfig&, QueryActs<RealOf<O>>*, int);               \
    template void query_acts_free<O>(BufAlloc<O>&, QueryActs<RealOf<O>>*);                                         \
    template void query_forward<O>(DraftModelT<O>&, QueryActs<RealOf<O>>&, int, const int*, const int*, const int*, \
                                   const XAttnKeysT<RealOf<O>>&, const XAttnMask&);                                \
    template void query_backward<O>(DraftModelT<O>&, BufAlloc<O>&, QueryActs<RealOf<O>>&, RealOf<O>*, const int*,  \
                                    const int*, const XAttnKeysT<RealOf<O>>&, const XAttnGradsT<RealOf<O>>&,       \
                                    const XAttnMask&, bool);                                                       \
    template void draft_matmul<O>(DraftModelT<O>&, int, RealOf<O>*, const RealOf<O>*, int, int, int);             \
    template void draft_embed<O>(DraftModelT<O>&, RealOf<O>*, const int*, int);                                   \
    template void block_out_forward<O>(DraftModelT<O>&, QueryActs<RealOf<O>>&, int);                               \
    template void block_out_backward<O>(DraftModelT<O>&, BufAlloc<O>&, QueryActs<RealOf<O>>&, RealOf<O>*,           \
                                        RealOf<O>*);                                                               \
    template void head_logits<O>(DraftModelT<O>&, const RealOf<O>*, int, RealOf<O>*, RealOf<O>*, RealOf<O>*);

BEAGLE_DRAFT_LAYERS(Ops)
BEAGLE_DRAFT_LAYERS(CpuOps64)

}  // namespace beagle
