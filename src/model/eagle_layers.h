// eagle_layers.h: the EAGLE-1/2 draft's forward and backward (docs/method.md section 4, "The EAGLE-style baseline"),
// beside the Beagle layers (draft_layers.h), whose output half and weights it shares:
//   input:  e = E(t_p);  x_p = W_fc [e; f_{p-1}] = fc_e e + fc_f f_{p-1}     (E frozen, no bias)
//   layer:  xn = RMSNorm_in(x);  q = RoPE_p(Wq xn),  k = RoPE_p(Wk xn),  v = Wv xn
//           a = x + Wo Attn(q, {k_j, v_j : j <= p})         (causal self-attention over the draft's x)
//           f^_p = a + W_down (silu(W_gate m) * (W_up m)),  m = RMSNorm_m(a)
//   logits: lm_head(final_norm(f^_p)) predicts t_{p+1}   (head_logits in draft_layers.h)
// The self-attention is the xattn op: in training the keys are the queries' own rows (set 0) under a
// BLOCK mask with w = 1, offset 0 and qrow = i + 1, so query i sees rows j < i + 1; at inference the keys
// are the cached x of the true positions (set 0) and the tree's own rows (set 1, PREFIX bit mask).
// RMSNorm_in is the tensor norm_q. Templates over O (Ops, CpuOps64), instantiated in eagle_layers.cpp.
#pragma once
#include "draft_layers.h"

namespace beagle {

// e = E(tokens) (saved in e; tokens null: e holds them already), x = fc_e e + fc_f feat,
// xn = RMSNorm_in(x) (rstd saved). n rows.
template <class O>
void eagle_input(DraftModelT<O>& m, RealOf<O>* e, RealOf<O>* x, RealOf<O>* xn, RealOf<O>* rstd, const int* tokens,
                 const RealOf<O>* feat, int n);
// K = RoPE_pos(Wk xn), V = Wv xn (n rows of kv_dim).
template <class O>
void eagle_kv(DraftModelT<O>& m, const RealOf<O>* xn, RealOf<O>* K, RealOf<O>* V, int n, const int* pos);

// The layer on n queries (A from query_acts_alloc plus A.e, see eagle_acts_alloc): writes their K/V rows
// to K, V (which `keys` must include so a query sees itself), then attention and the output half.
template <class O>
void eagle_forward(DraftModelT<O>& m, BufAlloc<O>& al, QueryActs<RealOf<O>>& A, int n, const int* tokens,
                   const RealOf<O>* feat, const int* pos, RealOf<O>* K, RealOf<O>* V, const int* qrow,
                   const XAttnKeysT<RealOf<O>>& keys, const XAttnMask& mask);
// Training backward of the n queries of eagle_forward: dfh in (overwritten). The attention's key
// gradients accumulate into dkeys (zeroed by the caller, once); dK, dV are these queries' own K/V rows'
// gradients inside dkeys, complete when this is called (every query that sees those rows has been
// back-propagated: in the training-time test, the later steps first). They go back through the K/V
// projections (RoPE undone in place). Parameter gradients accumulate; the features are inputs (no gradient).
template <class O>
void eagle_backward(DraftModelT<O>& m, BufAlloc<O>& al, QueryActs<RealOf<O>>& A, RealOf<O>* dfh, const RealOf<O>* feat,
                    const int* pos, const int* qrow, const XAttnKeysT<RealOf<O>>& keys,
                    const XAttnGradsT<RealOf<O>>& dkeys, RealOf<O>* dK, const RealOf<O>* dV, const XAttnMask& mask);

template <class O>
void eagle_acts_alloc(BufAlloc<O>& al, const DraftConfig& c, QueryActs<RealOf<O>>* A, int n);
template <class O>
void eagle_acts_free(BufAlloc<O>& al, QueryActs<RealOf<O>>* A);

}  // namespace beagle
