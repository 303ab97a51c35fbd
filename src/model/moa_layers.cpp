// moa_layers.cpp: the Mixture of Attentions draft's Layer Self-Attention and token self-attention, forward and
// backward (see moa_layers.h), instantiated for Ops (float; training and the inference Draft) and CpuOps64
// (double; the gradient check). Callers: the trainer (trainer.cpp run_moa) and Draft (draft.cpp).
#include "moa_layers.h"

#include <vector>

#include "../core/common.h"

namespace beagle {

// ---- Layer Self-Attention ---------------------------------------------------------------------------
size_t lsa_floats_per_position(const DraftConfig& c) {
    const size_t G = (size_t)lsa_group(c);
    return G * (3 * (size_t)c.dim + 1 + 2 * (size_t)c.q_dim() + 2 * (size_t)c.kv_dim() + c.n_heads) + 2 * c.dim + 1;
}

template <class O>
void lsa_acts_alloc(BufAlloc<O>& al, const DraftConfig& c, LsaActs<RealOf<O>>* L, int n) {
    const size_t N = (size_t)n, NG = N * lsa_group(c);
    L->n = n;
    L->x = al.alloc(NG * c.dim);
    L->xn = al.alloc(NG * c.dim);
    L->rstd = al.alloc(NG);
    L->q = al.alloc(NG * c.q_dim());
    L->K = al.alloc(NG * c.kv_dim());
    L->V = al.alloc(NG * c.kv_dim());
    L->att = al.alloc(NG * c.q_dim());
    L->lse = al.alloc(NG * c.n_heads);
    L->o = al.alloc(NG * c.dim);
    L->S = al.alloc(N * c.dim);
    L->ns = al.alloc(N * c.dim);
    L->nrstd = al.alloc(N);
}

template <class O>
void lsa_acts_free(BufAlloc<O>& al, LsaActs<RealOf<O>>* L) {
    for (auto* p : {&L->x, &L->xn, &L->rstd, &L->q, &L->K, &L->V, &L->att, &L->lse, &L->o, &L->S, &L->ns, &L->nrstd})
        al.release(*p);
    L->n = 0;
}

// Row r of position i in the grouped layout: i G + r.
static std::vector<int> group_rows(int n, int G, int r) {
    std::vector<int> idx(n);
    for (int i = 0; i < n; i++) idx[i] = i * G + r;
    return idx;
}

template <class O>
void lsa_input(DraftModelT<O>& m, LsaActs<RealOf<O>>& L, const RealOf<O>* f, const RealOf<O>* h, int n) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    const int G = lsa_group(c), E = c.n_extra();
    BEAGLE_CHECK(n <= L.n, "lsa_input: %d positions but LSA activations for %d", n, L.n);
    m.ops.zero(L.x, (size_t)n * G * c.dim);  // the unused rows stay zero
    m.ops.scatter_rows(L.x, f, group_rows(n, G, 0).data(), n, c.dim, false);
    if (E == 0) return;
    std::vector<int> idx((size_t)n * E);  // h row i E + k -> x row i G + 1 + k
    for (int i = 0; i < n; i++)
        for (int k = 0; k < E; k++) idx[(size_t)i * E + k] = i * G + 1 + k;
    m.ops.scatter_rows(L.x, h, idx.data(), n * E, c.dim, false);
}

// The BLOCK mask and query rows that show each row of a group its group's E + 1 rows (see moa_layers.h).
static XAttnMask lsa_mask(int G) {
    XAttnMask mk;
    mk.kind = XAttnMask::BLOCK;
    mk.w = G;
    mk.offset = 0;
    mk.n_pred = G;
    return mk;
}
static std::vector<int> lsa_qrow(int n, int G) {
    std::vector<int> q((size_t)n * G);
    for (int i = 0; i < n; i++)
        for (int r = 0; r < G; r++) q[(size_t)i * G + r] = i * G + G - 1;  // sees rows i G .. i G + G - 2
    return q;
}

