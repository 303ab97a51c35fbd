// test_batch_invariance.cpp: a position's logits and true states are bit-identical (memcmp) whether
// computed alone (decode), inside prefill chunks of any size, among tree-verify tokens with other
// branches interleaved, after KV compaction of an accepted path, and with 1 or 2 threads, on the
// matmul ISA path BEAGLE_ISA selects (test/cli/test_isa_avx2.sh runs it again on the AVX2 path).
// Runs on stories260K (F32) and SmolLM2-135M (Q4_1/Q8_0). This is what makes greedy speculative
// decoding token-identical to plain greedy decoding.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/ops.h"
#include "io/model_file.h"
#include "model/llama.h"
#include "testlib.h"

using namespace beagle;

struct Rows {
    std::vector<float> logits, states;
};

static bool same(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void run_model(const std::string& path, int N) {
    printf("model %s\n", path.c_str());
    std::unique_ptr<ModelFile> mf = load_model(path);
    const LlamaConfig& c = mf->config;
    const int V = c.vocab_size, D = c.dim;
    std::vector<int> toks(N), pos(N);
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        toks[i] = (int)((r >> 33) % V);
        pos[i] = i;
    }
    // A: one token per forward, 1 thread
    std::unique_ptr<Ops> ops1 = make_cpu_ops(1);
    Rows A;
    A.logits.resize((size_t)N * V);
    A.states.resize((size_t)N * D);
    {
        Llama m(*mf, *ops1, N + 8, 64);
        for (int i = 0; i < N; i++) m.forward(&toks[i], &pos[i], 1, nullptr, 0, &A.logits[(size_t)i * V], 1, &A.states[(size_t)i * D], 1);
    }
    // B: chunked prefill with all rows out, chunk sizes 1..N, threads 1 and 2
    for (int threads : {1, 2}) {
        std::unique_ptr<Ops> ops = make_cpu_ops(threads);
        for (int chunk : {2, 5, 16, N}) {
            Llama m(*mf, *ops, N + 8, 64);
            std::vector<float> lg((size_t)N * V), stt((size_t)N * D);
            for (int b = 0; b < N; b += chunk) {
                int T = std::min(chunk, N - b);
                m.forward(&toks[b], &pos[b], T, nullptr, 0, &lg[(size_t)b * V], T, &stt[(size_t)b * D], T);
            }
            CHECK(same(lg.data(), A.logits.data(), lg.size()), "logits differ: chunk %d threads %d", chunk, threads);
            CHECK(same(stt.data(), A.states.data(), stt.size()), "states differ: chunk %d threads %d", chunk, threads);
        }
    }
    // C: tree verify. Prefix P tokens, then a tree of depth 4 whose path toks[P..P+3] is interleaved
    // with distractor siblings; the path's rows must equal A's rows at positions P..P+3.
    {
        std::unique_ptr<Ops> ops = make_cpu_ops(2);
        int P = N / 2;
        Llama m(*mf, *ops, N + 16, 64);
        m.prefill(toks.data(), P, nullptr);
        // nodes: 0 path d0, 1 sib d0, 2 path d1, 3 child of sib, 4 sib d1, 5 path d2, 6 path d3, 7 sib d3
        int parent[8] = {-1, -1, 0, 1, 0, 2, 5, 5};
        int depth[8] = {0, 0, 1, 1, 1, 2, 3, 3};
        int ntok[8] = {toks[P], (toks[P] + 1) % V, toks[P + 1], 7 % V, (toks[P + 1] + 3) % V, toks[P + 2], toks[P + 3], 11 % V};
        int npos[8];
        std::vector<uint64_t> mask(8, 0);
        for (int i = 0; i < 8; i++) {
            npos[i] = P + depth[i];
            for (int j = i; j >= 0; j = parent[j]) mask[i] |= 1ULL << j;
        }
        std::vector<float> lg((size_t)8 * V), stt((size_t)8 * D);
        m.forward(ntok, npos, 8, mask.data(), 1, lg.data(), 8, stt.data(), 8);
        int path[4] = {0, 2, 5, 6};
        for (int d = 0; d < 4; d++) {
            CHECK(same(&lg[(size_t)path[d] * V], &A.logits[(size_t)(P + d) * V], V), "tree logits differ at depth %d", d);
            CHECK(same(&stt[(size_t)path[d] * D], &A.states[(size_t)(P + d) * D], D), "tree states differ at depth %d", d);
        }
        // The checker sees the smallest possible difference: one verify row's logit one ulp off.
        std::vector<float> off(&lg[(size_t)path[2] * V], &lg[(size_t)path[2] * V] + V);
        off[V / 2] = nextafterf(off[V / 2], INFINITY);
        CHECK(!same(off.data(), &A.logits[(size_t)(P + 2) * V], V), "a verify row one ulp off was not caught");
        // accept the path, compact its KV rows, then decode on: must equal A
        int src[4] = {P + 0, P + 2, P + 5, P + 6};
        m.compact(src, 4, P);
        CHECK(m.n_past() == P + 4, "n_past after compact %d", m.n_past());
        std::vector<float> l1(V), s1(D);
        for (int i = P + 4; i < N; i++) {
            m.forward(&toks[i], &pos[i], 1, nullptr, 0, l1.data(), 1, s1.data(), 1);
            CHECK(same(l1.data(), &A.logits[(size_t)i * V], V), "logits after compaction differ at %d", i);
            CHECK(same(s1.data(), &A.states[(size_t)i * D], D), "states after compaction differ at %d", i);
        }
    }
}

