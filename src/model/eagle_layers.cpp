// eagle_layers.cpp: the EAGLE draft's layer forward and backward (see eagle_layers.h), instantiated for
// Ops (float; training and the inference Draft) and CpuOps64 (double; the gradient check).
#include "eagle_layers.h"

#include "../core/common.h"

namespace beagle {

template <class O>
void eagle_input(DraftModelT<O>& m, RealOf<O>* e, RealOf<O>* x, RealOf<O>* xn, RealOf<O>* rstd, const int* tokens,
                 const RealOf<O>* feat, int n) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    BEAGLE_CHECK(c.arch == ARCH_EAGLE, "eagle_input on a %s draft", draft_arch_name(c.arch));
    if (tokens) draft_embed(m, e, tokens, n);                       // e = E(t_p) (null: e in place, Draft::forward_ids)
    draft_matmul(m, DT_FC_E, x, e, n, c.dim, c.dim);                // x = fc_e e
    draft_matmul(m, DT_FC_F, xn, feat, n, c.dim, c.dim);            //   + fc_f f_{p-1} (xn: free until the norm)
    m.ops.add(x, xn, (size_t)n * c.dim);
    m.ops.rmsnorm_f32(xn, rstd, x, m.w[DT_NORM_Q], n, c.dim, c.norm_eps);  // RMSNorm_in(x)
}

template <class O>
void eagle_kv(DraftModelT<O>& m, const RealOf<O>* xn, RealOf<O>* K, RealOf<O>* V, int n, const int* pos) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    draft_matmul(m, DT_WK, K, xn, n, c.dim, c.kv_dim());
    m.ops.rope(K, pos, n, c.n_kv_heads, c.rope(), false);
    draft_matmul(m, DT_WV, V, xn, n, c.dim, c.kv_dim());
}

template <class O>
void eagle_forward(DraftModelT<O>& m, BufAlloc<O>& al, QueryActs<RealOf<O>>& A, int n, const int* tokens,
                   const RealOf<O>* feat, const int* pos, RealOf<O>* K, RealOf<O>* V, const int* qrow,
                   const XAttnKeysT<RealOf<O>>& keys, const XAttnMask& mask) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    BEAGLE_CHECK(n <= A.n && A.e, "eagle_forward: %d queries but EAGLE activations for %d", n, A.n);
    eagle_input(m, A.e, A.u, A.nq, A.rstd_q, tokens, feat, n);  // u = x, nq = RMSNorm_in(x)
    eagle_kv(m, A.nq, K, V, n, pos);
    draft_matmul(m, DT_WQ, A.q, A.nq, n, c.dim, c.q_dim());
    m.ops.rope(A.q, pos, n, c.n_heads, c.rope(), false);
    m.ops.xattn(A.att, A.lse, A.q, qrow, n, keys, c.n_heads, c.n_kv_heads, c.head_dim, mask);
    block_out_forward(m, A, n);                                      // a = x + Wo Attn; f^ = a + MLP
}

template <class O>
void eagle_backward(DraftModelT<O>& m, BufAlloc<O>& al, QueryActs<RealOf<O>>& A, RealOf<O>* dfh, const RealOf<O>* feat,
                    const int* pos, const int* qrow, const XAttnKeysT<RealOf<O>>& keys,
                    const XAttnGradsT<RealOf<O>>& dkeys, RealOf<O>* dK, const RealOf<O>* dV, const XAttnMask& mask) {
    using R = RealOf<O>;
    const int n = A.n;
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    O& ops = m.ops;
    size_t N = (size_t)n;
    R* datt = al.alloc(N * c.q_dim());
    R* dq = al.alloc(N * c.q_dim());
    R* dxn = al.alloc(N * c.dim);
    block_out_backward(m, al, A, dfh, datt);  // dfh is now da = d loss / d a; a = x + Wo att, so dx starts as da
    R* dx = dfh;
    ops.xattn_bwd(dq, dkeys, datt, A.att, A.lse, A.q, qrow, n, keys, c.n_heads, c.n_kv_heads, c.head_dim, mask);
    // q, k, v all come from xn: its gradient sums the three projections'
    ops.rope(dq, pos, n, c.n_heads, c.rope(), true);
    ops.rope(dK, pos, n, c.n_kv_heads, c.rope(), true);
    qkv_backward(m, DT_WQ, DT_WK, DT_WV, dq, dK, dV, A.nq, n, dxn);
    ops.rmsnorm_f32_bwd(dx, m.g[DT_NORM_Q], dxn, A.u, m.w[DT_NORM_Q], A.rstd_q, n, c.dim);  // dx += RMSNorm_in'
    // x = fc_e e + fc_f f
    ops.matmul_f32_bwd_w(m.g[DT_FC_E], dx, A.e, n, c.dim, c.dim);
    ops.matmul_f32_bwd_w(m.g[DT_FC_F], dx, feat, n, c.dim, c.dim);
    for (R** p : {&datt, &dq, &dxn}) al.release(*p);
}

template <class O>
void eagle_acts_alloc(BufAlloc<O>& al, const DraftConfig& c, QueryActs<RealOf<O>>* A, int n) {
    query_acts_alloc(al, c, A, n);
    A->e = al.alloc((size_t)n * c.dim);
}

template <class O>
void eagle_acts_free(BufAlloc<O>& al, QueryActs<RealOf<O>>* A) {
    al.release(A->e);
    query_acts_free(al, A);
}

#define BEAGLE_EAGLE_LAYERS(O)                                                                                      \
    template void eagle_input<O>(DraftModelT<O>&, RealOf<O>*, RealOf<O>*, RealOf<O>*, RealOf<O>*,                    \
                                 const int*, const RealOf<O>*, int);                                                \
    template void eagle_kv<O>(DraftModelT<O>&, const RealOf<O>*, RealOf<O>*, RealOf<O>*, int, const int*);           \
    template void eagle_forward<O>(DraftModelT<O>&, BufAlloc<O>&, QueryActs<RealOf<O>>&, int, const int*,            \
                                   const RealOf<O>*, const int*, RealOf<O>*, RealOf<O>*, const int*,                 \
                                   const XAttnKeysT<RealOf<O>>&, const XAttnMask&);                                 \
    template void eagle_backward<O>(DraftModelT<O>&, BufAlloc<O>&, QueryActs<RealOf<O>>&, RealOf<O>*,                \
                                    const RealOf<O>*, const int*, const int*, const XAttnKeysT<RealOf<O>>&,          \
                                    const XAttnGradsT<RealOf<O>>&, RealOf<O>*, const RealOf<O>*, const XAttnMask&); \
    template void eagle_acts_alloc<O>(BufAlloc<O>&, const DraftConfig&, QueryActs<RealOf<O>>*, int);                \
    template void eagle_acts_free<O>(BufAlloc<O>&, QueryActs<RealOf<O>>*);

BEAGLE_EAGLE_LAYERS(Ops)
BEAGLE_EAGLE_LAYERS(CpuOps64)

}  // namespace beagle
