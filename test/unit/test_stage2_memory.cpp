// test_stage2_memory.cpp: the stage-2 memory claim (docs/method.md "Memory budget"). Peak bytes allocated by one stage-2 training
// iteration (the trainer's counting allocator) for S = 1..6 at fixed T, default detached mode:
// flat for S >= 2, and the S-dependent part (peak(S) - peak(1)) is at most one extra KV set. The
// --sim-grad-through mode is printed for contrast (it grows with S). The memory formula
// train_memory() must equal the measured peak exactly (several T, offsets, stages), and the same
// formula gives the budget of a 7B-class target's draft at T = 2048, checked to fit 24 GiB. The EAGLE and MoA
// drafts' formulas are checked against the allocator the same way. The loss's logits kept between its two
// passes or recomputed (LossOptions::keep_max) give the same losses and gradients, bit for bit.
#include <cstdio>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/common.h"
#include "testlib.h"
#include "core/rng.h"
#include "train/trainer.h"

using namespace beagle;

int main() {
    DraftConfig c;
    c.dim = 32;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 8;
    c.ffn_dim = 48;
    c.vocab_size = 300;
    DraftWeights dw;
    dw.init_random(c, 3);
    DraftFrozen fz;
    fz.vocab = c.vocab_size;
    fz.dim = c.dim;
    TrainRng rng(9);
    fz.embd.resize((size_t)c.vocab_size * c.dim);
    fz.out_norm.assign(c.dim, 1.0f);
    for (float& x : fz.embd) x = (float)rng.normal();  // tied head
    const int T = 96, W = 6;
    std::vector<int> tokens(T);
    std::vector<float> states((size_t)T * c.dim);
    for (int& t : tokens) t = rng.below(c.vocab_size);
    for (float& x : states) x = (float)rng.normal();
    TrainBatch b;
    b.tokens = tokens.data();
    b.states = states.data();
    b.T = T;

    CpuOps ops(2);
    DraftModelT<Ops> m(ops, dw, fz);
    m.enable_grads();
    // the peak of one iteration of model mm with these options (hard: token labels)
    size_t keep_max = LossOptions().keep_max;  // the loss's logits kept (default) or recomputed (0)
    auto measure_model = [&](DraftModelT<Ops>& mm, int stage, int S, bool through, int offset, int vocab_chunk, int TT,
                             bool hard, bool ttt = false) {
        TrainOptions o;
        o.loss.keep_max = keep_max;
        o.ttt = ttt;
        o.stage = stage;
        o.w = W;
        o.S = S;
        o.sim_grad_through = through;
        o.loss.vocab_chunk = vocab_chunk;
        o.loss.hard_labels = hard;
        DraftTrainer tr(mm, o);
        TrainBatch bb = b;
        bb.T = TT;
        tr.run(bb, offset, 7, 1.0f, true);
        CHECK(tr.mem().current_bytes() == 0, "trainer leaked %zu bytes", tr.mem().current_bytes());
        return (double)tr.mem().peak_bytes();
    };
    auto measure = [&](int stage, int S, bool through, int offset, int vocab_chunk, int TT) {
        return measure_model(m, stage, S, through, offset, vocab_chunk, TT, false);
    };

    printf("stage-2 peak bytes of one training iteration, T = %d, w = %d, dim %d, kv_dim %d, ffn %d, vocab %d\n", T, W,
           c.dim, c.kv_dim(), c.ffn_dim, c.vocab_size);
    printf("%3s %14s %14s %14s %16s\n", "S", "detached", "S-dependent", "one KV set", "sim-grad-through");
    TrainOptions o2;
    o2.stage = 2;
    o2.w = W;
    double kv_set = train_memory(c, o2, T, 1).kv_set;
    std::vector<double> det(7), thr(7);
    for (int S = 1; S <= 6; S++) {
        det[S] = measure(2, S, false, 1, 1024, T);
        thr[S] = measure(2, S, true, 1, 1024, T);
        printf("%3d %14.0f %14.0f %14.0f %16.0f\n", S, det[S], det[S] - det[1], kv_set, thr[S]);
    }
    for (int S = 2; S <= 6; S++) {
        CHECK(det[S] == det[2], "detached peak must not grow with S: S=%d %.0f vs S=2 %.0f", S, det[S], det[2]);
        CHECK(det[S] - det[1] <= kv_set, "S-dependent part %.0f exceeds one KV set %.0f at S=%d", det[S] - det[1],
              kv_set, S);
    }
    CHECK(thr[6] > thr[2], "sim-grad-through keeps every step: its peak should grow with S");

    // the formula equals the measurement
    int checked = 0;
    for (size_t km : {LossOptions().keep_max, size_t(0)})
    for (int TT : {T, 41, 7})
        for (int off = 0; off < W; off += 2)
            for (int chunk : {1024, 64})
                for (int stage : {1, 2})
                    for (int S : {1, 3, 6}) {
                        if (stage == 1 && S != 1) continue;
                        keep_max = km;
                        TrainOptions o;
                        o.stage = stage;
                        o.w = W;
                        o.S = S;
                        o.loss.vocab_chunk = chunk;
                        o.loss.keep_max = km;
                        double want = train_memory(c, o, TT, off).iteration_peak;
                        double got = measure(stage, S, false, off, chunk, TT);
                        CHECK(got == want, "formula %.0f != measured %.0f (stage %d S %d T %d offset %d chunk %d)", want,
                              got, stage, S, TT, off, chunk);
                        checked++;
                    }
    keep_max = LossOptions().keep_max;
    printf("memory formula == measured peak in %d configurations\n", checked);
    {  // kept and recomputed logits: the kept ones must cost memory, and give the same bits
        TrainOptions o;
        o.stage = 2;
        o.w = W;
        o.S = 3;
        o.loss.vocab_chunk = 64;
        o.loss.keep_max = 0;
        double recompute = train_memory(c, o, T, 1).iteration_peak;
        o.loss.keep_max = LossOptions().keep_max;
        CHECK(train_memory(c, o, T, 1).iteration_peak > recompute, "kept logits must show in the memory formula");
        for (bool hard : {false, true}) {
            std::vector<float> g[2];
            double loss[2];
            for (int k = 0; k < 2; k++) {
                o.loss.keep_max = k ? 0 : LossOptions().keep_max;
                o.loss.hard_labels = hard;
                m.zero_grads();
                DraftTrainer tr(m, o);
                loss[k] = tr.run(b, 1, 7, 1.0f, true).loss;
                for (int t = 0; t < DT_COUNT; t++)
                    if (m.g[t]) g[k].insert(g[k].end(), m.g[t], m.g[t] + c.numel(t));
            }
            CHECK(!g[0].empty() && g[0] == g[1] && loss[0] == loss[1],
                  "%s labels: kept logits give other gradients or loss (%.9g vs %.9g)", hard ? "hard" : "soft", loss[0],
                  loss[1]);
        }
    }

    // a Beagle draft with state layers (s = f + W_mix h, h: E = 2 layers' rows kept for W_mix's gradient):
    // the same formula, its h and d s lines included, against the counting allocator
    {
        DraftConfig cs = c;
        cs.state_layers = {1, 3};
        DraftWeights dws;
        dws.init_random(cs, 6);
        DraftModelT<Ops> ms(ops, dws, fz);
        ms.enable_grads();
        std::vector<float> extras((size_t)T * cs.n_extra() * c.dim);
        for (float& x : extras) x = (float)rng.normal();
        b.extras = extras.data();
        int checked_s = 0;
        for (int TT : {T, 41, 7})
            for (int stage : {1, 2})
                for (int S : {1, 3}) {
                    if (stage == 1 && S != 1) continue;
                    TrainOptions o;
                    o.stage = stage;
                    o.w = W;
                    o.S = S;
                    const double got = measure_model(ms, stage, S, false, 1, 1024, TT, false);
                    const double want = train_memory(cs, o, TT, 1).iteration_peak;
                    CHECK(got == want, "state layers: formula %.0f != measured %.0f (stage %d S %d T %d)", want, got, stage,
                          S, TT);
                    checked_s++;
                }
        b.extras = nullptr;
        printf("state layers (E = 2): memory formula == measured peak in %d configurations (T = %d stage 2 S = 3: %.0f "
               "bytes, without them %.0f)\n", checked_s, T, train_memory(cs, o2, T, 1).iteration_peak,
               train_memory(c, o2, T, 1).iteration_peak);
    }

    // an EAGLE-style draft (arch eagle: one self-attention layer over fc([E(t); f]), one step in any stage):
    // the same counting allocator against train_memory's EAGLE branch, both loss modes, stages 1 and 2
    {
        DraftConfig ce = c;
        ce.arch = ARCH_EAGLE;
        DraftWeights dwe;
        dwe.init_random(ce, 5);
        DraftModelT<Ops> me(ops, dwe, fz);
        me.enable_grads();
        int checked_e = 0;
        for (int TT : {T, 41, 7, 2, 1})
            for (int chunk : {1024, 64})
                for (bool hard : {false, true})
                    for (int stage : {1, 2}) {
                        TrainOptions o;  // what measure_model runs
                        o.stage = stage;
                        o.w = W;
                        o.S = 3;
                        o.loss.vocab_chunk = chunk;
                        o.loss.hard_labels = hard;
                        const double got = measure_model(me, stage, 3, false, 1, chunk, TT, hard);
                        const double want = train_memory(ce, o, TT, 1).iteration_peak;
                        CHECK(got == want, "EAGLE: formula %.0f != measured %.0f (T %d chunk %d hard %d stage %d)", want, got,
                              TT, chunk, (int)hard, stage);
                        checked_e++;
                    }
        // the training-time test (stage 2, S steps kept for the backward): its formula, and memory that grows with S
        std::vector<double> by_S(5);
        for (int TT : {T, 41, 7, 3, 2, 1})
            for (bool hard : {false, true})
                for (int S : {1, 2, 3, 4}) {
                    TrainOptions o;
                    o.stage = 2;
                    o.w = W;
                    o.S = S;
                    o.ttt = true;
                    o.loss.vocab_chunk = 64;
                    o.loss.hard_labels = hard;
                    const double got = measure_model(me, 2, S, false, 1, 64, TT, hard, true);
                    const double want = train_memory(ce, o, TT, 1).iteration_peak;
                    CHECK(got == want, "EAGLE training-time test: formula %.0f != measured %.0f (T %d hard %d S %d)", want,
                          got, TT, (int)hard, S);
                    if (TT == T && !hard) by_S[S] = got;
                    checked_e++;
                }
        CHECK(by_S[2] > by_S[1] && by_S[3] > by_S[2] && by_S[4] > by_S[3], "the training-time test's memory grows with S");
        printf("EAGLE training-time test, T = %d: peak %.0f / %.0f / %.0f / %.0f bytes at S = 1 / 2 / 3 / 4\n", T, by_S[1],
               by_S[2], by_S[3], by_S[4]);
        printf("EAGLE draft: memory formula == measured peak in %d configurations (T = %d: %.0f bytes, Beagle stage 2 "
               "S = 3: %.0f)\n", checked_e, T, train_memory(ce, TrainOptions(), T, 1).iteration_peak,
               train_memory(c, o2, T, 1).iteration_peak);
    }

    // a Medusa draft (arch medusa, K heads on the true states, one step in any stage): train_memory's Medusa branch
    // against the counting allocator, both loss modes, several K
    {
        int checked_m = 0;
        for (int K : {1, 3, 4}) {
            DraftConfig cm = c;
            cm.arch = ARCH_MEDUSA;
            cm.medusa_heads = K;
            DraftWeights dwm;
            dwm.init_random(cm, 8);
            DraftModelT<Ops> mm(ops, dwm, fz);
            mm.enable_grads();
            for (int TT : {T, 41, 3, 2, 1})
                for (bool hard : {false, true}) {
                    TrainOptions o;
                    o.stage = 1;
                    o.w = W;
                    o.loss.vocab_chunk = 64;
                    o.loss.hard_labels = hard;
                    const double got = measure_model(mm, 1, 1, false, 1, 64, TT, hard);
                    const double want = train_memory(cm, o, TT, 1).iteration_peak;
                    CHECK(got == want, "Medusa: formula %.0f != measured %.0f (K %d T %d hard %d)", want, got, K, TT,
                          (int)hard);
                    checked_m++;
                }
        }
        printf("Medusa draft: memory formula == measured peak in %d configurations\n", checked_m);
    }
    // a Mixture of Attentions draft (arch moa: LSA over f and E = 1, 3 layer rows, the tokens' self-attention, the
    // cross-attention block; one step in any stage): train_memory's MoA branch against the counting allocator
    {
        int checked_m = 0;
        for (std::vector<int> layers : {std::vector<int>{1}, std::vector<int>{0, 1, 3}}) {
            DraftConfig cm = c;
            cm.arch = ARCH_MOA;
            cm.state_layers = layers;
            DraftWeights dwm;
            dwm.init_random(cm, 7);
            DraftModelT<Ops> mm(ops, dwm, fz);
            mm.enable_grads();
            std::vector<float> extras((size_t)T * cm.n_extra() * c.dim);
            for (float& x : extras) x = (float)rng.normal();
            b.extras = extras.data();
            for (int TT : {T, 41, 7, 2, 1})
                for (int chunk : {1024, 64})
                    for (bool hard : {false, true})
                        for (int stage : {1, 2}) {
                            TrainOptions o;
                            o.stage = stage;
                            o.w = W;
                            o.S = 3;
                            o.loss.vocab_chunk = chunk;
                            o.loss.hard_labels = hard;
                            const double got = measure_model(mm, stage, 3, false, 1, chunk, TT, hard);
                            const double want = train_memory(cm, o, TT, 1).iteration_peak;
                            CHECK(got == want, "MoA: formula %.0f != measured %.0f (E %d T %d chunk %d hard %d stage %d)",
                                  want, got, cm.n_extra(), TT, chunk, (int)hard, stage);
                            checked_m++;
                        }
            b.extras = nullptr;
        }
        printf("MoA draft: memory formula == measured peak in %d configurations\n", checked_m);
    }

    // the budget of a 7B-class draft (dim 4096, 32 heads, 8 KV heads, ffn 11008), T = 2048, f32
    for (int vocab : {32000, 128256})
        for (int stage : {1, 2}) {
            DraftConfig b7;
            b7.dim = 4096;
            b7.n_heads = 32;
            b7.n_kv_heads = 8;
            b7.head_dim = 128;
            b7.ffn_dim = 11008;
            b7.vocab_size = vocab;
            TrainOptions o;
            o.stage = stage;
            o.w = 3;
            o.S = 3;
            TrainMemory mem = train_memory(b7, o, 2048, 1);
            printf("\n7B-class draft, vocab %d, T 2048, stage %d%s, f32 (bytes per buffer):\n", vocab, stage,
                   stage == 2 ? " (S = 3, detached)" : "");
            for (auto& l : mem.lines) printf("  %-52s %10.1f MiB\n", l.name.c_str(), l.bytes / (1 << 20));
            double total = mem.persistent + mem.iteration_peak;
            printf("  %-52s %10.1f MiB  (%.2f GiB)\n", "total (persistent + iteration peak)", total / (1 << 20),
                   total / (1 << 30));
            CHECK(total < 24.0 * (1 << 30), "7B-class draft training budget %.2f GiB exceeds 24 GiB", total / (1 << 30));
        }
    return test_summary("test_stage2_memory");
}
