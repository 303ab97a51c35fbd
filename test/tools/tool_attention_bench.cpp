// tool_attention_bench.cpp: the CPU target attention alone, in its two loop orders side by side (per KV
// head, the default, and per query: attention.cpp), for SmolLM2-135M's shape (9 heads, 3 KV heads,
// head_dim 64, 30 layers of cache) at a verify pass (T new tokens after n_past, chain tree mask) or a
// causal prefill chunk; prints one JSON object with the best-of-R milliseconds of all 30 layers per order.
// usage: tool_attention_bench [THREADS] [REPS]   (docs/benchmarks/cpu.md, notes)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"

using namespace beagle;

int main(int argc, char** argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 200;
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "usage: tool_attention_bench [THREADS >= 1] [REPS >= 1]\n");
        return 2;
    }
    const int H = 9, KVH = 3, D = 64, L = 30, kv_dim = KVH * D, max_rows = 512;
    CpuOps ops(threads);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<std::vector<float>> K(L), V(L);  // separate buffers per layer, as the model's caches
    for (int l = 0; l < L; l++) {
        K[l].resize((size_t)max_rows * kv_dim);
        V[l].resize(K[l].size());
        for (auto& x : K[l]) x = u(rng);
        for (auto& x : V[l]) x = u(rng);
    }
    struct Shape { int T, n_past; bool tree; const char* what; };
    const Shape shapes[] = {{1, 128, false, "decode"},  {4, 128, true, "verify"}, {8, 128, true, "verify"},
                            {16, 128, true, "verify"},  {4, 384, true, "verify"}, {128, 0, false, "prefill"}};
    printf("{\"threads\": %d, \"reps\": %d, \"layers\": %d, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, \"cases\": [\n",
           threads, reps, L, H, KVH, D);
    bool first = true;
    for (const Shape& s : shapes) {
        std::vector<float> q((size_t)s.T * H * D), o(q.size());
        for (auto& x : q) x = u(rng);
        const int words = (s.T + 63) / 64;
        std::vector<uint64_t> chain((size_t)s.T * words, 0);
        for (int t = 0; t < s.T; t++)  // a chain: token t sees new tokens 0..t
            for (int j = 0; j <= t; j++) chain[(size_t)t * words + j / 64] |= 1ull << (j % 64);
        AttnMask m;
        m.n_past = s.n_past;
        if (s.tree) {
            m.tree_mask = chain.data();
            m.mask_words = words;
        }
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < reps; r++)
            for (int order = 0; order < 2; order++) {  // alternated, so drift from neighbours hits both
                ops.set_attention_per_query(order == 1);
                const auto t0 = std::chrono::steady_clock::now();
                for (int l = 0; l < L; l++) ops.attention(o.data(), q.data(), K[l].data(), V[l].data(), s.T, H, KVH, D, m);
                best[order] = std::min(best[order], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
        printf("%s  {\"what\": \"%s\", \"T\": %d, \"n_past\": %d, \"per_kv_head_ms\": %.4f, \"per_query_ms\": %.4f, "
               "\"ratio\": %.3f}",
               first ? "" : ",\n", s.what, s.T, s.n_past, best[0] * 1e3, best[1] * 1e3, best[1] / best[0]);
        first = false;
    }
    printf("\n]}\n");
    return 0;
}
