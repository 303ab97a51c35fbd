// target_states.h: the target's true states of a training sequence computed inside `beagle train` from
// its tokens (tokens-only data, the default of beagle datagen): one causal prefill on the training
// backend, rounded to f16 as datagen stores them. Called by train_loop.cpp for each item it runs.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "../data/dataset.h"

namespace beagle {

class Llama;
class Ops;
struct ModelFile;

// The target's kernels are batch-invariant (one reduction order per output row, whatever the number of
// rows a forward runs), so a prefill gives each position the bits datagen's token-by-token decode gave it,
// and a draft trained from tokens equals one trained from the stored states of the same tokens, bit for bit.
class TargetStates {
public:
    // max_len: the longest sequence of the data; layers: the state layers the run fuses (rows [f; h_l..]).
    TargetStates(const ModelFile& mf, Ops& ops, int max_len, const std::vector<int>& layers);
    ~TargetStates();
    // Sequence `seq` of the data (v: its tokens) with the f16 states of its positions [0, end) and, with state
    // layers, their rows (extras: end x E x dim). The view holds until the next call; the last sequence's
    // states are kept, so a later chunk of it within [0, end) costs no prefill.
    SeqView view(uint32_t seq, const SeqView& v, int end);
    double seconds() const { return seconds_; }  // spent computing states
    int64_t tokens() const { return tokens_; }   // positions prefilled

private:
    std::unique_ptr<Llama> m_;
    int dim_, E_;
    int64_t cached_seq_ = -1;
    int cached_end_ = 0;
    std::vector<float> rows_;
    std::vector<uint16_t> states_, extras_;
    double seconds_ = 0;
    int64_t tokens_ = 0;
};

}  // namespace beagle
