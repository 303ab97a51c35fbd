// test_moa_draft.cpp: the Mixture of Attentions draft (arch moa, docs/method.md section 4): its training forward
// and its inference in Draft compute the same thing, bit for bit, and its file and misuse fail clearly.
//  1. teacher-forced chain == the trainer's T-step bounded rows: a Draft holding the true states of positions
//     < P (LSA keys, the tokens' self-attention cache), queried at P, P+1, P+2 with the true tokens as a chain
//     (each query seeing its kept ancestors' self-attention rows and its own), gives the f^ and logits of the
//     trainer's rows P, P+1, P+2 under the window starting at P (they see the keys j < P): memcmp.
//     Lazy chunks: the true states added in pieces give the same bits as the trainer's one pass.
//  2. tree: two siblings in one forward, keep_pred {1}: the kept row's child equals the child of a draft
//     that ran that sibling alone, and the trainer's row on that path (memcmp).
//  3. misuse: true states without tokens, a MoA config without state layers -> Error.
//  4. the file: "arch moa" round trip with its LSA and self-attention tensors, a damaged arch line fails.
// A planted bug in Draft::moa_forward that hid the last true token's self-attention key from the queries
// (set 0 of nt - 1 rows) was caught: 25 of the 59 checks failed (chains and the tree path).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/common.h"
#include "core/rng.h"
#include "draft_fixture.h"
#include "model/draft.h"
#include "testlib.h"
#include "train/trainer.h"

using namespace beagle;

