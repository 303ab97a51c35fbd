// draft_layers.h: the Beagle draft's forward and backward, layer by layer, side by side (docs/method.md section 3):
//   keys:    ns = RMSNorm_kv(s);  K = RoPE_j(Wk ns);  V = Wv ns
//   query:   u = E(t);  q = RoPE_i(Wq RMSNorm_q(u));  a = u + Wo Attn(q, K, V | mask)
//            f^ = a + W_down (silu(W_gate m) * (W_up m)),  m = RMSNorm_m(a)
//   logits:  lm_head(final_norm(f^))   (E, final_norm, lm_head frozen)
// The output half (a = u + Wo att, the MLP) is shared with the EAGLE layer (src/model/eagle_layers.h).
// Templates over the op set O: Ops (float; training and the inference Draft in src/model/draft.cpp)
// and CpuOps64 (double; the gradient check). Explicit instantiations are in draft_layers.cpp.
// Gradient convention (llm.c): parameter gradients accumulate, activation gradients are assigned.
#pragma once
#include <vector>

#include "../backend/ops.h"
#include "../model/draft.h"
#include "../backend/buf_alloc.h"
#include "../backend/cpu/ops_f64.h"

namespace beagle {

// Backend-resident draft: trainable weights (and their gradients when training) plus the frozen
// tensors shared with the target.
template <class O>
struct DraftModelT {
    using R = RealOf<O>;
    O& ops;
    DraftConfig cfg;
    R* w[DT_COUNT] = {};
    R* g[DT_COUNT] = {};                  // gradients; null until enable_grads()
    R *embd = nullptr, *out_norm = nullptr, *lm_head = nullptr;  // lm_head == embd when tied; both null
    bool tied = false;                                           // when the frozen tables were not given
    bool own_head = false;            // lm_head is this model's own buffer (untied, or the reduced vocabulary's rows)
    std::vector<int32_t> d2t;         // reduced vocabulary (cfg.draft_vocab > 0): logit i is target token d2t[i]
    // Inference only (O = Ops): the target's own (possibly quantized) embedding and LM head, used
    // instead of the f32 tables when set (Draft::use_target_weights).
    Weight embd_w, head_w;
    // Inference only: a quantized copy of matrix t (Draft::use_q8_weights) used by the forward instead
    // of w[t] when set (the backward always uses w).
    Weight fast_w[DT_COUNT];

    DraftModelT(O& ops, const DraftWeights& dw, const DraftFrozen& fz);
    ~DraftModelT();
    DraftModelT(const DraftModelT&) = delete;
    DraftModelT& operator=(const DraftModelT&) = delete;

