// test_eagle_draft.cpp: the EAGLE-style draft (arch eagle, docs/method.md section 4): training forward == inference, and
// both == that section's equations (naive_draft.h, float64, no shared code).
//  1. the trainer's forward (noise off) on a sequence: f^ of every row p >= 1 and the loss agree with the
//     naive EAGLE layer (1e-4 relative on f^; 1e-5 on the loss: soft CE + 10 SmoothL1 over rows 1..T-1).
//  2. teacher-forced inference: a Draft fed the true states in lazy chunks, queried at p = n_true with
//     token t_p, gives the trainer's f^ and logits for row p bit for bit (memcmp).
//  3. a chain and a tree: a child query takes its parent's predicted state as feature and sees the
//     parent's key: equal (memcmp) to the trainer's rows on the sequence whose state at the parent's
//     position is the parent's prediction. Keeping a subset of a forward's rows (keep_pred {1} of two
//     siblings) moves their keys: the child then equals the child of a draft that ran that sibling alone.
//     The training-time test (stage 2, --ttt): step k's query at row P + k - 1 == the chain's depth k (memcmp).
//  4. misuse: a non-root query without its parent in the mask, true states without tokens -> Error.
//  5. the draft file: "arch eagle" round trip (no norm_kv, fc_e/fc_f), a Beagle file has no arch line
//     (the shipped weights/beagle-stories260K.bin re-saved is byte-identical), damaged arch lines fail.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/common.h"
#include "core/rng.h"
#include "model/draft.h"
#include "draft_fixture.h"
#include "naive_draft.h"
#include "testlib.h"
#include "train/trainer.h"

using namespace beagle;

