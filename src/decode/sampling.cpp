// sampling.cpp: see sampling.h (the warp and the draw: select.cpp).
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
