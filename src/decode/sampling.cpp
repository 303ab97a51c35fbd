// sampling.cpp: see sampling.h. The softmax and top-p walk mirror run.c's sample()/sample_topp().
#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>


namespace beagle {

void warp(const float* logits, int n, const SamplingParams& sp, Candidates* out) {
    // softmax(logits / temperature), as run.c: divide, subtract max, expf, normalise
    std::vector<float> p(logits, logits + n);
    for (int i = 0; i < n; i++) p[i] /= sp.temperature;
    float mx = p[0];
    for (int i = 1; i < n; i++) mx = std::max(mx, p[i]);
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        p[i] = expf(p[i] - mx);
        sum += p[i];
    }
    for (int i = 0; i < n; i++) p[i] /= sum;

    out->ids.clear();
    out->probs.clear();
    bool use_top_p = sp.top_p > 0.0f && sp.top_p < 1.0f;
    // run.c pre-filter: values below (1 - top_p) / (n - 1) cannot be in the nucleus
    float cutoff = use_top_p && n > 1 ? (1.0f - sp.top_p) / (n - 1) : 0.0f;
    for (int i = 0; i < n; i++)
        if (!use_top_p || p[i] >= cutoff) out->ids.push_back(i);
    // with no truncation run.c walks the CDF in id order; with truncation, by decreasing probability
    if (use_top_p || sp.top_k > 0)
        std::stable_sort(out->ids.begin(), out->ids.end(), [&](int a, int b) { return p[a] > p[b]; });
    if (sp.top_k > 0 && (size_t)sp.top_k < out->ids.size()) {
        // top-k: renormalise over the k best before top-p
        out->ids.resize(sp.top_k);
        float s = 0.0f;
        for (int id : out->ids) s += p[id];
        for (int id : out->ids) p[id] /= s;
    }
    size_t last = out->ids.size();
    float cum = 0.0f;
    for (size_t i = 0; i < out->ids.size(); i++) {
        cum += p[out->ids[i]];
        if (use_top_p && cum > sp.top_p) {
            last = i + 1;
            break;
        }
    }
    out->ids.resize(last);
    out->total = 0.0f;
    for (int id : out->ids) {
        out->probs.push_back(p[id]);
        out->total += p[id];
    }
}

void warp_dense(const float* logits, int n, const SamplingParams& sp, std::vector<float>* p) {
    Candidates c;
    warp(logits, n, sp, &c);
    p->assign(n, 0.0f);
    for (size_t i = 0; i < c.ids.size(); i++) (*p)[c.ids[i]] = c.probs[i] / c.total;
}

int sample_candidates(const Candidates& c, float coin) {
    float r = coin * c.total, cdf = 0.0f;
    for (size_t i = 0; i < c.ids.size(); i++) {
        cdf += c.probs[i];
        if (r < cdf) return c.ids[i];
    }
    return c.ids.back();
}

int Sampler::sample(const float* logits) {
    if (sp_.temperature <= 0.0f) return argmax(logits, vocab_);
    warp(logits, vocab_, sp_, &cand_);
    float coin = rng_.next_f32();
    return sample_candidates(cand_, coin);
}

}  // namespace beagle