int main() {
    DraftConfig c = ragged_draft_config(ARCH_MOA);
    c.state_layers = {0, 2};
    c.target_n_layers = 4;
    DraftWeights dw;
    dw.init_random(c, 5);
    CHECK(dw.t[DT_MIX].empty() && dw.t[DT_FC_E].empty() && dw.t[DT_LSA_Q].size() == 1600 && dw.t[DT_SA_O].size() == 1600,
          "a MoA draft has the Beagle block, its self-attention and LSA, no w_mix or fc");
    TrainRng rng(11);
    for (int i = 0; i < DT_COUNT; i++)
        if (draft_tensor_is_norm(i))
            for (float& x : dw.t[i]) x = (float)(1 + 0.3 * rng.normal());
    const DraftFrozen fz = random_frozen(c, rng);
    const int T = 23, dim = c.dim, V = c.vocab_size, E = c.n_extra(), W = (1 + E) * dim;
    std::vector<int> tokens(T);
    std::vector<float> states((size_t)T * dim), extras((size_t)T * E * dim), wide((size_t)T * W);
    for (int& t : tokens) t = rng.below(V);
    for (float& x : states) x = (float)rng.normal();
    for (float& x : extras) x = (float)rng.normal();
    for (int p = 0; p < T; p++) {  // Draft's rows: [f; h_l1; h_l2] per position
        memcpy(&wide[(size_t)p * W], &states[(size_t)p * dim], dim * 4);
        memcpy(&wide[(size_t)p * W + dim], &extras[(size_t)p * E * dim], (size_t)E * dim * 4);
    }

    CpuOps ops(2);
    DraftModelT<Ops> m(ops, dw, fz);
    TrainOptions opt;
    opt.noise_std = 0;  // inference has no noise
    opt.w = 3;
    // the trainer's f^ and logits of its rows under window offset `off`, on (toks, states)
    auto train_rows = [&](const std::vector<int>& toks, int off, std::vector<TrainCaptureT<float>::Row>* rows) {
        DraftTrainer tr(m, opt);
        TrainBatch b;
        b.tokens = toks.data();
        b.states = states.data();
        b.extras = extras.data();
        b.T = T;
        TrainCaptureT<float> cap;
        tr.capture = &cap;
        tr.run(b, off, 1, 1.0f, false);
        *rows = cap.rows;
    };
    auto find_row = [](const std::vector<TrainCaptureT<float>::Row>& rows, int q) -> const TrainCaptureT<float>::Row* {
        for (const auto& r : rows)
            if (r.row == q) return &r;
        return nullptr;
    };

    // ---- 1. teacher-forced chains == the trainer's rows of the window starting at P
    int compared = 0;
    for (int P : {4, 9, 10, 17}) {
        std::vector<TrainCaptureT<float>::Row> rows;
        train_rows(tokens, P % opt.w, &rows);
        Draft d(dw, fz, ops, T, 8, 4);
        const int half = P / 2;  // lazy chunks: two pieces
        d.add_true_states(wide.data(), half, tokens.data());
        d.add_true_states(wide.data() + (size_t)half * W, P - half, tokens.data() + half);
        uint64_t bits = 0;
        for (int k = 0; k < opt.w; k++) {
            const int p = P + k, zero = 0;
            std::vector<float> fh(dim), lg(V);
            d.forward(&tokens[p], &p, 1, k ? &bits : nullptr, 1, fh.data(), lg.data());
            const TrainCaptureT<float>::Row* r = find_row(rows, p);
            CHECK(r && !memcmp(fh.data(), r->fh.data(), dim * 4), "chain depth %d at %d: f^ != training row %d", k + 1, p, p);
            CHECK(r && !memcmp(lg.data(), r->logits.data(), V * 4), "chain depth %d at %d: logits != training row", k + 1, p);
            bits |= 1ULL << d.keep_pred(&zero, 1);
            compared++;
        }
    }
    CHECK(compared == 12, "compared %d chain steps", compared);

    // ---- 2. tree: siblings a, b under the root at P; keep only b; b's child
    {
        const int P = 9, a = (tokens[P + 1] + 5) % V, b = (tokens[P + 1] + 7) % V, cc = tokens[P + 2];
        auto tree_child = [&](bool both) {
            return draft_tree_child(dw, fz, ops, T, wide.data(), tokens.data(), P, a, b, cc, both);
        };
        auto both = tree_child(true), alone = tree_child(false);
        CHECK(!memcmp(both.first.data(), alone.first.data(), dim * 4), "sibling b's f^ depends on its sibling a");
        CHECK(!memcmp(both.second.data(), alone.second.data(), dim * 4),
              "b's child after keep_pred {1} of (a, b) != b's child when b ran alone (the kept row moved wrong)");
        std::vector<int> path = tokens;
        path[P + 1] = b;  // the sequence root, b, child
        std::vector<TrainCaptureT<float>::Row> rows;
        train_rows(path, P % opt.w, &rows);
        const TrainCaptureT<float>::Row* r = find_row(rows, P + 2);
        CHECK(r && !memcmp(alone.second.data(), r->fh.data(), dim * 4), "tree child != training row on the tree path");
    }

    // ---- 3. misuse
    {
        Draft e(dw, fz, ops, T, 8, 4);
        CHECK_THROWS(e.add_true_states(wide.data(), 1), "needs the tokens");
        DraftConfig bad = c;
        bad.state_layers.clear();
        CHECK_THROWS(bad.validate("test"), "at least one target layer besides the last");
    }

    // ---- 4. the file
    {
        std::string path = "build/test/moa_draft_test.bin";
        dw.meta = {{"note", "test"}};
        save_draft(path, dw);
        std::string bytes = slurp(path);
        CHECK(bytes.find("arch moa\n") != std::string::npos, "a MoA file records its architecture");
        DraftWeights r = load_draft(path);
        CHECK(r.cfg.arch == ARCH_MOA && r.cfg.state_layers == c.state_layers, "loaded arch %d", r.cfg.arch);
        for (int i = 0; i < DT_COUNT; i++) CHECK(r.t[i] == dw.t[i], "tensor %s round trip", draft_tensor_name(i));
        CHECK(bytes.find("lsa_wq") != std::string::npos && bytes.find("norm_sa") != std::string::npos &&
                  bytes.find("w_mix") == std::string::npos,
              "tensor table: LSA and self-attention tensors, no w_mix");
        std::string bad = bytes;
        bad.replace(bad.find("arch moa\n"), 9, "arch mob\n");
        FILE* f = fopen(path.c_str(), "wb");
        fwrite(bad.data(), 1, bad.size(), f);
        fclose(f);
        CHECK_THROWS(load_draft(path), "");  // the checksum or the arch check, whichever comes first
        CHECK_THROWS(parse_draft_arch("mob", "test"), "not one of beagle, eagle, medusa, moa");
        remove(path.c_str());
    }
    return test_summary("test_moa_draft");
}