    void set_weights(const DraftWeights& dw);  // host -> backend (config must match)
    void get_weights(DraftWeights* dw) const;  // backend -> host (keeps dw->meta)
    void enable_grads();
    void zero_grads();
};

// host float <-> backend R (converting when R is double)
template <class O>
void upload_f(O& ops, RealOf<O>* dst, const float* src, size_t n);
template <class O>
void download_f(O& ops, float* dst, const RealOf<O>* src, size_t n);

// y (n x n_out) = x (n x n_in) W_t^T: the f32 matmul of training, or at inference the quantized copy
// of W_t when set (Draft::use_q8_weights).
template <class O>
void draft_matmul(DraftModelT<O>& m, int t, RealOf<O>* y, const RealOf<O>* x, int n, int n_in, int n_out);
// u (n x dim) = E(tokens): the target's stored embedding when given (inference), else the f32 table.
template <class O>
void draft_embed(DraftModelT<O>& m, RealOf<O>* u, const int* tokens, int n);

// ---- state layers (DraftConfig::state_layers; EAGLE-3's fused features, in residual form) ----------
// s (n x dim) = f + W_mix h: f the true states, h (n x E dim) the residual streams of the state layers.
template <class O>
void fuse_forward(DraftModelT<O>& m, const RealOf<O>* f, const RealOf<O>* h, RealOf<O>* s, int n);
// ds = d loss / d s in, dW_mix += ds^T h (f and h are inputs: no gradient).
template <class O>
void fuse_backward(DraftModelT<O>& m, const RealOf<O>* ds, const RealOf<O>* h, int n);

// ---- key side: K/V of n key states s (rows at positions pos) -------------------------------------
// Saves ns (n x dim) and rstd (n) for the backward. eps: RMSNorm_kv's epsilon (0: the config's; the MoA keys
// fold their mean into it, moa_layers.h).
template <class O>
void key_forward(DraftModelT<O>& m, const RealOf<O>* s, RealOf<O>* ns, RealOf<O>* rstd, RealOf<O>* K, RealOf<O>* V,
                 int n, const int* pos, float eps = 0);
// dK (turned back through RoPE in place) and dV -> dWk, dWv, dnorm_kv (accumulate) and, if ds is
// not null, ds += d loss / d s.
template <class O>
void key_backward(DraftModelT<O>& m, BufAlloc<O>& al, const RealOf<O>* s, const RealOf<O>* ns, const RealOf<O>* rstd,
                  RealOf<O>* dK, const RealOf<O>* dV, int n, const int* pos, RealOf<O>* ds);

// The backward of three projections of one input, q = Wq xn, k = Wk xn, v = Wv xn (tensors tq, tk, tv; dq,
// dK, dV with RoPE already undone): their weight gradients accumulate; dxn (n x dim) is assigned their sum.
template <class O>
void qkv_backward(DraftModelT<O>& m, int tq, int tk, int tv, const RealOf<O>* dq, const RealOf<O>* dK,
                  const RealOf<O>* dV, const RealOf<O>* xn, int n, RealOf<O>* dxn);

// ---- query side: n queries ---------------------------------------------------------------------
// Activations of a block of n queries, everything the backward needs, named as in the math.
template <class R>
struct QueryActs {
    int n = 0;
    R *u = nullptr, *nq = nullptr, *rstd_q = nullptr, *q = nullptr;     // embedding, RMSNorm_q, query (roped)
    R *att = nullptr, *lse = nullptr;                                   // attention output, its logsumexp
    R *a = nullptr, *nm = nullptr, *rstd_m = nullptr;                   // u + Wo att, RMSNorm_m(a)
    R *gate = nullptr, *up = nullptr, *h = nullptr;                     // MLP
    R *fh = nullptr;                                                    // predicted state f^
    R *e = nullptr;                     // EAGLE only: the token embedding E(t) (u is then x = W_fc [e; f])
};
// floats per query row of QueryActs (for memory accounting)
size_t query_acts_floats_per_row(const DraftConfig& c);
template <class O>
void query_acts_alloc(BufAlloc<O>& al, const DraftConfig& c, QueryActs<RealOf<O>>* A, int n);
template <class O>
void query_acts_free(BufAlloc<O>& al, QueryActs<RealOf<O>>* A);

// tokens, pos, qrow: host arrays of n (qrow: sequence row of each query, for BLOCK masks). tokens null:
// A.u already holds the embeddings (inference from ids on the backend, Draft::forward_ids).
template <class O>
void query_forward(DraftModelT<O>& m, QueryActs<RealOf<O>>& A, int n, const int* tokens, const int* pos,
                   const int* qrow, const XAttnKeysT<RealOf<O>>& keys, const XAttnMask& mask);
// dfh: d loss / d f^ (n x dim), overwritten (grad_u: with d loss / d u, the input's gradient, which the MoA
// draft's self-attention needs; else u = E(t) is frozen and its gradient dropped). Parameter gradients
// accumulate into m.g; key-set gradients accumulate into dkeys.
template <class O>
void query_backward(DraftModelT<O>& m, BufAlloc<O>& al, QueryActs<RealOf<O>>& A, RealOf<O>* dfh, const int* pos,
                    const int* qrow, const XAttnKeysT<RealOf<O>>& keys, const XAttnGradsT<RealOf<O>>& dkeys,
                    const XAttnMask& mask, bool grad_u = false);
// floats per query row of the backward's temporaries
size_t query_backward_floats_per_row(const DraftConfig& c);

// ---- the output half, shared by Beagle's query side and the EAGLE layer ---------------------------
// a = u + Wo att;  f^ = a + W_down (silu(W_gate m) * (W_up m)),  m = RMSNorm_m(a). Reads A.u, A.att.
template <class O>
void block_out_forward(DraftModelT<O>& m, QueryActs<RealOf<O>>& A, int n);
// Its backward: dfh (n x dim) in, overwritten with d loss / d a (= d loss / d u through the residual);
// datt (n x q_dim) assigned; parameter gradients of Wo, norm_m and the MLP accumulate.
template <class O>
void block_out_backward(DraftModelT<O>& m, BufAlloc<O>& al, QueryActs<RealOf<O>>& A, RealOf<O>* dfh, RealOf<O>* datt);

// ---- head ---------------------------------------------------------------------------------------
// logits (n x cfg.head_rows()) = lm_head(final_norm(fh)); xn: n x dim scratch, rstd: n scratch.
template <class O>
void head_logits(DraftModelT<O>& m, const RealOf<O>* fh, int n, RealOf<O>* xn, RealOf<O>* rstd, RealOf<O>* logits);

}  // namespace beagle
