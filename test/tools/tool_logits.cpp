// tool_logits.cpp: a driver for Python oracle tests: runs the target on given token ids (causal,
// chunked) and writes every position's logits (f32, T x vocab) to a file; with --greedy N also
// prints N greedy continuation ids.  usage: tool_logits MODEL IDS(comma-separated) OUT [--greedy N]
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
        fprintf(stderr, "usage: tool_logits MODEL IDS OUT [--greedy N]\n");
        return 2;
    }
    try {
        std::unique_ptr<ModelFile> mf = load_model(argv[1]);
        std::vector<int> ids;
        for (char* p = argv[2]; *p;) {
            ids.push_back((int)strtol(p, &p, 10));
            if (*p == ',') p++;
        }
        int greedy = argc >= 6 && !strcmp(argv[4], "--greedy") ? atoi(argv[5]) : 0;
        int V = mf->config.vocab_size, T = (int)ids.size();
        std::unique_ptr<Ops> ops = make_cpu_ops(2);
        Llama m(*mf, *ops, T + greedy + 4, 64);
        std::vector<float> logits((size_t)T * V);
        std::vector<int> pos(T);
        for (int i = 0; i < T; i++) pos[i] = i;
        for (int b = 0; b < T; b += 64) {
            int n = std::min(64, T - b);
            m.forward(&ids[b], &pos[b], n, nullptr, 0, &logits[(size_t)b * V], n, nullptr, 0);
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