int main() {
    const DraftConfig c = ragged_draft_config(ARCH_EAGLE);
    DraftWeights dw;
    dw.init_random(c, 5);
    CHECK(dw.t[DT_NORM_KV].empty() && dw.t[DT_FC_E].size() == 1600 && dw.t[DT_FC_F].size() == 1600,
          "an EAGLE draft has fc_e, fc_f and no norm_kv");
    TrainRng rng(11);
    for (int i : {DT_NORM_Q, DT_NORM_M})
        for (float& x : dw.t[i]) x = (float)(1 + 0.3 * rng.normal());
    const DraftFrozen fz = random_frozen(c, rng);
    const int T = 23, dim = c.dim, V = c.vocab_size;
    std::vector<int> tokens(T);
    std::vector<float> states((size_t)T * dim);
    for (int& t : tokens) t = rng.below(V);
    for (float& x : states) x = (float)rng.normal();
    Naive nv{c, &dw, &fz};
    auto row = [&](const std::vector<float>& st, int p) { return Vec(st.begin() + (size_t)p * dim, st.begin() + (size_t)(p + 1) * dim); };

    CpuOps ops(2);
    DraftModelT<Ops> m(ops, dw, fz);
    m.enable_grads();
    TrainOptions opt;
    opt.noise_std = 0;  // inference has no noise
    DraftTrainer tr(m, opt);
    // a trainer's f^ and logits of its rows (tr: rows 1..T-1) on (tokens, st)
    auto trainer_rows = [&](DraftTrainer& t, const std::vector<float>& st, std::vector<TrainCaptureT<float>::Row>* rows) {
        TrainBatch b;
        b.tokens = tokens.data();
        b.states = st.data();
        b.T = T;
        TrainCaptureT<float> cap;
        t.capture = &cap;
        IterStats is = t.run(b, 0, 1, 1.0f, false);
        t.capture = nullptr;
        *rows = cap.rows;
        return is;
    };
    auto train_rows = [&](const std::vector<float>& st, std::vector<TrainCaptureT<float>::Row>* rows) {
        return trainer_rows(tr, st, rows);
    };

    // ---- 1. trainer == naive EAGLE
    std::vector<TrainCaptureT<float>::Row> rows;
    IterStats is = train_rows(states, &rows);
    CHECK(rows.size() == (size_t)T - 1, "EAGLE trains rows 1..T-1: %zu rows", rows.size());
    std::vector<int> ntok, npos;
    std::vector<Vec> nfeat;
    for (int p = 1; p < T; p++) {
        ntok.push_back(tokens[p]);
        nfeat.push_back(row(states, p - 1));
        npos.push_back(p);
    }
    std::vector<Vec> nfh = nv.eagle(ntok, nfeat, npos);
    double loss = 0;
    for (size_t i = 0; i < rows.size() && i < nfh.size(); i++) {
        CHECK(rows[i].row == (int)i + 1, "capture row %zu is sequence row %d", i, rows[i].row);
        CHECK(rel_err(rows[i].fh.data(), nfh[i]) < 1e-4, "row %zu: f^ rel err %g vs naive", i + 1, rel_err(rows[i].fh.data(), nfh[i]));
        CHECK(rel_err(rows[i].logits.data(), nv.logits(nfh[i])) < 1e-4, "row %zu: logits vs naive", i + 1);
        loss += nv.loss(nfh[i], row(states, (int)i + 1)) / (T - 1);
    }
    CHECK(std::fabs(is.loss - loss) <= 1e-5 * std::fabs(loss), "trainer loss %.9g vs naive %.9g", is.loss, loss);

    // ---- 2. teacher-forced inference == trainer, bit for bit
    {
        Draft d(dw, fz, ops, T, 8, 4);
        int have = 0, compared = 0;
        for (int p : {3, 4, 9, 10, 11, 17, 22}) {
            d.add_true_states(states.data() + (size_t)have * dim, p - have, tokens.data() + have);  // lazy chunks
            have = p;
            d.clear_pred();
            std::vector<float> fh(dim), lg(V);
            d.forward(&tokens[p], &p, 1, nullptr, 1, fh.data(), lg.data());
            CHECK(!memcmp(fh.data(), rows[p - 1].fh.data(), dim * 4), "inference f^ at %d != training row %d", p, p);
            CHECK(!memcmp(lg.data(), rows[p - 1].logits.data(), V * 4), "inference logits at %d != training row %d", p, p);
            compared++;
        }
        CHECK(compared == 7, "compared %d positions", compared);
    }

    // ---- 3. chain and tree: a child's feature is its parent's prediction
    {
        const int P = 9;
        Draft d(dw, fz, ops, T, 8, 4);
        d.add_true_states(states.data(), P, tokens.data());
        std::vector<float> f0(dim), f1(dim), f2(dim);
        int p0 = P, p1 = P + 1, p2 = P + 2, r0 = 0;
        d.forward(&tokens[p0], &p0, 1, nullptr, 1, f0.data(), nullptr);
        int pr0 = d.keep_pred(&r0, 1);
        uint64_t bits = 1ULL << pr0;
        d.forward(&tokens[p1], &p1, 1, &bits, 1, f1.data(), nullptr);
        int pr1 = d.keep_pred(&r0, 1);
        bits |= 1ULL << pr1;
        d.forward(&tokens[p2], &p2, 1, &bits, 1, f2.data(), nullptr);
        // the trainer on the sequence whose states at P, P+1 are the draft's own predictions
        std::vector<float> st2 = states;
        memcpy(&st2[(size_t)P * dim], f0.data(), dim * 4);
        memcpy(&st2[(size_t)(P + 1) * dim], f1.data(), dim * 4);
        std::vector<TrainCaptureT<float>::Row> rows2;
        train_rows(st2, &rows2);
        CHECK(!memcmp(f0.data(), rows[P - 1].fh.data(), dim * 4), "chain step 1 != training row %d", P);
        CHECK(!memcmp(f1.data(), rows2[P].fh.data(), dim * 4), "chain step 2 != training row %d on predicted states", P + 1);
        CHECK(!memcmp(f2.data(), rows2[P + 1].fh.data(), dim * 4), "chain step 3 != training row %d on predicted states", P + 2);

        // 3b. the training-time test (stage 2, ttt, S = 3) on the true sequence: step k's query at sequence
        // row P + k - 1 is that chain's depth k, bit for bit (it is fed step k - 1's f^ and sees its keys)
        TrainOptions o3 = opt;
        o3.stage = 2;
        o3.w = 3;
        o3.S = 3;
        o3.ttt = true;
        DraftTrainer t3(m, o3);
        std::vector<TrainCaptureT<float>::Row> rows_ttt;
        trainer_rows(t3, states, &rows_ttt);
        int per_step[4] = {0, 0, 0, 0}, matched = 0;
        for (const auto& r : rows_ttt) {
            if (r.step >= 1 && r.step <= 3) per_step[r.step]++;
            const std::vector<float>* want = r.row == P + r.step - 1 ? (r.step == 1 ? &f0 : r.step == 2 ? &f1 : &f2) : nullptr;
            if (!want) continue;
            CHECK(!memcmp(want->data(), r.fh.data(), dim * 4), "training-time test step %d, row %d != the chain's depth %d",
                  r.step, r.row, r.step);
            matched++;
        }
        CHECK(matched == 3 && per_step[1] == T - 1 && per_step[2] == T - 2 && per_step[3] == T - 3,
              "training-time test: %d chain rows matched; rows per step %d / %d / %d", matched, per_step[1], per_step[2],
              per_step[3]);

        // tree: root, two siblings (tokens a, b) in one forward, keep only b, then b's child
        const int a = (tokens[p1] + 5) % V, b = (tokens[p1] + 7) % V, cc = tokens[p2];
        auto tree_child = [&](bool both) {
            return draft_tree_child(dw, fz, ops, T, states.data(), tokens.data(), P, a, b, cc, both);
        };
        auto both = tree_child(true), alone = tree_child(false);
        CHECK(!memcmp(both.first.data(), alone.first.data(), dim * 4), "sibling b's f^ depends on its sibling a");
        CHECK(!memcmp(both.second.data(), alone.second.data(), dim * 4),
              "b's child after keep_pred {1} of (a, b) != b's child when b ran alone (the kept key row moved wrong)");
        std::vector<float> st3 = states;
        std::vector<int> tk = tokens;
        memcpy(&st3[(size_t)P * dim], f0.data(), dim * 4);
        memcpy(&st3[(size_t)(P + 1) * dim], alone.first.data(), dim * 4);
        tokens[P + 1] = b;  // the sequence root, b, child
        std::vector<TrainCaptureT<float>::Row> rows3;
        train_rows(st3, &rows3);
        tokens = tk;
        CHECK(!memcmp(alone.second.data(), rows3[P + 1].fh.data(), dim * 4), "tree child != training row on the tree path");

        // ---- 4. misuse
        int q = P + 1, tok = tokens[q];
        Draft e(dw, fz, ops, T, 8, 4);
        e.add_true_states(states.data(), P, tokens.data());
        CHECK_THROWS(e.forward(&tok, &q, 1, nullptr, 1, nullptr, nullptr), "has no feature");
        CHECK_THROWS(e.add_true_states(states.data(), 1), "needs the tokens");
    }

    // ---- 5. the file
    {
        std::string path = "build/test/eagle_draft_test.bin";
        dw.meta = {{"note", "test"}};
        save_draft(path, dw);
        std::string bytes = slurp(path);
        CHECK(bytes.find("arch eagle\n") != std::string::npos, "an EAGLE file records its architecture");
        DraftWeights r = load_draft(path);
        CHECK(r.cfg.arch == ARCH_EAGLE, "loaded arch %d", r.cfg.arch);
        for (int i = 0; i < DT_COUNT; i++) CHECK(r.t[i] == dw.t[i], "tensor %s round trip", draft_tensor_name(i));
        CHECK(bytes.find("norm_kv") == std::string::npos && bytes.find("fc_f") != std::string::npos,
              "tensor table: fc_e/fc_f, no norm_kv");
        // the same bytes with the arch line turned into another word: refused
        std::string bad = bytes;
        size_t at = bad.find("arch eagle\n");
        bad.replace(at, 11, "arch eaglx\n");
        FILE* f = fopen(path.c_str(), "wb");
        fwrite(bad.data(), 1, bad.size(), f);
        fclose(f);
        CHECK_THROWS(load_draft(path), "");  // the checksum or the arch check, whichever comes first
        DraftConfig bc = c;
        bc.arch = ARCH_BEAGLE;
        DraftWeights bw;
        bw.init_random(bc, 5);
        save_draft(path, bw);
        CHECK(slurp(path).find("arch ") == std::string::npos, "a Beagle file has no arch line");
        CHECK(load_draft(path).cfg.arch == ARCH_BEAGLE, "a file without arch is a Beagle draft");
        CHECK(bw.t[DT_FC_E].empty() && !bw.t[DT_NORM_KV].empty(), "a Beagle draft has norm_kv and no fc");
        CHECK_THROWS(parse_draft_arch("hydra", "test"), "not one of beagle, eagle, medusa");
        const char* root = getenv("BEAGLE_ROOT");
        std::string shipped = std::string(root ? root : ".") + "/weights/beagle-stories260K.bin";
        if (file_exists(shipped)) {
            save_draft(path, load_draft(shipped));
            CHECK(slurp(path) == slurp(shipped), "the shipped Beagle draft re-saved is not byte-identical");
        } else {
            SKIP_PART("%s not present: the byte-identity part did not run", shipped.c_str());
        }
        remove(path.c_str());
    }
    return test_summary("test_eagle_draft");
}
