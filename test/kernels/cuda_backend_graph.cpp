// cuda_backend_graph.cpp -> build/test/test_cuda_backend_graph: the target forwards the CUDA backend captures
// once as CUDA graphs and replays (CudaOps::step_begin, Llama::forward up to 64 tokens; docs/gpu.md "CUDA
// graphs: the plain step and the speculative round"; kernels in the CPU emulator) give the logits and true
// states of the same forwards run without graphs (BEAGLE_CUDA_GRAPH=0), bit for bit (memcmp): plain decode
// steps across a split-KV slice boundary, on a second KV sequence (its own graph), after a truncate, and
// verify passes of 2, 6 and 24 tokens (SmolLM2: 6) as chains and as trees (a graph per T and mask width,
// replayed at other n_past with other trees, as speculative rounds do), on stories260K and SmolLM2 Q4_1; on
// stories260K also more shapes than the backend keeps graphs for (evicted, then captured again). Each forward
// costs one graph launch (the head's 2 launches outside it) where the forward without graphs launches every
// kernel, and none allocates device memory (the captures included).
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/gpu/cuda_ops.h"
#include "io/model_file.h"
#include "model/llama.h"
#include "testlib.h"

using namespace beagle;

struct Run {
    std::unique_ptr<Ops> ops;
    std::unique_ptr<Llama> m;
    std::vector<std::vector<float>> logits, states;  // per forward
    long long step_launches = 0, step_graph_launches = 0, step_allocs = 0, forwards = 0;
};

static std::unique_ptr<Ops> cuda_ops(bool graphs) {
    setenv("BEAGLE_CUDA_GRAPH", graphs ? "1" : "0", 1);
    std::unique_ptr<Ops> ops = make_cuda_ops();
    unsetenv("BEAGLE_CUDA_GRAPH");
    return ops;
}

// Prefill `prompt` tokens on sequence 0, decode `steps` tokens (T = 1, logits and states down), then the
// same on sequence 1 (n_seq 2: its own graph), then truncate sequence 0 and decode 3 more.
static void run(Run& r, const ModelFile& mf, bool graphs, int prompt, int steps, const std::vector<int>& verify_T,
                bool sweep) {
    const LlamaConfig& c = mf.config;
    r.ops = cuda_ops(graphs);
    r.m.reset(new Llama(mf, *r.ops, prompt + steps + 128, 64, 2));
    uint64_t s = 777;
    auto token = [&] {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return (int)((s >> 33) % c.vocab_size);
    };
    // one forward of T tokens at the next positions (a tree: depth-first positions, each row seeing a random
    // ancestor chain of earlier rows and itself), every row's logits and states down
    auto forward = [&](int T, bool tree) {
        std::vector<int> toks(T), pos(T);
        const int words = tree ? (T + 63) / 64 : 0;
        std::vector<uint64_t> mask((size_t)T * words, 0);
        std::vector<int> depth(T, 0);
        for (int t = 0; t < T; t++) {
            toks[t] = token();
            if (tree && t > 0) {  // parent: a random earlier row; the row sees the parent's row and itself
                const int parent = token() % t;
                depth[t] = depth[parent] + 1;
                for (int w = 0; w < words; w++) mask[(size_t)t * words + w] = mask[(size_t)parent * words + w];
            }
            if (tree) mask[(size_t)t * words + t / 64] |= 1ULL << (t % 64);
            pos[t] = r.m->n_past() + (tree ? depth[t] : t);
        }
        std::vector<float> lg((size_t)T * c.vocab_size), st((size_t)T * c.dim);
        const DeviceCounters before = *r.ops->device_counters();
        r.m->forward(toks.data(), pos.data(), T, tree ? mask.data() : nullptr, words, lg.data(), T, st.data(), T);
        const DeviceCounters d = *r.ops->device_counters() - before;
        r.step_launches += d.launches;
        r.step_graph_launches += d.graph_launches;
        r.step_allocs += d.allocs;
        r.forwards++;
        r.logits.push_back(lg);
        r.states.push_back(st);
    };
    auto decode = [&](int n) {
        for (int i = 0; i < n; i++) forward(1, false);
    };
    // verify passes: each rejected but for its first token (truncate), as a speculative round keeps a prefix
    auto verify = [&](int T, bool tree) {
        for (int rep = 0; rep < 2; rep++) {
            const int n0 = r.m->n_past();
            forward(T, tree);
            r.m->truncate(n0 + 1);
        }
    };
    for (int seq : {0, 1}) {
        r.m->use_seq(seq);
        std::vector<int> toks(prompt);
        for (int& t : toks) t = token();
        r.m->prefill(toks.data(), prompt, nullptr);
        decode(steps);
    }
    r.m->use_seq(0);
    r.m->truncate(prompt - 2);
    decode(3);
    for (int T : verify_T)
        for (bool tree : {false, true}) verify(T, tree);
    decode(1);
    // 128 more shapes (2..33 tokens, chain and tree, on both sequences): with the 8 above, more than the
    // backend's 128 graph blocks, so the least recently launched (the first 8) are evicted; then those again,
    // captured anew
    if (!sweep) return;
    for (int seq = 0; seq < 2; seq++) {
        r.m->use_seq(seq);
        for (int T = 2; T <= 33; T++)
            for (bool tree : {false, true}) {
                const int n0 = r.m->n_past();
                forward(T, tree);
                r.m->truncate(n0);
            }
    }
    r.m->use_seq(0);
    for (int T : verify_T)
        for (bool tree : {false, true}) verify(T, tree);
    decode(1);
    r.m->use_seq(1);
    decode(1);
}

