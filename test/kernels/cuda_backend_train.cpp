// cuda_backend_train.cpp -> build/test/test_cuda_backend_train: draft training on the CUDA backend
// (kernels in the CPU emulator) against the CPU backend, through the real trainer (src/train/:
// DraftTrainer, AdamW with grad-norm clipping). Same tiny draft, same sequence, same noise seeds:
//   1. one stage-1 and one stage-2 iteration from the same weights: every parameter gradient agrees;
//   2. a few optimizer steps (stage 1, then stage 2 continuing): the trained weights agree;
//   3. the trained draft's inference forward (Draft, concat mode) agrees.
// All three for the Beagle draft and for the EAGLE-style draft (arch eagle: fc([E(t); f]), causal
// self-attention over its own rows; the same ops, so the same kernels, in another order), that draft's
// training-time test (stage 2 over S = 3 steps: set 1 and the PREFIX mask cut at the query's row), the
// Mixture of Attentions draft (arch moa: LSA over f and two layer rows, the tokens' self-attention); and for
// Medusa heads (arch medusa, K = 3: one matmul, SiLU through swiglu, the bias add and its column-sum gradient;
// step 3 is the heads' forward on one true state, u_k = f + SiLU(W_k f + b_k), instead of a Draft's).
// Tolerances: losses rtol 1e-5; gradients |g_cuda - g_cpu| <= 1e-5 max|g| per tensor (both backends
// are fp32 with fixed but different summation orders: ~1e-7 relative per op, grown over ~20 ops);
// weights after N AdamW steps |w_cuda - w_cpu| <= 2e-6 + 1e-3 * N * lr: an AdamW step moves a weight by
// at most ~lr, by lr * g / (|g| + eps) - elements with |g| near the rounding noise of the gradient
// may move differently, the rest agree to ~1e-7.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "core/common.h"
#include "model/draft.h"
#include "model/medusa_layers.h"
#include "testlib.h"
#include "train/adamw.h"
#include "core/rng.h"
#include "train/trainer.h"

using namespace beagle;

struct Setup {
    DraftConfig c;
    DraftWeights dw;
    DraftFrozen fz;
    std::vector<int> tokens;
    std::vector<float> states;
    std::vector<float> extras, wide;  // MoA: its state-layer rows, and Draft's rows [f; h_l1; h_l2]
    TrainBatch b;
};

static Setup make_setup(int arch) {
    Setup s;
    DraftConfig& c = s.c;
    c.arch = arch;
    c.medusa_heads = arch == ARCH_MEDUSA ? 3 : 0;
    c.dim = 48;
    c.n_heads = 6;
    c.n_kv_heads = 2;
    c.head_dim = 8;
    c.ffn_dim = 72;
    c.vocab_size = 70;
    if (arch == ARCH_MOA) {
        c.state_layers = {1, 2};
        c.target_n_layers = 4;
    }
    s.dw.init_random(c, 1);
    TrainRng rng(2);
    s.fz.vocab = c.vocab_size;
    s.fz.dim = c.dim;
    s.fz.embd.resize((size_t)c.vocab_size * c.dim);
    s.fz.out_norm.assign(c.dim, 1.0f);
    for (float& x : s.fz.embd) x = (float)rng.normal();  // tied LM head
    const int T = 37;
    s.tokens.resize(T);
    s.states.resize((size_t)T * c.dim);
    for (int& t : s.tokens) t = rng.below(c.vocab_size);
    for (int i = 0; i < c.dim; i++) s.states[i] = (float)rng.normal();
    for (int j = 1; j < T; j++)
        for (int i = 0; i < c.dim; i++)
            s.states[(size_t)j * c.dim + i] = 0.9f * s.states[(size_t)(j - 1) * c.dim + i] + (float)(0.3 * rng.normal());
    s.b.tokens = s.tokens.data();
    s.b.states = s.states.data();
    s.b.T = T;
    const int E = c.n_extra();
    s.extras.resize((size_t)T * E * c.dim);
    for (float& x : s.extras) x = (float)rng.normal();
    s.b.extras = E ? s.extras.data() : nullptr;
    for (int j = 0; j < T; j++) {
        s.wide.insert(s.wide.end(), s.states.begin() + (size_t)j * c.dim, s.states.begin() + (size_t)(j + 1) * c.dim);
        s.wide.insert(s.wide.end(), s.extras.begin() + (size_t)j * E * c.dim, s.extras.begin() + (size_t)(j + 1) * E * c.dim);
    }
    return s;
}

