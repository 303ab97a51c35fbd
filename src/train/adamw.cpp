// adamw.cpp: the AdamW optimizer of the draft (see adamw.h); the element-wise update is the
// backend's adamw op, the global norm its sumsq op.
#include "adamw.h"

#include <algorithm>
#include <cmath>

#include "../core/common.h"

namespace beagle {

template <class O>
AdamWT<O>::AdamWT(DraftModelT<O>& m, const AdamWOptions& opt, int rank, int ranks) : model_(m), opt_(opt) {
    BEAGLE_CHECK(opt.lr >= 0 && opt.beta1 >= 0 && opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1 && opt.eps > 0,
                 "AdamW: bad options (lr %g, betas %g %g, eps %g)", opt.lr, opt.beta1, opt.beta2, opt.eps);
    BEAGLE_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "AdamW: rank %d of %d", rank, ranks);
    for (int i = 0; i < DT_COUNT; i++) {
        if (!m.cfg.has(i)) continue;  // a tensor of another architecture
        size_t n = (size_t)m.cfg.numel(i);
        lo_[i] = slice_begin(n, rank, ranks);
        len_[i] = slice_begin(n, rank + 1, ranks) - lo_[i];
        m_[i] = m.ops.alloc(std::max<size_t>(1, len_[i]));
        v_[i] = m.ops.alloc(std::max<size_t>(1, len_[i]));
    }
}

template <class O>
AdamWT<O>::~AdamWT() {
    for (int i = 0; i < DT_COUNT; i++) {
        if (m_[i]) model_.ops.release(m_[i]);
        if (v_[i]) model_.ops.release(v_[i]);
    }
}

template <class O>
float AdamWT<O>::lr_at(int step) const {
    float lr = opt_.lr;
    if (opt_.decay_to > opt_.decay_from && step >= opt_.decay_from)
        lr *= (float)std::max(0, opt_.decay_to - step) / (float)(opt_.decay_to - opt_.decay_from);
    if (opt_.warmup <= 0 || step >= opt_.warmup) return lr;
    return lr * (float)(step + 1) / (float)opt_.warmup;
}

template <class O>
double AdamWT<O>::step(float lr) {
    const DraftConfig& c = model_.cfg;
    for (int i = 0; i < DT_COUNT; i++) BEAGLE_CHECK(model_.g[i] || !c.has(i), "AdamW step without gradients (enable_grads)");
    const RealOf<O>* gs[DT_COUNT];
    size_t ns[DT_COUNT];
    int count = 0;
    for (int i = 0; i < DT_COUNT; i++) {
        if (!c.has(i)) continue;  // a tensor of another architecture
        gs[count] = model_.g[i];
        ns[count++] = (size_t)c.numel(i);
    }
    const double ss = model_.ops.sumsq_all(gs, ns, count);  // one device -> host copy
    double norm = std::sqrt(ss);
    BEAGLE_CHECK(std::isfinite(norm), "AdamW: gradient norm is not finite (%g): the loss diverged", norm);
    AdamWParams p;
    p.lr = lr >= 0 ? lr : lr_at(t_);
    p.beta1 = opt_.beta1;
    p.beta2 = opt_.beta2;
    p.eps = opt_.eps;
    p.grad_scale = opt_.clip > 0 && norm > opt_.clip ? (float)(opt_.clip / norm) : 1.0f;
    p.step = ++t_;
    for (int i = 0; i < DT_COUNT; i++) {
        if (!c.has(i)) continue;
        p.weight_decay = draft_tensor_is_vector(i) ? 0.0f : opt_.weight_decay;  // norms, biases
        if (len_[i]) model_.ops.adamw(model_.w[i] + lo_[i], m_[i], v_[i], model_.g[i] + lo_[i], len_[i], p);
    }
    return norm;
}

template class AdamWT<Ops>;
template class AdamWT<CpuOps64>;

}  // namespace beagle