template <class O>
void lsa_forward(DraftModelT<O>& m, LsaActs<RealOf<O>>& L, int n, const int* pos, RealOf<O>* K, RealOf<O>* V) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    const int G = lsa_group(c), NG = n * G, E1 = c.n_extra() + 1;
    BEAGLE_CHECK(n <= L.n, "lsa_forward: %d positions but LSA activations for %d", n, L.n);
    ops.rmsnorm_f32(L.xn, L.rstd, L.x, m.w[DT_NORM_LSA], NG, c.dim, c.norm_eps);  // RMSNorm_lsa(x)
    draft_matmul(m, DT_LSA_Q, L.q, L.xn, NG, c.dim, c.q_dim());
    draft_matmul(m, DT_LSA_K, L.K, L.xn, NG, c.dim, c.kv_dim());
    draft_matmul(m, DT_LSA_V, L.V, L.xn, NG, c.dim, c.kv_dim());
    XAttnKeysT<RealOf<O>> keys;  // set 1: every row; set 0 empty
    keys.k1 = L.K;
    keys.v1 = L.V;
    keys.n1 = NG;
    const std::vector<int> qrow = lsa_qrow(n, G);
    ops.xattn(L.att, L.lse, L.q, qrow.data(), NG, keys, c.n_heads, c.n_kv_heads, c.head_dim, lsa_mask(G));
    draft_matmul(m, DT_LSA_O, L.o, L.att, NG, c.q_dim(), c.dim);                  // Wo_l Attn
    ops.add(L.o, L.x, (size_t)NG * c.dim);                                       // o = x + Wo_l Attn
    ops.gather_rows(L.S, L.o, group_rows(n, G, 0).data(), n, c.dim);              // S = sum_r o_r
    for (int r = 1; r < E1; r++) {
        ops.gather_rows(L.ns, L.o, group_rows(n, G, r).data(), n, c.dim);         // (ns: free until the norm)
        ops.add(L.S, L.ns, (size_t)n * c.dim);
    }
    // RMSNorm_kv(S / (E + 1)) = RMSNorm with epsilon (E + 1)^2 eps of S; then Beagle's key projections
    key_forward(m, L.S, L.ns, L.nrstd, K, V, n, pos, c.norm_eps * (float)(E1 * E1));
}

template <class O>
void lsa_backward(DraftModelT<O>& m, BufAlloc<O>& al, LsaActs<RealOf<O>>& L, int n, const int* pos, RealOf<O>* dK,
                  const RealOf<O>* dV) {
    using R = RealOf<O>;
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    const int G = lsa_group(c), NG = n * G, E1 = c.n_extra() + 1;
    const size_t NGd = (size_t)NG * c.dim;
    R* dS = al.alloc((size_t)n * c.dim);  // zero: key_backward accumulates
    key_backward(m, al, L.S, L.ns, L.nrstd, dK, dV, n, pos, dS);
    R* dout = al.alloc(NGd);              // d loss / d o: dS on each of a group's E + 1 rows, 0 on the unused one
    for (int r = 0; r < E1; r++) ops.scatter_rows(dout, dS, group_rows(n, G, r).data(), n, c.dim, false);
    R* datt = al.alloc((size_t)NG * c.q_dim());
    R* dq = al.alloc((size_t)NG * c.q_dim());
    R* dKl = al.alloc((size_t)NG * c.kv_dim());
    R* dVl = al.alloc((size_t)NG * c.kv_dim());
    R* dxn = al.alloc(NGd);
    // o = x + Wo_l att (x an input: its residual gradient is dropped)
    ops.matmul_f32_bwd_w(m.g[DT_LSA_O], dout, L.att, NG, c.q_dim(), c.dim);
    ops.matmul_f32_bwd_x(datt, dout, m.w[DT_LSA_O], NG, c.q_dim(), c.dim, false);
    XAttnKeysT<R> keys;
    keys.k1 = L.K;
    keys.v1 = L.V;
    keys.n1 = NG;
    XAttnGradsT<R> dkeys;
    dkeys.dk1 = dKl;
    dkeys.dv1 = dVl;
    const std::vector<int> qrow = lsa_qrow(n, G);
    ops.xattn_bwd(dq, dkeys, datt, L.att, L.lse, L.q, qrow.data(), NG, keys, c.n_heads, c.n_kv_heads, c.head_dim,
                  lsa_mask(G));
    // q, k, v all come from xn
    qkv_backward(m, DT_LSA_Q, DT_LSA_K, DT_LSA_V, dq, dKl, dVl, L.xn, NG, dxn);
    ops.rmsnorm_f32_bwd(nullptr, m.g[DT_NORM_LSA], dxn, L.x, m.w[DT_NORM_LSA], L.rstd, NG, c.dim);
    for (R** p : {&dS, &dout, &datt, &dq, &dKl, &dVl, &dxn}) al.release(*p);
}

