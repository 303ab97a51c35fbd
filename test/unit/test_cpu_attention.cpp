// test_cpu_attention.cpp: the CPU backend's target attention (src/backend/cpu/attention.cpp) in its two
// loop orders — per KV head (the group * T queries of a head share each block of cached K / V rows) and
// per query — gives the same bits, on causal and tree masks and per-sequence ranges (kv_start), head_dim 64 / 128, GQA groups 1 / 3 / 4,
// n_past 0 .. 300 (partial 8- and 16-key blocks), T 1 .. 40, 1 and 2 threads; each query equals the same
// query computed alone (T = 1 over the same visible keys: batch invariance at the op); and both agree
// with a float64 softmax reference (atol 1e-5 + rtol 1e-5: fp32 dots of <= 128 terms, a degree-7 exp
// polynomial of ~2 ulp, sums of <= 340 weights, as test_emu_kernels_attention).
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "testlib.h"

using namespace beagle;

struct Case {
    int T, n_heads, n_kv, hd, n_past;
    bool tree;
};

static bool visible(const std::vector<uint64_t>& tm, int words, int t, int j, bool tree) {
    return tree ? (tm[(size_t)t * words + j / 64] >> (j % 64) & 1) : j <= t;
}

// Each query t of o_head (c.T queries) against the same query computed alone (its visible keys, keys_of(t),
// copied to the first rows of a fresh cache, T = 1 causal: bits) and against a float64 softmax reference.
template <class KeysOf>
static void check_each_query(CpuOps& ops1, const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const std::vector<float>& o_head, const char* what,
                             KeysOf keys_of) {
    const int kv_dim = c.n_kv * c.hd, q_dim = c.n_heads * c.hd, group = c.n_heads / c.n_kv;
    int alone_bad = 0, ref_bad = 0;
    for (int t = 0; t < c.T; t++) {
        const std::vector<int> keys = keys_of(t);
        const int nk = (int)keys.size();
        std::vector<float> k1((size_t)nk * kv_dim), v1(k1.size()), o1(q_dim);
        for (int i = 0; i < nk; i++) {
            memcpy(&k1[(size_t)i * kv_dim], &k[(size_t)keys[i] * kv_dim], kv_dim * sizeof(float));
            memcpy(&v1[(size_t)i * kv_dim], &v[(size_t)keys[i] * kv_dim], kv_dim * sizeof(float));
        }
        AttnMask m1;
        m1.n_past = nk - 1;
        ops1.set_attention_per_query(false);
        ops1.attention(o1.data(), &q[(size_t)t * q_dim], k1.data(), v1.data(), 1, c.n_heads, c.n_kv, c.hd, m1);
        if (memcmp(o1.data(), &o_head[(size_t)t * q_dim], q_dim * sizeof(float)) != 0) alone_bad++;
        // float64 reference
        for (int h = 0; h < c.n_heads; h++) {
            const int kvh = h / group;
            std::vector<double> s(nk);
            double mx = -1e300, sum = 0;
            for (int i = 0; i < nk; i++) {
                double d = 0;
                for (int e = 0; e < c.hd; e++)
                    d += (double)q[(size_t)t * q_dim + h * c.hd + e] * k[(size_t)keys[i] * kv_dim + kvh * c.hd + e];
                s[i] = d / std::sqrt((double)c.hd);
                mx = std::max(mx, s[i]);
            }
            for (int i = 0; i < nk; i++) sum += (s[i] = std::exp(s[i] - mx));
            for (int e = 0; e < c.hd; e++) {
                double want = 0;
                for (int i = 0; i < nk; i++) want += s[i] / sum * v[(size_t)keys[i] * kv_dim + kvh * c.hd + e];
                const double got = o_head[(size_t)t * q_dim + h * c.hd + e];
                if (!(std::fabs(got - want) <= 1e-5 + 1e-5 * std::fabs(want))) {
                    if (ref_bad++ == 0) fprintf(stderr, "  %s: t %d head %d dim %d: got %.9g want %.9g\n", what, t, h, e, got, want);
                }
            }
        }
    }
    CHECK(alone_bad == 0, "%s: %d queries differ from the same query alone (bits)", what, alone_bad);
    CHECK(ref_bad == 0, "%s: %d outputs off the float64 reference", what, ref_bad);
}

// The op per KV head (returned) on 1 thread, on 2 threads and per query: the same bits (memcmp).
static std::vector<float> both_orders(CpuOps& ops1, CpuOps& ops2, const Case& c, const std::vector<float>& q,
                                      const std::vector<float>& k, const std::vector<float>& v, const AttnMask& m,
                                      const char* what) {
    std::vector<float> o_head((size_t)c.T * c.n_heads * c.hd), o_query(o_head.size()), o_2(o_head.size());
    ops1.set_attention_per_query(false);
    ops1.attention(o_head.data(), q.data(), k.data(), v.data(), c.T, c.n_heads, c.n_kv, c.hd, m);
    ops2.set_attention_per_query(false);
    ops2.attention(o_2.data(), q.data(), k.data(), v.data(), c.T, c.n_heads, c.n_kv, c.hd, m);
    ops1.set_attention_per_query(true);
    ops1.attention(o_query.data(), q.data(), k.data(), v.data(), c.T, c.n_heads, c.n_kv, c.hd, m);
    CHECK(memcmp(o_head.data(), o_query.data(), o_head.size() * sizeof(float)) == 0,
          "%s: per KV head != per query (bits)", what);
    CHECK(memcmp(o_head.data(), o_2.data(), o_head.size() * sizeof(float)) == 0, "%s: 2 threads != 1 (bits)", what);
    return o_head;
}

