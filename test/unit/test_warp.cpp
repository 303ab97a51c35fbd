// test_warp.cpp: the host's sampling distribution (warp, src/backend/cpu/select.cpp, 8 lanes where no bit can
// change) equals run.c's scalar loops, written out here (divide, max, expf, one float sum in id order,
// normalise, cut, stable sort, top-p walk), bit for bit: ids, probabilities and mass, on rows of 1 to
// 49,152 logits at several temperatures, top-k and top-p, with ties, NaN, -inf and +inf entries.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/select.h"
#include "core/rng.h"
#include "testlib.h"

using namespace beagle;

// run.c's sample() / sample_topp() arithmetic with the NaN / no-number rules of select.h, one element at a time.
static Candidates scalar_model(const float* logits, int n, const WarpParams& sp) {
    std::vector<float> p(logits, logits + n);
    for (int i = 0; i < n; i++) p[i] /= sp.temperature;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (p[i] > mx) mx = p[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        const float e = expf(p[i] - mx);
        p[i] = e == e ? e : 0.0f;
        sum += p[i];
    }
    Candidates c;
    if (!(sum > 0.0f)) {
        c.ids = {0};
        c.probs = {0.0f};
        return c;
    }
    for (int i = 0; i < n; i++) p[i] /= sum;
    const bool use_top_p = sp.top_p > 0.0f && sp.top_p < 1.0f;
    const float cutoff = use_top_p && n > 1 ? (1.0f - sp.top_p) / (n - 1) : 0.0f;
    for (int i = 0; i < n; i++)
        if (!use_top_p || p[i] >= cutoff) c.ids.push_back(i);
    if (use_top_p || sp.top_k > 0) std::stable_sort(c.ids.begin(), c.ids.end(), [&](int a, int b) { return p[a] > p[b]; });
    if (sp.top_k > 0 && (size_t)sp.top_k < c.ids.size()) {
        c.ids.resize(sp.top_k);
        float s = 0.0f;
        for (int id : c.ids) s += p[id];
        for (int id : c.ids) p[id] /= s;
    }
    size_t last = c.ids.size();
    float cum = 0.0f;
    for (size_t i = 0; i < c.ids.size(); i++) {
        cum += p[c.ids[i]];
        if (use_top_p && cum > sp.top_p) {
            last = i + 1;
            break;
        }
    }
    c.ids.resize(last);
    for (int id : c.ids) {
        c.probs.push_back(p[id]);
        c.total += p[id];
    }
    return c;
}

static bool same(const Candidates& a, const Candidates& b) {
    return a.ids == b.ids && a.probs.size() == b.probs.size() &&
           memcmp(a.probs.data(), b.probs.data(), a.probs.size() * sizeof(float)) == 0 &&
           memcmp(&a.total, &b.total, sizeof(float)) == 0;
}

int main() {
    TrainRng rng(5);
    int rows = 0;
    for (int n : {1, 3, 8, 9, 17, 512, 8192, 49152})
        for (int kind = 0; kind < 6; kind++) {
            std::vector<float> x(n);
            const double scale = kind == 1 ? 12.0 : 3.0;
            for (float& v : x) v = (float)(scale * rng.normal());
            if (kind == 2)  // ties: every value on a coarse grid
                for (float& v : x) v = std::round(v);
            if (kind == 3) {  // specials among numbers
                x[rng.below(n)] = NAN;
                x[rng.below(n)] = -INFINITY;
            }
            if (kind == 4) x[rng.below(n)] = INFINITY;  // no finite softmax: the single candidate 0
            if (kind == 5)                              // no number at all
                for (float& v : x) v = rng.below(2) ? NAN : -INFINITY;
            for (float temp : {0.3f, 0.8f, 1.0f, 1.7f})
                for (int top_k : {0, 5, 40})
                    for (float top_p : {0.5f, 0.9f, 1.0f}) {
                        WarpParams sp;
                        sp.temperature = temp;
                        sp.top_k = top_k;
                        sp.top_p = top_p;
                        Candidates got;
                        warp(x.data(), n, sp, &got);
                        const Candidates want = scalar_model(x.data(), n, sp);
                        CHECK(same(got, want), "n %d, row kind %d, temperature %g, top-k %d, top-p %g: %zu vs %zu candidates, "
                              "mass %.9g vs %.9g", n, kind, temp, top_k, top_p, got.ids.size(), want.ids.size(),
                              got.total, want.total);
                        rows++;
                    }
        }
    if (g_failures == 0) printf("warp == run.c's scalar loops on %d rows, bit for bit\n", rows);
    return test_summary("test_warp");
}
