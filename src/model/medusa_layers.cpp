// medusa_layers.cpp: the Medusa heads' forward and backward (see medusa_layers.h), instantiated for Ops (float;
// training and MedusaDrafter) and CpuOps64 (double; the gradient check).
#include "medusa_layers.h"

#include <vector>

#include "../core/common.h"

namespace beagle {

template <class O>
void medusa_forward(DraftModelT<O>& m, BufAlloc<O>& al, const RealOf<O>* s, RealOf<O>* z, RealOf<O>* u,
                    const RealOf<O>* ones, int n) {
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    BEAGLE_CHECK(c.arch == ARCH_MEDUSA, "medusa_forward on a %s draft", draft_arch_name(c.arch));
    const int K = c.medusa_heads, dim = c.dim;
    const size_t NK = (size_t)n * K;
    draft_matmul(m, DT_MEDUSA_W, z, s, n, dim, K * dim);       // z = W f
    m.ops.add(z, m.w[DT_MEDUSA_B], NK * dim, (size_t)K * dim);  //   + b (one row added to every position)
    m.ops.swiglu(u, z, ones, NK * dim);                         // u = SiLU(z)
    if (n == 1) {                                               //   + f_p on each of position p's K rows
        m.ops.add(u, s, NK * dim, (size_t)dim);
        return;
    }
    std::vector<int> rep(NK);  // f_p repeated K times (a gather), then added
    for (size_t r = 0; r < NK; r++) rep[r] = (int)(r / K);
    RealOf<O>* srep = al.alloc(NK * dim);
    m.ops.gather_rows(srep, s, rep.data(), (int)NK, dim);
    m.ops.add(u, srep, NK * dim);
    al.release(srep);
}

template <class O>
void medusa_backward(DraftModelT<O>& m, BufAlloc<O>& al, const RealOf<O>* s, const RealOf<O>* z, const RealOf<O>* ones,
                     RealOf<O>* du, int n) {
    using R = RealOf<O>;
    if (n == 0) return;
    const DraftConfig& c = m.cfg;
    const int K = c.medusa_heads, dim = c.dim;
    const size_t NKD = (size_t)n * K * dim;
    R* dz = al.alloc(NKD);
    R* dones = al.alloc(NKD);  // swiglu_bwd's d up (unused: up is the constant 1)
    m.ops.swiglu_bwd(dz, dones, du, z, ones, NKD);                      // dz = du * SiLU'(z)
    m.ops.copy(du, dz, NKD);
    m.ops.matmul_f32_bwd_w(m.g[DT_MEDUSA_W], du, s, n, dim, K * dim);   // dW += dz^T f
    m.ops.matmul_f32_bwd_w(m.g[DT_MEDUSA_B], du, ones, n, 1, K * dim);  // db += sum_p dz_p (x = a column of ones)
    al.release(dz);
    al.release(dones);
}

#define BEAGLE_MEDUSA_LAYERS(O)                                                                                        \
    template void medusa_forward<O>(DraftModelT<O>&, BufAlloc<O>&, const RealOf<O>*, RealOf<O>*, RealOf<O>*,          \
                                    const RealOf<O>*, int);                                                           \
    template void medusa_backward<O>(DraftModelT<O>&, BufAlloc<O>&, const RealOf<O>*, const RealOf<O>*,                 \
                                     const RealOf<O>*, RealOf<O>*, int);

BEAGLE_MEDUSA_LAYERS(Ops)
BEAGLE_MEDUSA_LAYERS(CpuOps64)

}  // namespace beagle
