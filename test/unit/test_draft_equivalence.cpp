// test_draft_equivalence.cpp: training forward == inference, bit for bit (CPU backend), and both
// == the formulas of docs/method.md.
//  1. stage 2, step s, query b+s-1 (f^ and logits) == concat-inference draft step s given the true
//     states f_0..f_{b-1} and the true tokens (memcmp), using the engine's calls: lazy
//     add_true_states, keep_pred, clear_pred (truncation back to the true states).
//  2. stage 1, query b+k == no-concat inference step k+1 fed the true tokens (memcmp).
//  3. several queries in one forward (tree-style masks) == each query alone (memcmp).
//  4. a naive float64 implementation of the method's equations (docs/method.md section 3) written here (no shared code): the
//     Draft's f^ and logits agree to 1e-4 relative, and the trainer's stage-1 / stage-2 losses
//     (CE with soft labels + 10 * SmoothL1, beta_s = S - s + 1 weighting) agree to 1e-5 relative.
// Ragged sizes (dim 40, head_dim 10, ffn 56, vocab 77) exercise every kernel tail.
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/common.h"
#include "model/draft.h"
#include "naive_draft.h"
#include "draft_fixture.h"
#include "testlib.h"
#include "train/masks.h"
#include "core/rng.h"
#include "train/trainer.h"

using namespace beagle;

