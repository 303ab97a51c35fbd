// test_draft_train.cpp: the training API end to end in float on the CPU backend: a tiny draft
// overfits one synthetic sequence with the short loop the trainer is meant for (zero_grads ->
// stage-1 or stage-2 iteration -> AdamW step); the loss must fall well below its start in both
// stages (stage 2 continuing from stage 1), gradient clipping must bound the update, and the trained weights must survive
// get_weights -> save_draft -> load_draft -> Draft inference bit for bit.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/common.h"
#include "model/draft.h"
#include "testlib.h"
#include "train/adamw.h"
#include "core/rng.h"
#include "train/trainer.h"

using namespace beagle;

int main() {
    DraftConfig c;
    c.dim = 32;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 8;
    c.ffn_dim = 64;
    c.vocab_size = 50;
    DraftWeights dw;
    dw.init_random(c, 1);
    TrainRng rng(2);
    DraftFrozen fz;
    fz.vocab = c.vocab_size;
    fz.dim = c.dim;
    fz.embd.resize((size_t)c.vocab_size * c.dim);
    fz.out_norm.assign(c.dim, 1.0f);
    for (float& x : fz.embd) x = (float)rng.normal();  // tied LM head
    int T = 40;
    std::vector<int> tokens(T);
    std::vector<float> states((size_t)T * c.dim);
    for (int& t : tokens) t = rng.below(c.vocab_size);
    // smooth "true states" (a random walk), so earlier states predict later ones
    for (int i = 0; i < c.dim; i++) states[i] = (float)rng.normal();
    for (int j = 1; j < T; j++)
        for (int i = 0; i < c.dim; i++)
            states[(size_t)j * c.dim + i] = 0.9f * states[(size_t)(j - 1) * c.dim + i] + (float)(0.3 * rng.normal());
    TrainBatch b;
    b.tokens = tokens.data();
    b.states = states.data();
    b.T = T;

    CpuOps ops(2);
    DraftModelT<Ops> m(ops, dw, fz);
    m.enable_grads();
    AdamWOptions ao;
    ao.lr = 3e-3f;
    ao.warmup = 5;
    ao.clip = 0.5f;
    AdamW adam(m, ao);
    CHECK(std::fabs(adam.lr_at(0) - 3e-3f / 5) < 1e-9 && adam.lr_at(5) == 3e-3f, "warm-up schedule");
    {   // warm-up, stable, decay (--lr-decay): linear to 0 over steps [60, 100)
        AdamWOptions d = ao;
        d.decay_from = 60;
        d.decay_to = 100;
        AdamW sched(m, d);
        CHECK(sched.lr_at(59) == 3e-3f && sched.lr_at(60) == 3e-3f, "decay starts at decay_from");
        CHECK(std::fabs(sched.lr_at(80) - 1.5e-3f) < 1e-9 && std::fabs(sched.lr_at(99) - 3e-3f / 40) < 1e-9,
              "linear decay: half way at 80, 1/40 at the last step");
        CHECK(sched.lr_at(100) == 0.0f && sched.lr_at(150) == 0.0f, "zero after decay_to");
        CHECK(adam.lr_at(1000) == 3e-3f, "no decay configured: constant");
    }
    for (int stage : {1, 2}) {
        TrainOptions opt;
        opt.stage = stage;
        opt.w = 3;
        opt.S = 3;
        opt.noise_std = 0.05f;
        DraftTrainer tr(m, opt);
        double first = 0, last = 0;
        for (int it = 0; it < 80; it++) {
            m.zero_grads();
            int offset = it % opt.w;
            IterStats st = tr.run(b, offset, 100 + it, 1.0f, true);
            double norm = adam.step();
            CHECK(std::isfinite(st.loss) && std::isfinite(norm), "stage %d iteration %d: loss %g norm %g", stage, it,
                  st.loss, norm);
            if (it < 3) first += st.loss / 3;
            if (it >= 77) last += st.loss / 3;
        }
        printf("stage %d: loss %.4f -> %.4f over 80 AdamW steps\n", stage, first, last);
        // stage 1 starts from random weights; stage 2 continues from the stage-1 model
        CHECK(last < (stage == 1 ? 0.2 : 0.9) * first, "stage %d: loss did not fall enough (%.4f -> %.4f)", stage, first,
              last);
    }
    // clipping: with lr 0 nothing moves; a clipped step moves each weight by at most ~lr
    {
        DraftWeights before, after;
        m.get_weights(&before);
        m.zero_grads();
        TrainOptions opt;
        DraftTrainer tr(m, opt);
        tr.run(b, 0, 1, 1000.0f, true);  // huge loss scale: the gradient norm must be clipped
        double norm = adam.step(1e-3f);
        m.get_weights(&after);
        double worst = 0;
        for (int i = 0; i < DT_COUNT; i++)
            for (size_t k = 0; k < before.t[i].size(); k++)
                worst = std::max(worst, (double)std::fabs(after.t[i][k] - before.t[i][k]));
        CHECK(norm > 0.5, "test needs a clipped step (norm %g)", norm);
        CHECK(worst < 1e-3 * 1.5, "an AdamW step moved a weight by %g (lr 1e-3)", worst);
    }
    // trained weights -> file -> inference: same f^ as the trainer's model
    {
        DraftWeights trained;
        m.get_weights(&trained);
        trained.meta = {{"step", std::to_string(adam.steps())}};
        std::string path = "/tmp/beagle_test_draft_train_" + std::to_string(getpid()) + ".bdr";
        save_draft(path, trained);
        DraftWeights loaded = load_draft(path);
        unlink(path.c_str());
        Draft d1(trained, fz, ops, T, 4, 2), d2(loaded, fz, ops, T, 4, 2);
        d1.add_true_states(states.data(), 10);
        d2.add_true_states(states.data(), 10);
        int tok = tokens[10], pos = 10;
        std::vector<float> a(c.dim), bb(c.dim);
        d1.forward(&tok, &pos, 1, nullptr, 0, a.data(), nullptr);
        d2.forward(&tok, &pos, 1, nullptr, 0, bb.data(), nullptr);
        CHECK(!memcmp(a.data(), bb.data(), c.dim * 4), "saved and reloaded draft differs");
        CHECK(loaded.meta.size() == 1 && loaded.meta[0].second == std::to_string(adam.steps()), "step metadata");
    }
    return test_summary("test_draft_train");
}
