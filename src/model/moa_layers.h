// moa_layers.h: the Mixture of Attentions draft's own layers, forward and backward side by side (docs/method.md
// section 4, "The Mixture of Attentions draft"; single device, TLI = 0), beside the Beagle layers (draft_layers.h)
// whose cross-attention block it ends with:
//   LSA, once per true position j, over its E + 1 layer rows x_{j,r} = f_j, h_{l1,j}, .., h_{lE,j}:
//       xn = RMSNorm_lsa(x);  q = Wq_l xn,  k = Wk_l xn,  v = Wv_l xn          (no RoPE: the axis is the layers)
//       o_r = x_r + Wo_l Attn(q_r, {k_r', v_r' : r' = 0..E})                   (bidirectional over the rows)
//       z_j = mean_r o_r
//   keys:  k_j = RoPE_j(Wk RMSNorm_kv(z_j)),  v_j = Wv RMSNorm_kv(z_j)            (Beagle's key side on z)
//   tokens: e_p = E(t_p);  xs_p = RMSNorm_sa(e_p)
//       u_p = e_p + Wo_s Attn(RoPE_p(Wq_s xs_p), {RoPE_j(Wk_s xs_j), Wv_s xs_j : j <= p})   (causal, own tokens)
//   then Beagle's query block with u as its input (query_forward: cross-attention over k, v; MLP) -> f^_p.
// The LSA rows of a position lie in a group of G = E + 2 rows, its E + 1 rows and one unused (zero) row, so the
// xattn op's BLOCK mask with w = G, offset 0, n_pred = G and every row's qrow = its group's last row shows each
// row exactly its own position's E + 1 rows (set 1; set 0 empty): one call for all positions.
// The mean's 1 / (E + 1) is folded into RMSNorm_kv: RMSNorm(S / n) = S / sqrt(mean(S^2) + n^2 eps), S = sum_r o_r.
// Templates over O (Ops, CpuOps64), instantiated in moa_layers.cpp; gradient convention as draft_layers.h.
#pragma once
#include "draft_layers.h"

namespace beagle {

// ---- Layer Self-Attention and the keys it gives -------------------------------------------------
template <class R>
struct LsaActs {
    int n = 0;                                        // positions (capacity)
    R *x = nullptr, *xn = nullptr, *rstd = nullptr;   // n G rows: layer rows, RMSNorm_lsa(x), its rstd
    R *q = nullptr, *K = nullptr, *V = nullptr;       // n G rows
    R *att = nullptr, *lse = nullptr, *o = nullptr;   // attention, its logsumexp, o = x + Wo_l att
    R *S = nullptr, *ns = nullptr, *nrstd = nullptr;  // n rows: S = sum_r o_r, RMSNorm_kv(S / (E + 1)), its rstd
};
inline int lsa_group(const DraftConfig& c) { return c.n_extra() + 2; }  // G
size_t lsa_floats_per_position(const DraftConfig& c);                 // of LsaActs (memory accounting)
template <class O>
void lsa_acts_alloc(BufAlloc<O>& al, const DraftConfig& c, LsaActs<RealOf<O>>* L, int n);
template <class O>
void lsa_acts_free(BufAlloc<O>& al, LsaActs<RealOf<O>>* L);

// L.x <- n positions' rows: position i's f (row i of f), then its E layer rows (rows i E .. i E + E - 1 of h;
// h unused when E = 0), then a zero row.
template <class O>
void lsa_input(DraftModelT<O>& m, LsaActs<RealOf<O>>& L, const RealOf<O>* f, const RealOf<O>* h, int n);
// LSA over L.x of n positions, then the cross-attention K, V (n rows of kv_dim) at positions pos.
template <class O>
void lsa_forward(DraftModelT<O>& m, LsaActs<RealOf<O>>& L, int n, const int* pos, RealOf<O>* K, RealOf<O>* V);
// Backward from dK (RoPE undone in place) and dV of the n keys: parameter gradients of the key side
// (Wk, Wv, norm_kv) and of LSA accumulate; the layer rows are inputs (no gradient).
template <class O>
void lsa_backward(DraftModelT<O>& m, BufAlloc<O>& al, LsaActs<RealOf<O>>& L, int n, const int* pos, RealOf<O>* dK,
                  const RealOf<O>* dV);

// ---- self-attention over the draft's own tokens -----------------------------------------------
template <class R>
struct SelfAttnActs {
    int n = 0;
    R *e = nullptr, *xs = nullptr, *rstd = nullptr;   // E(t), RMSNorm_sa(e), its rstd
    R *q = nullptr, *att = nullptr, *lse = nullptr;   // query (roped), attention output, its logsumexp
};
size_t self_attn_floats_per_row(const DraftConfig& c);
template <class O>
void self_attn_acts_alloc(BufAlloc<O>& al, const DraftConfig& c, SelfAttnActs<RealOf<O>>* A, int n);
template <class O>
void self_attn_acts_free(BufAlloc<O>& al, SelfAttnActs<RealOf<O>>* A);

// K/V rows of n tokens at positions pos: e = E(tokens) (tokens null: e holds them), xs = RMSNorm_sa(e) (rstd
// saved), K = RoPE(Wk_s xs), V = Wv_s xs.
template <class O>
void self_attn_kv(DraftModelT<O>& m, RealOf<O>* e, RealOf<O>* xs, RealOf<O>* rstd, const int* tokens, int n,
                  const int* pos, RealOf<O>* K, RealOf<O>* V);
// n queries: their K/V rows written to K, V (which `keys` must include so a query sees itself), then
// u (n x dim) = e + Wo_s Attn.
template <class O>
void self_attn_forward(DraftModelT<O>& m, SelfAttnActs<RealOf<O>>& A, int n, const int* tokens, const int* pos,
                       RealOf<O>* K, RealOf<O>* V, const int* qrow, const XAttnKeysT<RealOf<O>>& keys,
                       const XAttnMask& mask, RealOf<O>* u);
// Training backward: du (n x dim) in. The attention's key gradients accumulate into dkeys; dK, dV are these
// queries' own K/V rows' gradients inside dkeys, complete when this is called. Parameter gradients accumulate;
// E(t) is frozen (no gradient).
template <class O>
void self_attn_backward(DraftModelT<O>& m, BufAlloc<O>& al, SelfAttnActs<RealOf<O>>& A, const RealOf<O>* du,
                        const int* pos, const int* qrow, const XAttnKeysT<RealOf<O>>& keys,
                        const XAttnGradsT<RealOf<O>>& dkeys, RealOf<O>* dK, const RealOf<O>* dV, const XAttnMask& mask);

}  // namespace beagle
