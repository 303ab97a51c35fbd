// tool_logits.cpp: a driver for Python oracle tests: runs the target on given token ids (causal,
// chunked) and writes every position's logits (f32, T x vocab) to a file; with --greedy N also
// prints N greedy continuation ids; with --states L1,L2,.. FILE also the wide state rows (Llama::set_state_layers:
// f32, T x (1 + E) x dim: the last layer's output, then the residual stream after each listed layer).  usage: tool_logits MODEL IDS OUT [--greedy N] [--states LAYERS FILE]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "decode/sampling.h"
#include "io/model_file.h"
#include "model/llama.h"

using namespace beagle;

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: tool_logits MODEL IDS OUT [--greedy N] [--states LAYERS FILE]\n");
        return 2;
    }
    try {
        std::unique_ptr<ModelFile> mf = load_model(argv[1]);
        std::vector<int> ids;
        for (char* p = argv[2]; *p;) {
            ids.push_back((int)strtol(p, &p, 10));
            if (*p == ',') p++;
        }
        int greedy = 0;
        std::vector<int> layers;
        const char* states_out = nullptr;
        for (int a = 4; a + 1 < argc; a++) {
            if (!strcmp(argv[a], "--greedy")) greedy = atoi(argv[++a]);
            else if (!strcmp(argv[a], "--states") && a + 2 < argc) {
                for (char* p = argv[++a]; *p;) {
                    layers.push_back((int)strtol(p, &p, 10));
                    if (*p == ',') p++;
                }
                states_out = argv[++a];
            }
        }
        int V = mf->config.vocab_size, T = (int)ids.size();
        std::unique_ptr<Ops> ops = make_cpu_ops(2);
        Llama m(*mf, *ops, T + greedy + 4, 64);
        m.set_state_layers(layers);
        const size_t W = m.state_width();
        std::vector<float> logits((size_t)T * V), extras(states_out ? (size_t)T * W : 0);
        std::vector<int> pos(T);
        for (int i = 0; i < T; i++) pos[i] = i;
        for (int b = 0; b < T; b += 64) {
            int n = std::min(64, T - b);
            m.forward(&ids[b], &pos[b], n, nullptr, 0, &logits[(size_t)b * V], n,
                      states_out ? &extras[(size_t)b * W] : nullptr, n);
        }
        if (states_out) {
            FILE* f = fopen(states_out, "wb");
            if (!f || fwrite(extras.data(), sizeof(float), extras.size(), f) != extras.size()) return 3;
            fclose(f);
        }
        FILE* f = fopen(argv[3], "wb");
        if (!f || fwrite(logits.data(), sizeof(float), logits.size(), f) != logits.size()) return 3;
        fclose(f);
        std::vector<float> last(logits.end() - V, logits.end());
        for (int g = 0; g < greedy; g++) {
            int t = argmax(last.data(), V), p = m.n_past();
            printf("%s%d", g ? "," : "", t);
            m.forward(&t, &p, 1, nullptr, 0, last.data(), 1, nullptr, 0);
        }
        if (greedy) printf("\n");
    } catch (const Error& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