// D: independent sequences batched together (datagen): sequence 0 replays toks; sequences 1, 2
// get other tokens; rows of sequence 0 must equal A.
static void run_multi(const std::string& path, int N) {
    std::unique_ptr<ModelFile> mf = load_model(path);
    const int V = mf->config.vocab_size, D = mf->config.dim;
    std::vector<int> toks(N), pos(N);
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        toks[i] = (int)((r >> 33) % V);
        pos[i] = i;
    }
    std::unique_ptr<Ops> ops = make_cpu_ops(2);
    std::vector<float> Al((size_t)N * V), As((size_t)N * D);
    {
        Llama m(*mf, *ops, N + 8, 64);
        for (int i = 0; i < N; i++) m.forward(&toks[i], &pos[i], 1, nullptr, 0, &Al[(size_t)i * V], 1, &As[(size_t)i * D], 1);
    }
    Llama m(*mf, *ops, N + 8, 64, 3);
    int done = 0, step = 0;
    while (done < N) {
        // sequence 0 advances by 1..4 tokens per call, sequences 1 and 2 by one each, interleaved
        int k = std::min(N - done, 1 + step % 4);
        std::vector<int> bt, bs;
        bt.push_back((7 * step + 3) % V);
        bs.push_back(1);
        for (int i = 0; i < k; i++) {
            bt.push_back(toks[done + i]);
            bs.push_back(0);
        }
        bt.push_back((11 * step + 5) % V);
        bs.push_back(2);
        int T = (int)bt.size();
        std::vector<float> lg((size_t)T * V), st((size_t)T * D);
        m.forward_multi(bt.data(), bs.data(), T, lg.data(), st.data());
        for (int i = 0; i < k; i++) {
            CHECK(same(&lg[(size_t)(1 + i) * V], &Al[(size_t)(done + i) * V], V), "multi logits differ at %d", done + i);
            CHECK(same(&st[(size_t)(1 + i) * D], &As[(size_t)(done + i) * D], D), "multi states differ at %d", done + i);
        }
        done += k;
        step++;
    }
    CHECK(m.seq_len(0) == N && m.seq_len(1) == step && m.seq_len(2) == step, "sequence lengths");
}

int main() {
    const char* model = getenv("BEAGLE_MODEL");
    const std::string M = test_models_dir();
    printf("matmul ISA path: %s (BEAGLE_ISA=%s)\n", cpu_matmul_isa(), getenv("BEAGLE_ISA") ? getenv("BEAGLE_ISA") : "");
    try {
        run_model(M + "stories260K.bin", 40);
        run_model(M + "stories260K.gguf", 24);
        run_model(model ? model : "weights/SmolLM2-135M-Instruct.Q4_1.gguf", 60);  // > 40 keys: several 8-key score blocks, a tail, row prefetches
        run_multi(M + "stories260K.bin", 30);
        run_multi(model ? model : "weights/SmolLM2-135M-Instruct.Q4_1.gguf", 12);
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("batch_invariance");
}