// ---- self-attention over the draft's tokens -----------------------------------------------------------
size_t self_attn_floats_per_row(const DraftConfig& c) { return (size_t)2 * c.dim + 1 + 2 * c.q_dim() + c.n_heads; }

template <class O>
void self_attn_acts_alloc(BufAlloc<O>& al, const DraftConfig& c, SelfAttnActs<RealOf<O>>* A, int n) {
    const size_t N = (size_t)n;
    A->n = n;
    A->e = al.alloc(N * c.dim);
    A->xs = al.alloc(N * c.dim);
    A->rstd = al.alloc(N);
    A->q = al.alloc(N * c.q_dim());
    A->att = al.alloc(N * c.q_dim());
    A->lse = al.alloc(N * c.n_heads);
}

template <class O>
void self_attn_acts_free(BufAlloc<O>& al, SelfAttnActs<RealOf<O>>* A) {
    for (auto* p : {&A->e, &A->xs, &A->rstd, &A->q, &A->att, &A->lse}) al.release(*p);
    A->n = 0;
}

template <class O>
void self_attn_kv(DraftModelT<O>& m, RealOf<O>* e, RealOf<O>* xs, RealOf<O>* rstd, const int* tokens, int n,
                  const int* pos, RealOf<O>* K, RealOf<O>* V) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    BEAGLE_CHECK(c.arch == ARCH_MOA, "self_attn_kv on a %s draft", draft_arch_name(c.arch));
    if (tokens) draft_embed(m, e, tokens, n);                                     // e = E(t) (null: e in place)
    m.ops.rmsnorm_f32(xs, rstd, e, m.w[DT_NORM_SA], n, c.dim, c.norm_eps);       // RMSNorm_sa(e)
    draft_matmul(m, DT_SA_K, K, xs, n, c.dim, c.kv_dim());
    m.ops.rope(K, pos, n, c.n_kv_heads, c.rope(), false);
    draft_matmul(m, DT_SA_V, V, xs, n, c.dim, c.kv_dim());
}

template <class O>
void self_attn_forward(DraftModelT<O>& m, SelfAttnActs<RealOf<O>>& A, int n, const int* tokens, const int* pos,
                       RealOf<O>* K, RealOf<O>* V, const int* qrow, const XAttnKeysT<RealOf<O>>& keys,
                       const XAttnMask& mask, RealOf<O>* u) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    BEAGLE_CHECK(n <= A.n, "self_attn_forward: %d queries but activations for %d", n, A.n);
    self_attn_kv(m, A.e, A.xs, A.rstd, tokens, n, pos, K, V);
    draft_matmul(m, DT_SA_Q, A.q, A.xs, n, c.dim, c.q_dim());
    m.ops.rope(A.q, pos, n, c.n_heads, c.rope(), false);
    m.ops.xattn(A.att, A.lse, A.q, qrow, n, keys, c.n_heads, c.n_kv_heads, c.head_dim, mask);
    draft_matmul(m, DT_SA_O, u, A.att, n, c.q_dim(), c.dim);                      // Wo_s Attn
    m.ops.add(u, A.e, (size_t)n * c.dim);                                        // u = e + Wo_s Attn
}

