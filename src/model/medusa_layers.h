// medusa_layers.h: the Medusa-1 heads' forward and backward (docs/method.md section 4b, "The Medusa heads"), on
// the target's last true state f_p (the last layer's output before the final norm), K heads at once:
//   z = W f_p + b               W = [W_0; ..; W_{K-1}] {K dim, dim}, b {K dim}: one matmul for every head
//   u_k = f_p + SiLU(z_k)       z_k = rows k dim .. (k + 1) dim - 1 of z (Medusa's residual block)
//   logits_k = lm_head(final_norm(u_k))  predicts t_{p+2+k}       (head_logits in draft_layers.h, frozen)
// u is laid out head-major within a position: row p K + k is u_k of position p. SiLU is Ops::swiglu with
// an all-ones `up` (silu(z) * 1), its derivative swiglu_bwd's dgate. Callers: the trainer (trainer.cpp
// run_medusa), the gradient check, MedusaDrafter (src/decode/medusa_drafter.cpp).
#pragma once
#include "draft_layers.h"

namespace beagle {

// n positions: s (n x dim) in; z (n x K dim) and u (n K x dim) out. ones: at least n K dim ones. A temporary
// (n > 1: f_p repeated per head, n K dim) comes from al.
template <class O>
void medusa_forward(DraftModelT<O>& m, BufAlloc<O>& al, const RealOf<O>* s, RealOf<O>* z, RealOf<O>* u, const RealOf<O>* ones, int n);
// Backward of medusa_forward: du (n K x dim, d loss / d u) in, overwritten with d loss / d z; dW += dz^T s and
// db += the column sums of dz accumulate into m.g. s is an input (the target's states): no gradient.
template <class O>
void medusa_backward(DraftModelT<O>& m, BufAlloc<O>& al, const RealOf<O>* s, const RealOf<O>* z, const RealOf<O>* ones,
                     RealOf<O>* du, int n);

}  // namespace beagle
