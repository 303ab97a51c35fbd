// sampling.cpp: see sampling.h. The softmax and top-p walk mirror run.c's sample()/sample_topp().
#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "../backend/cpu/simd.h"  // exp8_neg (host code: the logits are on the host here)

namespace beagle {

float log_sum_exp(const float* x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = std::max(mx, x[i]);
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, exp8_neg(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx)));
    float sum = hsum8(acc);
    for (; i < n; i++) sum += expf(x[i] - mx);
    return mx + logf(sum);
}

void top_k_indices(const float* x, int n, int k, int* out) {
    k = std::min(k, n);
    std::vector<float> val(k);
    int have = 0;
    for (int i = 0; i < n; i++) {
        if (have == k && !(x[i] > val[k - 1])) continue;  // ties keep the lower index
        int j = have < k ? have++ : k - 1;
        while (j > 0 && x[i] > val[j - 1]) {
            val[j] = val[j - 1];
            out[j] = out[j - 1];
            j--;
        }
        val[j] = x[i];
        out[j] = i;
    }
}

int argmax(const float* logits, int n) {
    // the maximum (8 lanes; NaN never wins: max_ps returns its second operand, the running max, then),
    // then the first index holding it
    int i = 0;
    float mx = n > 0 ? logits[0] : 0.0f;
    if (n >= 8) {
        __m256 vmx = _mm256_set1_ps(-INFINITY);
        for (; i + 8 <= n; i += 8) vmx = _mm256_max_ps(_mm256_loadu_ps(logits + i), vmx);
        alignas(32) float m8[8];
        _mm256_store_ps(m8, vmx);
        mx = m8[0];
        for (int j = 1; j < 8; j++) mx = std::max(mx, m8[j]);
    }
    for (; i < n; i++)
        if (logits[i] > mx) mx = logits[i];
    const __m256 target = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + i), target, _CMP_EQ_OQ));
        if (bits) return i + __builtin_ctz(bits);
    }
    for (; i < n; i++)
        if (logits[i] == mx) return i;
    return 0;  // no number at all (every logit NaN)
}

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