static void check_model(const std::string& path, int prompt, int steps, const std::vector<int>& verify_T, bool sweep) {
    std::unique_ptr<ModelFile> mf;
    try {
        mf = load_model(path);
    } catch (const Error& e) {
        SKIP_PART("%s: %s", path.c_str(), e.what());
        return;
    }
    Run plain, graph;
    run(plain, *mf, false, prompt, steps, verify_T, sweep);
    run(graph, *mf, true, prompt, steps, verify_T, sweep);
    const int n = (int)plain.logits.size();
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const bool same = !memcmp(plain.logits[i].data(), graph.logits[i].data(), plain.logits[i].size() * 4) &&
                          !memcmp(plain.states[i].data(), graph.states[i].data(), plain.states[i].size() * 4);
        if (!same && bad++ < 3) fprintf(stderr, "%s: forward %d: logits or states differ with the graph\n", path.c_str(), i);
    }
    CHECK(bad == 0, "%s: %d of %d forwards differ between the replayed graph and the direct launches", path.c_str(),
          bad, n);
    CHECK(plain.step_graph_launches == 0, "graphs off: %lld graph launches", plain.step_graph_launches);
    CHECK(graph.step_graph_launches == n, "%s: %lld graph launches for %d forwards", path.c_str(),
          graph.step_graph_launches, n);
    // with graphs: the graph + the head's RMSNorm and LM head per forward; without: every kernel of the layers too
    CHECK(graph.step_launches == 3LL * n, "%s: %lld launches for %d forwards with graphs, want 3 per forward",
          path.c_str(), graph.step_launches, n);
    // Llama's Ops::reserve sized every slot up front, the first captured step's included: no decode step
    // allocates, the capture neither (a missed slot, e.g. RoPE's, would grow during the capture)
    CHECK(graph.step_allocs == 0 && plain.step_allocs == 0, "%s: %lld / %lld cudaMallocs in the forwards with / "
          "without graphs, want 0", path.c_str(), graph.step_allocs, plain.step_allocs);
    const int layers = mf->config.n_layers;
    CHECK(plain.step_launches >= (long long)n * 9 * layers, "%s: %lld launches for %d steps without graphs", path.c_str(),
          plain.step_launches, n);
    printf("%s: %d forwards compared (%d differ); launches per forward %.1f without graphs, %.1f with (%lld graph launches)\n",
           path.c_str(), n, bad, (double)plain.step_launches / n, (double)graph.step_launches / n, graph.step_graph_launches);
}

int main() {
    check_model(test_models_dir() + "stories260K.bin", 250, 12, {2, 6, 24}, true);  // n_past 250..261: one slice, then two
    const char* model = getenv("BEAGLE_MODEL");
    check_model(model ? model : "weights/SmolLM2-135M-Instruct.Q4_1.gguf", 2, 1, {6}, false);  // emulated SmolLM2 is slow
    return test_summary("test_cuda_backend_graph");
}