int main() {
    const DraftConfig c = ragged_draft_config(ARCH_BEAGLE);
    DraftWeights dw;
    dw.init_random(c, 5);
    TrainRng rng(11);
    for (int i : {DT_NORM_Q, DT_NORM_KV, DT_NORM_M})
        for (float& x : dw.t[i]) x = (float)(1 + 0.3 * rng.normal());
    const DraftFrozen fz = random_frozen(c, rng);
    int T = 23, dim = c.dim, V = c.vocab_size;
    std::vector<int> tokens(T);
    std::vector<float> states((size_t)T * dim);
    for (int& t : tokens) t = rng.below(V);
    for (float& x : states) x = (float)rng.normal();
    Naive nv{c, &dw, &fz};
    auto true_keys = [&](int b) {
        std::vector<std::pair<Vec, int>> k;
        for (int j = 0; j < b; j++) k.push_back({Vec(states.begin() + (size_t)j * dim, states.begin() + (size_t)(j + 1) * dim), j});
        return k;
    };

    CpuOps ops(2);
    DraftModelT<Ops> m(ops, dw, fz);
    m.enable_grads();
    TrainBatch batch;
    batch.tokens = tokens.data();
    batch.states = states.data();
    batch.T = T;
    int compared = 0, naive_checked = 0;
    for (int w : {3, 4})
        for (int offset = 0; offset < w; offset++) {
            // ---- 1. stage 2 vs concat inference
            TrainOptions opt;
            opt.stage = 2;
            opt.w = w;
            opt.S = w;
            opt.noise_std = 0;  // inference has no noise
            DraftTrainer tr(m, opt);
            TrainCaptureT<float> cap;
            tr.capture = &cap;
            IterStats st2 = tr.run(batch, offset, 1, 1.0f, true);
            std::map<std::pair<int, int>, const TrainCaptureT<float>::Row*> by;  // (step, row)
            for (auto& r : cap.rows) by[{r.step, r.row}] = &r;
            Draft d(dw, fz, ops, T, 8, 8);
            int have = 0;
            double late = 0, sum_beta = opt.S * (opt.S + 1) / 2.0;
            std::vector<double> step_sum(opt.S + 1, 0);
            std::vector<int> step_n(opt.S + 1, 0);
            for (int b : stage2_rows(T, w, offset, 1)) {
                d.add_true_states(states.data() + (size_t)have * dim, b - have);  // lazy: K/V computed at the next query
                have = b;
                d.clear_pred();  // truncate back to the true states
                std::vector<std::pair<Vec, int>> keys = true_keys(b);
                for (int s = 1; s <= opt.S && b + s - 1 < T; s++) {
                    int q = b + s - 1, tok = tokens[q];
                    uint64_t bits = (1ULL << (s - 1)) - 1;  // predicted rows 0..s-2 = f^_b..f^_{b+s-2}
                    std::vector<float> fh(dim), lg(V);
                    d.forward(&tok, &q, 1, &bits, 1, fh.data(), lg.data());
                    auto it = by.find({s, q});
                    CHECK(it != by.end(), "stage 2 computed no query at step %d row %d", s, q);
                    if (it == by.end()) continue;
                    CHECK(!memcmp(fh.data(), it->second->fh.data(), dim * 4),
                          "w %d offset %d: stage-2 step %d f^ at row %d != concat inference step %d", w, offset, s, q, s);
                    CHECK(it->second->logits.size() == (size_t)V &&
                              !memcmp(lg.data(), it->second->logits.data(), V * 4),
                          "w %d offset %d: stage-2 step %d logits at row %d != concat inference", w, offset, s, q);
                    compared++;
                    // naive method chain: keys = true states < b plus the naive predicted states
                    Vec nfh = nv.query(tok, q, keys);
                    CHECK(rel_err(fh.data(), nfh) < 1e-4, "naive f^ step %d row %d: rel err %g", s, q,
                          rel_err(fh.data(), nfh));
                    CHECK(rel_err(lg.data(), nv.logits(nfh)) < 1e-4, "naive logits step %d row %d", s, q);
                    Vec f(states.begin() + (size_t)q * dim, states.begin() + (size_t)(q + 1) * dim);
                    step_sum[s] += nv.loss(nfh, f);
                    step_n[s]++;
                    keys.push_back({nfh, q});
                    naive_checked++;
                    int row0 = 0;
                    d.keep_pred(&row0, 1);
                }
            }
            for (int s = 1; s <= opt.S; s++)
                if (step_n[s]) late += (opt.S - s + 1) * step_sum[s] / step_n[s] / sum_beta;
            CHECK(std::fabs(st2.loss - late) <= 1e-5 * std::fabs(late), "stage-2 late loss %.9g vs naive %.9g (w %d offset %d)",
                  st2.loss, late, w, offset);

            // ---- 2. stage 1 vs no-concat inference fed the true tokens
            opt.stage = 1;
            DraftTrainer tr1(m, opt);
            TrainCaptureT<float> cap1;
            tr1.capture = &cap1;
            IterStats st1 = tr1.run(batch, offset, 1, 1.0f, false);
            std::map<int, const TrainCaptureT<float>::Row*> by1;
            for (auto& r : cap1.rows) by1[r.row] = &r;
            Draft d1(dw, fz, ops, T, 8, 8);
            d1.set_concat(false);
            have = 0;
            double early = 0;
            int n_early = 0;
            for (int b : stage2_rows(T, w, offset, 1)) {
                d1.add_true_states(states.data() + (size_t)have * dim, b - have);
                have = b;
                d1.clear_pred();
                for (int k = 0; k < w && b + k < T; k++) {
                    int q = b + k, tok = tokens[q];
                    uint64_t bits = (1ULL << k) - 1;  // no-concat ignores the predicted rows
                    std::vector<float> fh(dim), lg(V);
                    d1.forward(&tok, &q, 1, &bits, 1, fh.data(), lg.data());
                    auto it = by1.find(q);
                    CHECK(it != by1.end(), "stage 1 computed no query at row %d", q);
                    if (it == by1.end()) continue;
                    CHECK(!memcmp(fh.data(), it->second->fh.data(), dim * 4),
                          "w %d offset %d: stage-1 f^ at b+%d (row %d) != no-concat inference step %d", w, offset, k, q,
                          k + 1);
                    CHECK(!memcmp(lg.data(), it->second->logits.data(), V * 4), "stage-1 logits at row %d", q);
                    compared++;
                    Vec nfh = nv.query(tok, q, true_keys(b));
                    Vec f(states.begin() + (size_t)q * dim, states.begin() + (size_t)(q + 1) * dim);
                    early += nv.loss(nfh, f);
                    n_early++;
                    int row0 = 0;
                    d1.keep_pred(&row0, 1);
                }
            }
            CHECK(std::fabs(st1.loss - early / n_early) <= 1e-5 * std::fabs(early / n_early),
                  "stage-1 loss %.9g vs naive %.9g (w %d offset %d)", st1.loss, early / n_early, w, offset);
        }

    // ---- 3. several queries at once (tree-style masks) == each alone
    {
        Draft d(dw, fz, ops, T, 8, 8);
        d.add_true_states(states.data(), 5);
        d.add_true_states(states.data() + 5 * dim, 4);  // two lazy chunks
        int toks[4] = {tokens[9], tokens[10], tokens[11], tokens[12]}, pos[4] = {9, 10, 10, 11};
        std::vector<float> fh(3 * dim);
        uint64_t none[3] = {0, 0, 0};
        d.forward(toks, pos, 3, none, 1, fh.data(), nullptr);
        int rows[3] = {0, 1, 2};
        d.keep_pred(rows, 3);  // pred rows 0, 1, 2
        uint64_t masks[4] = {0b001, 0b011, 0b101, 0b111};
        std::vector<float> all(4 * dim), alll(4 * V);
        d.forward(toks, pos, 4, masks, 1, all.data(), alll.data());
        for (int i = 0; i < 4; i++) {
            std::vector<float> one(dim), onel(V);
            d.forward(toks + i, pos + i, 1, masks + i, 1, one.data(), onel.data());
            CHECK(!memcmp(one.data(), all.data() + i * dim, dim * 4), "query %d alone != in a batch of 4", i);
            CHECK(!memcmp(onel.data(), alll.data() + i * V, V * 4), "query %d logits alone != in a batch", i);
        }
        // concat off: predicted rows invisible -> equals a query with no predicted bits
        d.set_concat(false);
        std::vector<float> nc(dim), z(dim);
        d.forward(toks + 3, pos + 3, 1, masks + 3, 1, nc.data(), nullptr);
        d.set_concat(true);
        d.forward(toks + 3, pos + 3, 1, none, 1, z.data(), nullptr);
        CHECK(!memcmp(nc.data(), z.data(), dim * 4), "no-concat must ignore predicted rows");
        CHECK(memcmp(all.data() + 3 * dim, z.data(), dim * 4) != 0, "concat must use the predicted rows");
        // the target-weights path with F32 views of the same tables: f^ bit-identical, logits close
        Tensor te, th;
        te.name = "embd";
        th.name = "head";
        for (Tensor* t : {&te, &th}) {
            t->dtype = DType::F32;
            t->ndim = 2;
            t->shape[0] = V;
            t->shape[1] = dim;
            t->nbytes = (uint64_t)V * dim * 4;
        }
        te.data = fz.embd.data();
        th.data = fz.lm_head.data();
        DraftFrozen small = fz;
        small.embd.clear();
        small.lm_head.clear();
        Draft dt(dw, small, ops, T, 8, 8);
        dt.use_target_weights(ops.weight(te), ops.weight(th));
        dt.add_true_states(states.data(), 9);
        dt.forward(toks, pos, 3, none, 1, fh.data(), nullptr);
        dt.keep_pred(rows, 3);
        std::vector<float> tall(4 * dim), talll(4 * V);
        dt.forward(toks, pos, 4, masks, 1, tall.data(), talll.data());
        CHECK(!memcmp(tall.data(), all.data(), 4 * dim * 4), "target-weights path: f^ differs from the f32-table path");
        double md = 0, mz = 0;
        for (int i = 0; i < 4 * V; i++) md = std::max(md, (double)std::fabs(talll[i] - alll[i])), mz = std::max(mz, (double)std::fabs(alll[i]));
        CHECK(md <= 1e-4 * mz, "target-weights path: logits differ by %g (scale %g)", md, mz);
        // bad calls give errors, not crashes
        int bad = V + 3;
        CHECK_THROWS(d.forward(&bad, pos, 1, nullptr, 0, nullptr, nullptr), "out of range");
        int big = 99;
        CHECK_THROWS(d.keep_pred(&big, 1), "keep_pred");
        CHECK_THROWS(d.add_true_states(states.data(), T), "exceed");
    }
    printf("bit-identical training/inference comparisons: %d; naive method checks: %d\n", compared, naive_checked);
    CHECK(compared > 60, "too few comparisons (%d)", compared);
    return test_summary("test_draft_equivalence");
}