// n standard normal floats
static std::vector<float> randn(std::mt19937& rng, size_t n) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(n);
    for (auto& e : x) e = nd(rng);
    return x;
}

static void run_case(CpuOps& ops1, CpuOps& ops2, const Case& c, std::mt19937& rng) {
    const int kv_dim = c.n_kv * c.hd, q_dim = c.n_heads * c.hd;
    const int n_rows = c.n_past + c.T;
    const std::vector<float> q = randn(rng, (size_t)c.T * q_dim), k = randn(rng, (size_t)n_rows * kv_dim),
                             v = randn(rng, k.size());
    // tree: a random ancestor structure (each node's parent an earlier node or the root), self included
    const int words = (c.T + 63) / 64;
    std::vector<uint64_t> tm((size_t)c.T * words, 0);
    for (int t = 0; t < c.T; t++) {
        if (t > 0) {
            const int parent = (int)(rng() % t);
            for (int w = 0; w < words; w++) tm[(size_t)t * words + w] = tm[(size_t)parent * words + w];
        }
        tm[(size_t)t * words + t / 64] |= 1ull << (t % 64);
    }
    AttnMask m;
    m.n_past = c.n_past;
    if (c.tree) {
        m.tree_mask = tm.data();
        m.mask_words = words;
    }
    char what[160];
    snprintf(what, sizeof what, "T %d heads %d/%d hd %d n_past %d %s", c.T, c.n_heads, c.n_kv, c.hd, c.n_past,
             c.tree ? "tree" : "causal");
    const std::vector<float> o_head = both_orders(ops1, ops2, c, q, k, v, m, what);
    check_each_query(ops1, c, q, k, v, o_head, what, [&](int t) {
        std::vector<int> keys;
        for (int j = 0; j < c.n_past; j++) keys.push_back(j);
        for (int j = 0; j < c.T; j++)
            if (visible(tm, words, t, j, c.tree)) keys.push_back(c.n_past + j);
        return keys;
    });
}

// Per-sequence ranges (AttnMask::kv_start, batched decoding): query t sees cache rows [start_t, start_t +
// len_t) of a shared cache of n_rows rows, ranges of random start and length 1 .. n_rows (partial key
// blocks, overlapping ranges, tokens of one sequence sharing a prefix), checked as run_case does.
static void run_ranges_case(CpuOps& ops1, CpuOps& ops2, int T, int n_heads, int n_kv, int hd, int n_rows,
                            std::mt19937& rng) {
    const Case c{T, n_heads, n_kv, hd, 0, false};
    const std::vector<float> q = randn(rng, (size_t)T * n_heads * hd), k = randn(rng, (size_t)n_rows * n_kv * hd),
                             v = randn(rng, k.size());
    std::vector<int> start(T), len(T);
    for (int t = 0; t < T; t++) {
        start[t] = (int)(rng() % n_rows);
        len[t] = 1 + (int)(rng() % (n_rows - start[t]));
    }
    AttnMask m;
    m.kv_start = start.data();
    m.kv_len = len.data();
    char what[160];
    snprintf(what, sizeof what, "T %d heads %d/%d hd %d ranges over %d rows", T, n_heads, n_kv, hd, n_rows);
    const std::vector<float> o_head = both_orders(ops1, ops2, c, q, k, v, m, what);
    check_each_query(ops1, c, q, k, v, o_head, what, [&](int t) {
        std::vector<int> keys(len[t]);
        for (int i = 0; i < len[t]; i++) keys[i] = start[t] + i;
        return keys;
    });
}

int main() {
    CpuOps ops1(1), ops2(2);
    std::mt19937 rng(1234);
    int n = 0;
    const int heads[3][2] = {{9, 9}, {9, 3}, {8, 2}};  // GQA groups 1, 3 (SmolLM2-135M), 4
    for (int hd : {64, 128})
        for (const auto& hk : heads)
            for (int n_past : {0, 1, 7, 16, 37, 129, 300})
                for (int T : {1, 2, 4, 5, 8, 17, 40})
                    for (bool tree : {false, true}) {
                        if (sanitized_build() && (n_past == 300 || T == 40)) continue;  // ASan: the smaller shapes cover every path
                        run_case(ops1, ops2, {T, hk[0], hk[1], hd, n_past, tree}, rng);
                        n++;
                    }
    for (int hd : {64, 128})
        for (const auto& hk : heads)
            for (int n_rows : {1, 9, 40, 300})
                for (int T : {1, 3, 32}) {
                    if (sanitized_build() && n_rows == 300) continue;
                    run_ranges_case(ops1, ops2, T, hk[0], hk[1], hd, n_rows, rng);
                    n++;
                }
    printf("%d attention cases\n", n);
    // the environment's choice of order: a wrong value is an error naming what it expected
    setenv("BEAGLE_ATTN", "per-head", 1);
    CHECK_THROWS(CpuOps bad(1), "expected per-kv-head or per-query, found 'per-head'");
    unsetenv("BEAGLE_ATTN");
    return test_summary("cpu_attention");
}
