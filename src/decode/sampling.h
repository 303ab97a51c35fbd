// sampling.h: turning logits into the next token: greedy argmax, or temperature -> top-k -> top-p
// truncation -> a draw from a seeded RNG. The draw follows karpathy's run.c exactly (xorshift64*
// coin, top-p cut-off and cumulative walk), so seeded samples of llama2.c models reproduce run.c.
// warp() exposes the truncated distribution itself: speculative sampling needs p and q as vectors.
#pragma once
#include <cstdint>
#include <vector>

#include "../backend/cpu/select.h"  // argmax, log_sum_exp, top_k_indices, warp, warp_dense

namespace beagle {

// The truncation (WarpParams, ops.h: temperature, top_k, top_p) and the seed of the draws.
struct SamplingParams : WarpParams {
    uint64_t seed = 0;
};

// run.c's xorshift64* generator.
struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed = 0) : state(seed ? seed : 0x853c49e6748fea9bULL) {}
    uint32_t next_u32() {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        return (uint32_t)((state * 0x2545F4914F6CDD1DULL) >> 32);
    }
    float next_f32() { return (next_u32() >> 8) / 16777216.0f; }  // [0, 1)
};


// warp, warp_dense, sample_candidates, Candidates: select.h (the CPU backend's Ops::warp_rows is warp_dense).

class Sampler {
public:
    Sampler(const SamplingParams& sp, int vocab) : sp_(sp), rng_(sp.seed), vocab_(vocab) {}
    int sample(const float* logits);  // greedy if temperature == 0
    Rng& rng() { return rng_; }
    const SamplingParams& params() const { return sp_; }

private:
    SamplingParams sp_;
    Rng rng_;
    int vocab_;
    Candidates cand_;
};

}  // namespace beagle
