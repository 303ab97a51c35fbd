// sampling.cpp: next-token selection of sampling.h (greedy argmax or a seeded run.c-style draw); the
// warp and the draw themselves are in src/backend/cpu/select.cpp.
#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>


namespace beagle {

int Sampler::sample(const float* logits) {
    if (sp_.temperature <= 0.0f) return argmax(logits, vocab_);
    warp(logits, vocab_, sp_, &cand_);
    float coin = rng_.next_f32();
    return sample_candidates(cand_, coin);
}

}  // namespace beagle
