// cuda_backend_graph.cpp -> build/test/test_cuda_backend_graph: the plain decode step the CUDA backend
// captures once as a CUDA graph and replays (CudaOps::step_begin, Llama::forward at T = 1; docs/gpu.md
// "CUDA graphs of the plain decode step"; kernels in the CPU emulator) gives the logits and true states of
// the same step run without graphs (BEAGLE_CUDA_GRAPH=0), bit for bit (memcmp), at every step: across a
// split-KV slice boundary, on a second KV sequence (its own graph), after a truncate, and on SmolLM2 Q4_1. It costs
// one graph launch per step (the head's 2 launches outside it) where the step without graphs launches
// every kernel, and no decode step allocates device memory (the capture included).
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
    std::vector<std::vector<float>> logits, states;  // per decode step
    long long step_launches = 0, step_graph_launches = 0, step_allocs = 0;
};

static std::unique_ptr<Ops> cuda_ops(bool graphs) {
    setenv("BEAGLE_CUDA_GRAPH", graphs ? "1" : "0", 1);
    std::unique_ptr<Ops> ops = make_cuda_ops();
    unsetenv("BEAGLE_CUDA_GRAPH");
    return ops;
}

// Prefill `prompt` tokens on sequence 0, decode `steps` tokens (T = 1, logits and states down), then the
// same on sequence 1 (n_seq 2: its own graph), then truncate sequence 0 and decode 3 more.
static void run(Run& r, const ModelFile& mf, bool graphs, int prompt, int steps) {
    const LlamaConfig& c = mf.config;
    r.ops = cuda_ops(graphs);
    r.m.reset(new Llama(mf, *r.ops, prompt + steps + 8, 64, 2));
    uint64_t s = 777;
    auto token = [&] {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return (int)((s >> 33) % c.vocab_size);
    };
    auto decode = [&](int n) {
        for (int i = 0; i < n; i++) {
            int tok = token(), pos = r.m->n_past();
            std::vector<float> lg(c.vocab_size), st(c.dim);
            const DeviceCounters before = *r.ops->device_counters();
            r.m->forward(&tok, &pos, 1, nullptr, 0, lg.data(), 1, st.data(), 1);
            const DeviceCounters d = *r.ops->device_counters() - before;
            r.step_launches += d.launches;
            r.step_graph_launches += d.graph_launches;
            r.step_allocs += d.allocs;
            r.logits.push_back(lg);
            r.states.push_back(st);
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
}

static void check_model(const std::string& path, int prompt, int steps) {
    std::unique_ptr<ModelFile> mf;
    try {
        mf = load_model(path);
    } catch (const Error& e) {
        SKIP_PART("%s: %s", path.c_str(), e.what());
        return;
    }
    Run plain, graph;
    run(plain, *mf, false, prompt, steps);
    run(graph, *mf, true, prompt, steps);
    const int n = (int)plain.logits.size();
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const bool same = !memcmp(plain.logits[i].data(), graph.logits[i].data(), plain.logits[i].size() * 4) &&
                          !memcmp(plain.states[i].data(), graph.states[i].data(), plain.states[i].size() * 4);
        if (!same && bad++ < 3) fprintf(stderr, "%s: step %d: logits or states differ with the graph\n", path.c_str(), i);
    }
    CHECK(bad == 0, "%s: %d of %d decode steps differ between the replayed graph and the direct launches", path.c_str(),
          bad, n);
    CHECK(plain.step_graph_launches == 0, "graphs off: %lld graph launches", plain.step_graph_launches);
    CHECK(graph.step_graph_launches == n, "%s: %lld graph launches for %d steps", path.c_str(), graph.step_graph_launches, n);
    // with graphs: the graph + the head's RMSNorm and LM head per step; without: every kernel of the layers too
    CHECK(graph.step_launches == 3LL * n, "%s: %lld launches for %d steps with graphs, want 3 per step", path.c_str(),
          graph.step_launches, n);
    // Llama's Ops::reserve sized every slot up front, the first captured step's included: no decode step
    // allocates, the capture neither (a missed slot, e.g. RoPE's, would grow during the capture)
    CHECK(graph.step_allocs == 0 && plain.step_allocs == 0, "%s: %lld / %lld cudaMallocs in the decode steps with / "
          "without graphs, want 0", path.c_str(), graph.step_allocs, plain.step_allocs);
    const int layers = mf->config.n_layers;
    CHECK(plain.step_launches >= (long long)n * 9 * layers, "%s: %lld launches for %d steps without graphs", path.c_str(),
          plain.step_launches, n);
    printf("%s: %d decode steps compared (%d differ); launches per step %.1f without graphs, %.1f with (%lld graph launches)\n",
           path.c_str(), n, bad, (double)plain.step_launches / n, (double)graph.step_launches / n, graph.step_graph_launches);
}

int main() {
    check_model(test_models_dir() + "stories260K.bin", 250, 12);  // n_past 250..261: one slice, then two
    const char* model = getenv("BEAGLE_MODEL");
    check_model(model ? model : "weights/SmolLM2-135M-Instruct.Q4_1.gguf", 2, 1);  // emulated SmolLM2 steps are slow
    return test_summary("test_cuda_backend_graph");
}