struct Run {
    std::vector<double> losses;
    DraftWeights grads;    // gradients of one iteration of each stage from the initial weights (stage 1 then 2 appended)
    DraftWeights weights;  // after training
    std::vector<float> fh; // inference forward of the trained draft
};

static Run train(Ops& ops, Setup& s, int steps_per_stage, float lr, bool ttt) {
    Run r;
    DraftModelT<Ops> m(ops, s.dw, s.fz);
    m.enable_grads();
    AdamWOptions ao;
    ao.lr = lr;
    ao.warmup = 0;
    ao.clip = 0.5f;
    ao.weight_decay = 0.01f;
    AdamW adam(m, ao);
    auto options = [&](int stage) {
        TrainOptions opt;
        opt.stage = stage;
        opt.w = 3;
        opt.S = 3;
        opt.noise_std = 0.1f;
        opt.ttt = ttt;
        return opt;
    };
    // gradients of each stage's first iteration from the initial weights (both backends see the same weights;
    // later in the run they differ by the weights' tolerance, and a gradient with them)
    for (int stage : {1, 2}) {
        DraftTrainer tr(m, options(stage));
        m.zero_grads();
        tr.run(s.b, stage % 3, 100, 1.0f, true);
        for (int i = 0; i < DT_COUNT; i++) {
            if (!s.c.has(i)) continue;  // a tensor of another architecture
            std::vector<float> g((size_t)s.c.numel(i));
            ops.download(g.data(), m.g[i], g.size());
            r.grads.t[i].insert(r.grads.t[i].end(), g.begin(), g.end());
        }
    }
    for (int stage : {1, 2}) {
        const TrainOptions opt = options(stage);
        DraftTrainer tr(m, opt);
        for (int it = 0; it < steps_per_stage; it++) {
            m.zero_grads();
            IterStats st = tr.run(s.b, (it + stage) % opt.w, 100 + it, 1.0f, true);
            r.losses.push_back(st.loss);
            adam.step();
        }
    }
    m.get_weights(&r.weights);
    if (s.c.arch == ARCH_MEDUSA) {  // the heads on true state 20 with the trained weights (u_k, K x dim)
        DraftModelT<Ops> mm(ops, r.weights, s.fz);
        BufAlloc<Ops> al(ops);
        const size_t KD = (size_t)s.c.medusa_heads * s.c.dim;
        float *f = al.alloc(s.c.dim), *z = al.alloc(KD), *u = al.alloc(KD), *ones = al.alloc(KD);
        const std::vector<float> one(KD, 1.0f);
        ops.upload(ones, one.data(), KD);
        ops.upload(f, s.states.data() + (size_t)20 * s.c.dim, s.c.dim);
        medusa_forward(mm, al, f, z, u, ones, 1);
        r.fh.resize(KD);
        ops.download(r.fh.data(), u, KD);
        return r;
    }
    // inference with the trained weights: queries over true states + one kept prediction (concat)
    Draft d(r.weights, s.fz, ops, s.b.T, 8, 4);
    d.add_true_states(s.wide.data(), 20, s.tokens.data());  // (EAGLE and MoA drafts need the tokens too)
    int tok[2] = {s.tokens[20], s.tokens[21]}, pos[2] = {20, 21};
    std::vector<float> f1(2 * s.c.dim);
    d.forward(tok, pos, 1, nullptr, 0, f1.data(), nullptr);
    int row = 0;
    d.keep_pred(&row, 1);
    uint64_t bits = 1;
    d.forward(tok + 1, pos + 1, 1, &bits, 1, f1.data() + s.c.dim, nullptr);
    r.fh = f1;
    return r;
}

