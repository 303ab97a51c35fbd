// select.cpp: the host's row selections of select.h (argmax, top-k, logsumexp, the sampling warp and
// its draw); CpuOps::topk_rows and warp_rows (ops.h) on top of them.
#include "select.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../../core/common.h"
#include "cpu_ops.h"
#include "simd.h"  // exp8_neg, hsum8, hmax8

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

double log_sum_exp_f64(const float* x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = std::max(mx, x[i]);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += std::exp((double)x[i] - (double)mx);
    return (double)mx + std::log(sum);
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
        mx = hmax8(vmx);
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

// ---- sampling (the softmax and top-p walk mirror run.c's sample() / sample_topp())
// The elementwise steps run 8 lanes at a time where that cannot change a bit (a division and the maximum
// are exact per element; NaN never wins the maximum); expf stays libm's, one call per element, and the sum
// stays one float chain in id order: the same numbers as run.c's loops. The probabilities live in a
// per-thread buffer (a fresh 49,152-float vector per token would be an mmap and 48 page faults).
void warp(const float* logits, int n, const WarpParams& sp, Candidates* out) {
    // softmax(logits / temperature), as run.c: divide, subtract max, expf, normalise
    // as cuda/sample.cu: a NaN logit gets p = 0, and a row without a number (every logit NaN or -inf, or
    // a +inf one: no finite softmax) gets the single candidate 0 with mass 0 (sample_candidates draws id 0,
    // warp_dense gives p = 0), never NaN probabilities. On rows of numbers this is run.c's arithmetic.
    static thread_local std::vector<float> pbuf;
    if (pbuf.size() < (size_t)n) pbuf.resize(n);
    float* p = pbuf.data();
    const __m256 vt = _mm256_set1_ps(sp.temperature);
    __m256 vmx = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_div_ps(_mm256_loadu_ps(logits + i), vt);
        _mm256_storeu_ps(p + i, v);
        vmx = _mm256_max_ps(v, vmx);  // a NaN v gives the second operand: NaN never wins
    }
    float mx = hmax8(vmx);
    for (; i < n; i++) {
        p[i] = logits[i] / sp.temperature;
        if (p[i] > mx) mx = p[i];
    }
    for (i = 0; i < n; i++) {  // (no running sum in this loop: it would live on the stack across the calls)
        const float e = expf(p[i] - mx);
        p[i] = e == e ? e : 0.0f;  // NaN logit, or inf - inf
    }
    float sum = 0.0f;
    for (i = 0; i < n; i++) sum += p[i];
    out->ids.clear();
    out->probs.clear();
    if (!(sum > 0.0f)) {
        out->ids.push_back(0);
        out->probs.push_back(0.0f);
        out->total = 0.0f;
        return;
    }
    const __m256 vsum = _mm256_set1_ps(sum);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(p + i, _mm256_div_ps(_mm256_loadu_ps(p + i), vsum));
    for (; i < n; i++) p[i] /= sum;

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

void warp_dense(const float* logits, int n, const WarpParams& sp, std::vector<float>* p) {
    Candidates c;
    warp(logits, n, sp, &c);
    p->assign(n, 0.0f);
    if (c.total > 0.0f)
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

int draw_dense(const float* p, int n, float coin) {
    float cdf = 0.0f;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (!(p[i] > 0.0f)) continue;
        cdf += p[i];
        last = i;
        if (coin < cdf) return i;
    }
    return last;
}

// Row by row with the functions above: the same ids and values as computing them from downloaded
// logits, bit for bit. Backend buffers are host memory: on_backend changes nothing.
void CpuOps::topk_rows(int* idx, float* val, float* lse, const float* x, int rows, int n_cols, int k, bool on_backend) {
    BEAGLE_CHECK(!on_backend || (!val && !lse), "topk_rows: on the backend only the ids are written");
    for (int r = 0; r < rows; r++) {
        const float* xr = x + (size_t)r * n_cols;
        int* ir = idx + (size_t)r * k;
        if (k == 1) ir[0] = argmax(xr, n_cols);
        else {
            const int kk = std::min(k, n_cols);
            top_k_indices(xr, n_cols, kk, ir);
            for (int j = kk; j < k; j++) ir[j] = -1;
        }
        if (val)
            for (int j = 0; j < k; j++) val[(size_t)r * k + j] = ir[j] >= 0 ? xr[ir[j]] : -INFINITY;
        if (lse) lse[r] = log_sum_exp(xr, n_cols);
    }
}

// Row by row: warp_dense and draw_dense, the host's sampling math on the same floats (the drafter's and the
// acceptance's host loops computed exactly these).
void CpuOps::warp_rows(float* p, int* ids, const float* coins, const float* x, int rows, int n_cols, const WarpParams& wp) {
    BEAGLE_CHECK(wp.temperature > 0, "warp_rows: temperature %g (greedy rows have no distribution)", wp.temperature);
    std::vector<float> row;
    for (int r = 0; r < rows; r++) {
        warp_dense(x + (size_t)r * n_cols, n_cols, wp, &row);
        std::copy(row.begin(), row.end(), p + (size_t)r * n_cols);
        if (coins) ids[r] = draw_dense(row.data(), n_cols, coins[r]);
    }
}

// One depth of the dynamic tree (ops.h tree_expand) in plain loops: the same top-k and logsumexp as
// topk_rows, the same float expression for the scores as the drafter's host loop, the next queries by
// rank (a child's rank = the children before it in (key desc, index asc) order; keys are distinct pairs, so
// ranks are too). cuda/tree.cu's tree_expand_kernel is the same procedure on one block.
void CpuOps::tree_expand(const float* logits, int n_cols, const TreeExpandArgs& a) {
    const int m = a.n * a.k;
    BEAGLE_CHECK(a.n >= 1 && a.k >= 1 && a.n_next >= 0 && a.n_next <= m, "tree_expand: n %d k %d n_next %d", a.n, a.k,
                 a.n_next);
    BEAGLE_CHECK(a.depth == 0 ? a.n == 1 : a.rows != nullptr, "tree_expand: depth %d with %d rows and no row list",
                 a.depth, a.n);
    std::vector<int> idx((size_t)m);
    std::vector<float> val((size_t)m), lse((size_t)a.n);
    topk_rows(idx.data(), val.data(), lse.data(), logits, a.n, n_cols, a.k);
    TreeNode* nd = a.nodes;
    for (int e = 0; e < m; e++) {
        const int i = e / a.k, p = a.depth == 0 ? 0 : a.rows[i];
        const float ps = a.depth == 0 ? 0.0f : nd[p].score;
        const int alive = a.depth == 0 ? 1 : (nd[p].live && !(ps < a.min_score));
        nd[a.n_nodes + e] = {idx[e], p, ps + (val[e] - lse[i]), alive};
    }
    auto key = [&](int e) {
        const TreeNode& c = nd[a.n_nodes + e];
        return c.live && !std::isnan(c.score) ? c.score : -INFINITY;
    };
    for (int e = 0; e < m && a.n_next > 0; e++) {
        const float ke = key(e);
        int rank = 0;
        for (int f = 0; f < m; f++) {
            const float kf = key(f);
            rank += kf > ke || (kf == ke && f < e);
        }
        if (rank >= a.n_next) continue;
        const int i = e / a.k;
        a.rows_next[rank] = a.n_nodes + e;
        a.ids_next[rank] = std::max(nd[a.n_nodes + e].tok, 0);
        for (int w = 0; w < a.words; w++) {
            uint64_t bits = a.mask ? a.mask[(size_t)i * a.words + w] : 0;
            if (a.base >= 0 && (a.base + i) / 64 == w) bits |= 1ULL << ((a.base + i) % 64);
            a.mask_next[(size_t)rank * a.words + w] = bits;
        }
    }
}

}  // namespace beagle