template <class O>
void self_attn_backward(DraftModelT<O>& m, BufAlloc<O>& al, SelfAttnActs<RealOf<O>>& A, const RealOf<O>* du,
                        const int* pos, const int* qrow, const XAttnKeysT<RealOf<O>>& keys,
                        const XAttnGradsT<RealOf<O>>& dkeys, RealOf<O>* dK, const RealOf<O>* dV, const XAttnMask& mask) {
    using R = RealOf<O>;
    const int n = A.n;
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    const size_t N = (size_t)n;
    R* datt = al.alloc(N * c.q_dim());
    R* dq = al.alloc(N * c.q_dim());
    R* dxs = al.alloc(N * c.dim);
    // u = e + Wo_s att (e frozen)
    ops.matmul_f32_bwd_w(m.g[DT_SA_O], du, A.att, n, c.q_dim(), c.dim);
    ops.matmul_f32_bwd_x(datt, du, m.w[DT_SA_O], n, c.q_dim(), c.dim, false);
    ops.xattn_bwd(dq, dkeys, datt, A.att, A.lse, A.q, qrow, n, keys, c.n_heads, c.n_kv_heads, c.head_dim, mask);
    ops.rope(dq, pos, n, c.n_heads, c.rope(), true);
    ops.rope(dK, pos, n, c.n_kv_heads, c.rope(), true);
    qkv_backward(m, DT_SA_Q, DT_SA_K, DT_SA_V, dq, dK, dV, A.xs, n, dxs);
    ops.rmsnorm_f32_bwd(nullptr, m.g[DT_NORM_SA], dxs, A.e, m.w[DT_NORM_SA], A.rstd, n, c.dim);
    for (R** p : {&datt, &dq, &dxs}) al.release(*p);
}

#define BEAGLE_MOA_LAYERS(O)                                                                                          \
    template void lsa_acts_alloc<O>(BufAlloc<O>&, const DraftConfig&, LsaActs<RealOf<O>>*, int);                     \
    template void lsa_acts_free<O>(BufAlloc<O>&, LsaActs<RealOf<O>>*);                                                \
    template void lsa_input<O>(DraftModelT<O>&, LsaActs<RealOf<O>>&, const RealOf<O>*, const RealOf<O>*, int);        \
    template void lsa_forward<O>(DraftModelT<O>&, LsaActs<RealOf<O>>&, int, const int*, RealOf<O>*, RealOf<O>*);      \
    template void lsa_backward<O>(DraftModelT<O>&, BufAlloc<O>&, LsaActs<RealOf<O>>&, int, const int*, RealOf<O>*,    \
                                  const RealOf<O>*);                                                                  \
    template void self_attn_acts_alloc<O>(BufAlloc<O>&, const DraftConfig&, SelfAttnActs<RealOf<O>>*, int);           \
    template void self_attn_acts_free<O>(BufAlloc<O>&, SelfAttnActs<RealOf<O>>*);                                     \
    template void self_attn_kv<O>(DraftModelT<O>&, RealOf<O>*, RealOf<O>*, RealOf<O>*, const int*, int, const int*,   \
                                  RealOf<O>*, RealOf<O>*);                                                            \
    template void self_attn_forward<O>(DraftModelT<O>&, SelfAttnActs<RealOf<O>>&, int, const int*, const int*,        \
                                       RealOf<O>*, RealOf<O>*, const int*, const XAttnKeysT<RealOf<O>>&,              \
                                       const XAttnMask&, RealOf<O>*);                                                 \
    template void self_attn_backward<O>(DraftModelT<O>&, BufAlloc<O>&, SelfAttnActs<RealOf<O>>&, const RealOf<O>*,    \
                                        const int*, const int*, const XAttnKeysT<RealOf<O>>&,                         \
                                        const XAttnGradsT<RealOf<O>>&, RealOf<O>*, const RealOf<O>*, const XAttnMask&);

BEAGLE_MOA_LAYERS(Ops)
BEAGLE_MOA_LAYERS(CpuOps64)

}  // namespace beagle
