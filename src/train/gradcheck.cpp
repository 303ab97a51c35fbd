// gradcheck.cpp: see gradcheck.h. Called by `beagle gradcheck` (src/cli/gradcheck.cpp) and
// test/cli/test_gradcheck.sh. The model code under test is the same DraftTrainerT / draft_layers /
// losses / op-kernel templates the float path uses, instantiated for double.
#include "gradcheck.h"

#include <cmath>
#include <vector>

#include "../core/common.h"
#include "../backend/cpu/ops_f64.h"
#include "../core/rng.h"
#include "trainer.h"

namespace beagle {

bool run_gradcheck(const GradcheckOptions& o, FILE* out, std::vector<GradcheckTensor>* result) {
    DraftConfig c;
    c.arch = o.arch;
    c.dim = o.dim;
    c.n_heads = o.n_heads;
    c.n_kv_heads = o.n_kv_heads;
    c.head_dim = o.head_dim;
    c.ffn_dim = o.ffn_dim;
    c.vocab_size = o.vocab;
    c.rope_theta = 10000.0f;
    for (int k = 0; k < o.state_layers; k++) c.state_layers.push_back(k);
    if (o.arch == ARCH_MEDUSA) c.medusa_heads = o.medusa_heads;
    c.validate("gradcheck config");
    BEAGLE_CHECK(o.T >= 2 && o.T <= 4096, "gradcheck: T %d outside 2..4096", o.T);
    BEAGLE_CHECK(o.h > 0 && o.tol > 0, "gradcheck: h and tol must be > 0");

    // random draft, frozen tensors and data (norm gains away from 1 so their gradients are generic)
    TrainRng rng(o.seed);
    DraftWeights dw;
    dw.init_random(c, o.seed * 7919 + 1);
    for (int i = 0; i < DT_COUNT; i++)
        if (draft_tensor_is_norm(i))
            for (float& x : dw.t[i]) x = (float)(1.0 + 0.6 * (rng.uniform() - 0.5));  // (none for a norm the arch lacks)
    for (int i : {DT_MIX, DT_MEDUSA_W, DT_MEDUSA_B})  // away from their zero init (none where the arch lacks them)
        for (float& x : dw.t[i]) x = (float)(0.3 * rng.normal());
    DraftFrozen fz;
    fz.vocab = c.vocab_size;
    fz.dim = c.dim;
    fz.embd.resize((size_t)c.vocab_size * c.dim);
    fz.lm_head.resize(fz.embd.size());
    fz.out_norm.resize(c.dim);
    for (float& x : fz.embd) x = (float)rng.normal();
    for (float& x : fz.lm_head) x = (float)(0.5 * rng.normal());
    for (float& x : fz.out_norm) x = (float)(1.0 + 0.4 * (rng.uniform() - 0.5));
    std::vector<int> tokens(o.T);
    std::vector<float> states((size_t)o.T * c.dim);
    std::vector<uint8_t> mask(o.T, 1);
    for (int& t : tokens) t = rng.below(c.vocab_size);
    for (float& x : states) x = (float)rng.normal();
    std::vector<float> extras((size_t)o.T * c.n_extra() * c.dim);
    for (float& x : extras) x = (float)rng.normal();
    if (o.loss_mask)
        for (int j = 4; j < o.T; j += 5) mask[j] = 0;

    TrainOptions topt;
    topt.stage = o.stage;
    topt.w = o.w;
    topt.S = o.S;
    topt.sim_grad_through = o.sim_grad_through;
    topt.ttt = o.ttt;
    topt.noise_std = o.noise_std;
    topt.loss.hard_labels = o.hard_labels;
    topt.loss.vocab_chunk = o.vocab_chunk;
    TrainBatch b;
    b.tokens = tokens.data();
    b.states = states.data();
    b.extras = c.n_extra() ? extras.data() : nullptr;
    b.loss_mask = o.loss_mask ? mask.data() : nullptr;
    b.T = o.T;
    b.pos0 = o.pos0;
    uint64_t noise_seed = o.seed + 12345;

    CpuOps64 ops(1);
    ops.plant_swiglu_bwd_bug = o.plant_bug;
    if (o.plant_bug)
        fprintf(stderr, "PLANTED BUG: swiglu backward's dgate is scaled by (1 + 1e-4); this check must FAIL "
                        "(w_gate and everything upstream of it)\n");
    DraftModelT<CpuOps64> m(ops, dw, fz);
    m.enable_grads();
    DraftTrainerT<CpuOps64> tr(m, topt);
    bool detached = o.stage == 2 && !o.sim_grad_through;
    std::vector<double> pred;
    if (detached) tr.record_pred = &pred;
    m.zero_grads();
    IterStats st = tr.run(b, o.offset, noise_seed, 1.0f, true);
    tr.record_pred = nullptr;
    if (detached) tr.frozen_pred = &pred;  // finite differences with the predicted states held fixed

    const std::string medusa = strfmt(" (arch medusa: %d heads)", c.medusa_heads);
    const char* mode = o.arch == ARCH_MEDUSA ? medusa.c_str()
                       : o.arch == ARCH_EAGLE ? (o.ttt && o.stage == 2 ? " (arch eagle, training-time test: inputs f^ held fixed)"
                                                                      : " (arch eagle: fc + causal self-attention layer)")
                       : o.arch == ARCH_MOA ? " (arch moa: LSA keys, token self-attention, cross-attention block)"
                       : o.stage == 1       ? ""
                                            : (o.sim_grad_through ? " (sim-grad-through)" : " (detached)");
    if (out) {
        fprintf(out,
                "gradcheck stage %d%s, float64: dim %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, T %d, w %d%s, "
                "offset %d, %s labels%s, loss %.10g%s\n",
                o.stage, mode, c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.vocab_size, o.T, o.w,
                o.stage == 2 ? strfmt(", S %d", o.S).c_str() : "", o.offset, o.hard_labels ? "token" : "soft",
                c.n_extra() ? strfmt(", %d state layers", c.n_extra()).c_str() : "",
                st.loss, o.plant_bug ? ", PLANTED BUG in swiglu backward" : "");
        fprintf(out, "%-8s %7s %12s %12s %10s %10s\n", "tensor", "elems", "|grad|", "|fd|", "rel_err", "max_err");
    }
    bool all = true;
    std::vector<GradcheckTensor> res;
    for (int i = 0; i < DT_COUNT; i++) {
        if (!c.has(i)) continue;
        size_t n = (size_t)c.numel(i);
        std::vector<double> g(n), fd(n);
        ops.download(g.data(), m.g[i], n);
        for (size_t k = 0; k < n; k++) {
            double orig = m.w[i][k], v;
            v = orig + o.h;
            ops.upload(m.w[i] + k, &v, 1);
            double lp = tr.run(b, o.offset, noise_seed, 1.0f, false).loss;
            v = orig - o.h;
            ops.upload(m.w[i] + k, &v, 1);
            double lm = tr.run(b, o.offset, noise_seed, 1.0f, false).loss;
            ops.upload(m.w[i] + k, &orig, 1);
            fd[k] = (lp - lm) / (2 * o.h);
        }
        GradcheckTensor t;
        t.name = draft_tensor_name(i);
        t.n = (int64_t)n;
        double dd = 0, gg = 0, ff = 0, finf = 0, dmax = 0;
        for (size_t k = 0; k < n; k++) {
            double d = g[k] - fd[k];
            dd += d * d;
            gg += g[k] * g[k];
            ff += fd[k] * fd[k];
            finf = std::max(finf, std::fabs(fd[k]));
            dmax = std::max(dmax, std::fabs(d));
        }
        t.grad_norm = std::sqrt(gg);
        t.fd_norm = std::sqrt(ff);
        double denom = std::max(t.grad_norm, t.fd_norm);
        t.rel = denom > 0 ? std::sqrt(dd) / denom : 1.0;  // an all-zero gradient is a failure
        t.max_rel = finf > 0 ? dmax / finf : 1.0;
        t.pass = t.rel <= o.tol && t.max_rel <= o.tol;
        all = all && t.pass;
        if (out)
            fprintf(out, "%-8s %7lld %12.5e %12.5e %10.2e %10.2e  %s\n", t.name.c_str(), (long long)t.n, t.grad_norm,
                    t.fd_norm, t.rel, t.max_rel, t.pass ? "ok" : "FAIL");
        res.push_back(t);
    }
    if (out)
        fprintf(out, "%s: %s tensor's relative error <= %g (central differences, h = %g)\n", all ? "PASS" : "FAIL",
                all ? "every" : "not every", o.tol, o.h);
    if (result) *result = res;
    return all;
}

}  // namespace beagle
