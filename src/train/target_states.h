// target_states.h: the target's true states of a training sequence computed inside `beagle train` from
// its tokens (tokens-only data, the default of beagle datagen): one causal prefill on the training
// backend, rounded to f16 as datagen stores them. Called by train_loop.cpp for each item it runs, and by
// `beagle datagen --states-of` (cache_states) to store them once for runs of many epochs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../data/dataset.h"

namespace beagle {

class Llama;
class Ops;
struct ModelFile;

// Tokens-only data written with --f32-weights: its states come from the target's weights in f32 too.
void match_datagen_weights(const Dataset& ds, ModelFile& mf);

// `beagle datagen --states-of IN -o OUT`: the states of every sequence of tokens-only data IN (with the rows of
// `layers`, as --state-layers keeps them) computed by the target of mf and written with the tokens to OUT:
// shards of IN's names and sequences, byte for byte the shards `datagen --keep-states` writes for the same
// answers; OUT/meta.txt is IN's with the states kept. Complete shards of OUT are kept (a killed run resumes).
void cache_states(ModelFile& mf, const std::string& model_path, uint64_t tokenizer_hash, const std::string& in,
                  const std::string& out, const std::vector<int>& layers, int threads);

// The target's kernels are batch-invariant (one reduction order per output row, whatever the number of
// rows a forward runs), so a prefill gives each position the bits datagen's token-by-token decode gave it,
// and a draft trained from tokens equals one trained from the stored states of the same tokens, bit for bit.
//
// The states of a few sequences are kept in slots (least recently used goes first). prefetch() queues a
// sequence's prefill and the download of its states without waiting for them: on a device backend the
// training loop calls it for the next step's items before the step's own sync, so the prefill runs behind
// the draft's step and costs that step no sync of its own; view() then finds the states landed.
class TargetStates {
public:
    // max_len: the longest sequence of the data; layers: the state layers the run fuses (rows [f; h_l..]);
    // slots: sequences kept (at least the items of two steps, so the next step's prefetches leave the
    // current step's alone).
    TargetStates(const ModelFile& mf, Ops& ops, int max_len, const std::vector<int>& layers, int slots);
    ~TargetStates();
    // Queue the states of positions [0, end) of sequence `seq` (v: its tokens) unless a slot has them.
    void prefetch(uint32_t seq, const SeqView& v, int end);
    // Sequence `seq` with the f16 states of its positions [0, end) and, with state layers, their rows
    // (extras: end x E x dim). The view holds until the sequence's slot is reused (`slots` prefetches or
    // views of other sequences later).
    SeqView view(uint32_t seq, const SeqView& v, int end);
    double seconds() const { return seconds_; }  // host time spent queuing, computing and rounding states
    int64_t tokens() const { return tokens_; }   // positions prefilled

private:
    struct Slot {
        int64_t seq = -1;
        int end = 0;
        bool landed = true;     // rows hold the downloaded states and states/extras their f16 rounding
        uint64_t used = 0;      // last prefetch or view (least recently used goes first)
        std::vector<float> rows;
        std::vector<uint16_t> states, extras;
    };
    Slot* find(uint32_t seq, int end);
    void land(Slot& s);  // wait for its download, then round the rows to f16
    Ops& ops_;
    std::unique_ptr<Llama> m_;
    int dim_, E_;
    std::vector<Slot> slots_;
    uint64_t clock_ = 0;
    double seconds_ = 0;
    int64_t tokens_ = 0;
};

}  // namespace beagle