static void check_arch(int arch, bool ttt = false) {
    Setup s = make_setup(arch);
    const std::string name = std::string(draft_arch_name(arch)) + (ttt ? " (training-time test)" : "");
    const char* an = name.c_str();
    CpuOps cpu(2);
    std::unique_ptr<Ops> gpu = make_ops("cuda", 1);
    const int steps = 4;
    const float lr = 3e-3f;
    Run a = train(cpu, s, steps, lr, ttt);
    Run b = train(*gpu, s, steps, lr, ttt);

    CHECK(a.losses.size() == b.losses.size(), "%s: iteration counts", an);
    for (size_t i = 0; i < a.losses.size(); i++) {
        printf("%s iteration %zu: loss cpu %.7f cuda %.7f\n", an, i, a.losses[i], b.losses[i]);
        // later iterations start from weights that already differ slightly (see the weight tolerance)
        CHECK_CLOSE(b.losses[i], a.losses[i], 0.0, i == 0 || i == (size_t)steps ? 1e-5 : 1e-3, "loss");
    }
    std::vector<double> gmax1(DT_COUNT, 0.0);  // max |g| of each tensor's first stage-1 gradient (CPU)
    for (int i = 0; i < DT_COUNT; i++) {
        if (!s.c.has(i)) continue;
        const size_t n = (size_t)s.c.numel(i);
        for (int st = 0; st < 2; st++) {  // the first iteration of stage 1, then of stage 2
            double gmax = 0, err = 0;
            for (size_t k = st * n; k < (st + 1) * n && k < a.grads.t[i].size(); k++) {
                gmax = std::max(gmax, (double)std::fabs(a.grads.t[i][k]));
                err = std::max(err, (double)std::fabs(a.grads.t[i][k] - b.grads.t[i][k]));
            }
            printf("%s grad %-12s stage %d max |g| %.3e  max |g_cuda - g_cpu| %.3e\n", an, draft_tensor_name(i), st + 1,
                   gmax, err);
            CHECK(err <= 1e-5 * gmax, "%s: stage-%d gradient of %s: cuda and cpu differ by %g (max |g| %g)", an, st + 1,
                  draft_tensor_name(i), err, gmax);
            if (st == 0) gmax1[i] = gmax;
        }
    }
    // AdamW divides each gradient by its own running magnitude, so a gradient difference d moves a weight by
    // about lr d / |g| a step: harmless where |g| is large, up to the whole step where |g| is near the
    // gradients' agreement floor (1e-5 max |g|, checked above). Each weight gets wtol plus that share of the
    // 2 x steps updates, estimated from its first stage-1 gradient.
    const double wtol = 2e-6 + 1e-3 * (2 * steps) * lr;
    for (int i = 0; i < DT_COUNT; i++) {
        if (!s.c.has(i)) continue;
        double err = 0, worst = 0, moved = 0;  // max |w_cuda - w_cpu|, its largest share of the weight's tolerance
        for (size_t k = 0; k < a.weights.t[i].size(); k++) {
            const double g = std::fabs(a.grads.t[i][k]), d = std::fabs(a.weights.t[i][k] - b.weights.t[i][k]);
            const double tol = wtol + (2 * steps) * lr * std::min(1.0, 1e-5 * gmax1[i] / std::max(g, 1e-30));
            err = std::max(err, d);
            worst = std::max(worst, d / tol);
            moved = std::max(moved, (double)std::fabs(a.weights.t[i][k] - s.dw.t[i][k]));
        }
        printf("%s weights %-12s moved up to %.3e by training; max |w_cuda - w_cpu| %.3e, at most %.3f of its tolerance "
               "(base %.1e)\n", an, draft_tensor_name(i), moved, err, worst, wtol);
        CHECK(worst <= 1.0, "%s: trained %s: cuda and cpu differ by %.3f of a weight's tolerance (max difference %g)", an,
              draft_tensor_name(i), worst, err);
        CHECK(moved > 10 * wtol, "%s: %s did not train (moved %g)", an, draft_tensor_name(i), moved);
    }
    double ferr = 0, fmax = 0;
    for (size_t k = 0; k < a.fh.size(); k++) {
        ferr = std::max(ferr, (double)std::fabs(a.fh[k] - b.fh[k]));
        fmax = std::max(fmax, (double)std::fabs(a.fh[k]));
    }
    printf("%s draft inference f^: max |cuda - cpu| %.3e (max |f^| %.3e)\n", an, ferr, fmax);
    CHECK(ferr <= 1e-3 * fmax, "%s: trained draft's inference forward differs: %g", an, ferr);
}

int main() {
    check_arch(ARCH_BEAGLE);
    check_arch(ARCH_EAGLE);
    check_arch(ARCH_EAGLE, true);  // stage 2 over S = 3 steps: the xattn kernels' PREFIX mask with set0_qrow
    check_arch(ARCH_MEDUSA);
    check_arch(ARCH_MOA);          // LSA (a BLOCK mask over groups of rows, set 0 empty), the tokens' self-attention
    return test_summary("test_cuda_backend_train");
}
