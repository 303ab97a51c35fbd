// losses.h: the draft's training loss per predicted position (docs/method.md section 6):
//   L_i = CE(softmax(target logits of f_i), draft logits of f^_i) + w_v * SmoothL1(f^_i, f_i)
// target logits = lm_head(final_norm(f_i)) computed on the fly from the true state, over vocabulary
// chunks; token labels are an option. Called by the trainer (trainer.cpp) for each block of predicted rows.
#pragma once
#include <vector>

#include "../model/draft_layers.h"

namespace beagle {

struct LossOptions {
    float w_v = 10.0f;        // SmoothL1 weight relative to CE weight 1 (the paper's vloss)
    float sl1_beta = 1.0f;    // SmoothL1 beta (PyTorch default)
    bool hard_labels = false; // CE against the next token instead of the target's distribution
    int vocab_chunk = 1024;   // logits computed per chunk of this many vocabulary entries
    // The two passes over the vocabulary need the logits twice. While n x vocab stays within keep_max
    // (two such buffers: 64 MiB of floats) the first pass keeps every chunk and the second reads them
    // back instead of recomputing two of its three GEMMs; past it only one chunk is ever held. The same
    // GEMMs on the same chunks either way, so the same bits.
    size_t keep_max = size_t(1) << 23;
};
// whether draft_loss keeps n rows' logits between its passes (LossOptions::keep_max)
bool draft_loss_keeps(const DraftConfig& c, int n, const LossOptions& lo);

// n predicted rows fh (n x dim) against true states f (n x dim). labels: host next-token ids (hard
// labels only). ce[r] += scale * CE_r and vl[r] += scale * w_v * SmoothL1_r (backend, n each);
// dfh = scale * dL/dfh (n x dim, assigned). logits_capture (tests): if not null, receives the draft
// logits (n x vocab, host).
template <class O>
void draft_loss(DraftModelT<O>& m, BufAlloc<O>& al, const RealOf<O>* fh, const RealOf<O>* f, const int* labels, int n,
                const LossOptions& lo, float scale, RealOf<O>* dfh, RealOf<O>* ce, RealOf<O>* vl,
                std::vector<RealOf<O>>* logits_capture = nullptr);
// floats of draft_loss's temporaries for n rows (memory accounting)
size_t draft_loss_floats(const DraftConfig& c, int n, const LossOptions& lo);

}  // namespace beagle
