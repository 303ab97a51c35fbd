// draft_topk.cpp: analysis tool for scripts/sd_ceiling.sh and scripts/compare_stories260k.sh (not a
// test). Teacher-forced depth-1 predictions of a draft (Beagle or EAGLE) over `beagle datagen` data: for
// every generated position i of every sequence, the draft's query (token t_i at position i, keys = the
// true states f_0..f_{i-1}; EAGLE: with feature f_{i-1}, over its keys of positions 1..i) exactly
// as the speculative engine's first draft step runs it (Q8_0 matrices, the target's stored head, the keys
// of the last meta.seq_len true states: generate's default --draft-context), and
// one output line "seq i next top1 top2 top3 top4 top5 p1": next = t_{i+1}, top-k as target token ids,
// p1 = the draft's probability of its top-1. A last line "# in draft vocabulary: X of N" counts the positions
// whose next token a draft with a reduced vocabulary (d2t) can propose at all.
// Build and run: bash scripts/sd_ceiling.sh (`make build/test/draft_topk`, the tests' rule).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/backend.h"
#include "backend/ops.h"
#include "core/common.h"
#include "data/dataset.h"
#include "io/model_file.h"
#include "model/draft.h"
#include "model/llama.h"

using namespace beagle;

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: draft_topk MODEL DRAFT DATA_DIR [--f32]\n");
        return 2;
    }
    try {
        std::unique_ptr<ModelFile> mf = load_model(argv[1]);
        DraftWeights w = load_draft(argv[2]);
        Dataset ds(argv[3]);
        ds.check_fits(mf->config.dim, mf->config.vocab_size, ds.tokenizer_hash(), argv[1]);
        if (!ds.has_states()) fail("%s holds token ids only: make it with beagle datagen --keep-states", argv[3]);
        const bool f32 = argc > 4 && std::string(argv[4]) == "--f32";
        int ctx = 2;
        for (size_t s = 0; s < ds.n_seqs(); s++) ctx = std::max(ctx, ds.seq(s).len + 1);
        std::unique_ptr<Ops> ops = make_ops("", 2);
        Llama llama(*mf, *ops, ctx, 8);
        DraftFrozen fz = frozen_from_target(*mf, false);
        Draft d(w, fz, *ops, ctx, 8, 8);
        d.use_target_weights(llama.tok_embd_weight(), llama.lm_head_weight());
        if (!f32) d.use_q8_weights(w);
        d.set_true_window(draft_trained_seq_len(w));  // as BeagleDrafter with --draft-context -1
        const int D = ds.dim(), V = w.cfg.head_rows();
        // a draft with state layers takes wide rows [f; h_l1; ..]: the data must keep those layers
        const std::vector<int>& have = ds.state_layers();
        const std::vector<size_t> col = ds.layer_columns(w.cfg.state_layers);  // draft layer k -> the data's block
        const int W = D * (1 + (int)col.size());
        auto row = [&](const SeqView& v, int i, float* out) {  // the state row of position i
            for (int k = 0; k < D; k++) out[k] = f16_to_f32(v.states[(size_t)i * D + k]);
            for (size_t c = 0; c < col.size(); c++)
                for (int k = 0; k < D; k++)
                    out[(1 + c) * D + k] = f16_to_f32(v.extras[((size_t)i * have.size() + col[c]) * D + k]);
        };
        std::vector<float> st, lg(V);
        std::vector<int> idx(V);
        long positions = 0, in_vocab = 0;
        for (size_t s = 0; s < ds.n_seqs(); s++) {
            SeqView v = ds.seq(s);
            if (v.n_prompt < 1) continue;
            d.reset();
            st.resize((size_t)v.n_prompt * W);
            for (int i = 0; i < v.n_prompt; i++) row(v, i, &st[(size_t)i * W]);
            d.add_true_states(st.data(), v.n_prompt, v.tokens);  // (an EAGLE draft's keys need the tokens)
            for (int i = v.n_prompt; i + 1 < v.len; i++) {
                int tok = v.tokens[i], pos = i;
                d.forward(&tok, &pos, 1, nullptr, 1, nullptr, lg.data());
                for (int k = 0; k < V; k++) idx[k] = k;
                std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(),
                                  [&](int a, int b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
                double z = 0;
                for (int k = 0; k < V; k++) z += std::exp((double)lg[k] - lg[idx[0]]);
                printf("%zu %d %d", s, i, v.tokens[i + 1]);
                for (int k = 0; k < 5; k++) printf(" %d", w.d2t.empty() ? idx[k] : w.d2t[idx[k]]);
                printf(" %.4f\n", 1.0 / z);
                positions++;
                in_vocab += w.d2t.empty() || std::binary_search(w.d2t.begin(), w.d2t.end(), v.tokens[i + 1]);
                st.resize(W);
                row(v, i, st.data());
                d.add_true_states(st.data(), 1, v.tokens + i);
            }
        }
        printf("# in draft vocabulary: %ld of %ld\n", in_vocab, positions);
    } catch (const Error& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
