// adamw.h: AdamW over the draft's trainable tensors with global gradient-norm clipping (docs/method.md section 6:
// betas 0.9/0.95, clip 0.5, constant lr after a linear warm-up). Weight decay applies to the
// matrices only (not the RMSNorm gains, nor the Medusa heads' biases). Called once per batch by the training loop.
// Data-parallel runs shard it (ZeRO-1): rank r of P keeps the moments of, and updates, only the slice
// [n r / P, n (r + 1) / P) of each tensor; the loop then gathers the updated slices (data_parallel.h).
#pragma once
#include "../model/draft_layers.h"

namespace beagle {

struct AdamWOptions {
    float lr = 3e-5f;
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
    float weight_decay = 0.0f;
    float clip = 0.5f;   // global grad-norm clip (<= 0: off)
    int warmup = 2000;   // linear warm-up steps
    // Linear decay to 0 over steps [decay_from, decay_to) (warm-up, stable, decay); decay_to <= decay_from: none.
    int decay_from = 0, decay_to = 0;
};

template <class O>
class AdamWT {
public:
    // rank, ranks: this optimizer's slice of every tensor (1 rank: all of it)
    AdamWT(DraftModelT<O>& m, const AdamWOptions& opt, int rank = 0, int ranks = 1);
    ~AdamWT();
    AdamWT(const AdamWT&) = delete;
    AdamWT& operator=(const AdamWT&) = delete;

    // One update from the gradients in m.g, at learning rate lr_at(steps()) unless lr >= 0 is given.
    // Returns the global gradient norm before clipping.
    double step(float lr = -1.0f);
    float lr_at(int step) const;  // linear warm-up from 0 to opt.lr over `warmup` steps, then constant (or decay)
    int steps() const { return t_; }
    const AdamWOptions& options() const { return opt_; }
    // moments (for checkpoints): backend buffers of this rank's slice [lo(i), lo(i) + len(i)) of tensor i
    RealOf<O>* m(int i) { return m_[i]; }
    RealOf<O>* v(int i) { return v_[i]; }
    size_t lo(int i) const { return lo_[i]; }
    size_t len(int i) const { return len_[i]; }
    void set_steps(int t) { t_ = t; }

private:
    DraftModelT<O>& model_;
    AdamWOptions opt_;
    RealOf<O>* m_[DT_COUNT] = {};
    RealOf<O>* v_[DT_COUNT] = {};
    size_t lo_[DT_COUNT] = {}, len_[DT_COUNT] = {};
    int t_ = 0;
};

// Rank r's slice of n elements among P ranks: [n r / P, n (r + 1) / P) (contiguous, in rank order).
inline size_t slice_begin(size_t n, int r, int P) { return (size_t)((unsigned __int128)n * r / P); }

using AdamW = AdamWT<Ops>;

}  // namespace beagle
