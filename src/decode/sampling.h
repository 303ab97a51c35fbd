// sampling.h: turning logits into the next token: greedy argmax, or temperature -> top-k -> top-p
// truncation -> a draw from a seeded RNG. The draw follows karpathy's run.c exactly (xorshift64*
// coin, top-p cut-off and cumulative walk), so seeded samples of llama2.c models reproduce run.c.
// warp() exposes the truncated distribution itself: speculative sampling needs p and q as vectors.
#pragma once
#include <cstdint>
#include <vector>

#include "../backend/cpu/select.h"  // argmax, log_sum_exp, top_k_indices

namespace beagle {

struct SamplingParams {
    float temperature = 0.8f;  // 0 = greedy
    int top_k = 0;             // 0 = off
    float top_p = 0.9f;        // >= 1 or <= 0 = off
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


// The sampling distribution after temperature/top-k/top-p, as candidates sorted by decreasing
// probability (ties: lower id first) with probabilities summing to `total` (not renormalised,
// as run.c draws coin * total).
struct Candidates {
    std::vector<int> ids;
    std::vector<float> probs;
    float total = 0.0f;
};
void warp(const float* logits, int n, const SamplingParams& sp, Candidates* out);
// Dense normalised distribution over the vocabulary (zeros outside the kept candidates).
void warp_dense(const float* logits, int n, const SamplingParams& sp, std::vector<float>* p);
int sample_candidates(const Candidates& c, float coin);

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
