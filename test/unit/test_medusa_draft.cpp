// test_medusa_draft.cpp: the Medusa draft (arch medusa: K heads on the target's last true state, medusa_layers.h,
// medusa_drafter.h) on the stories260K target.
//  1. The file: "arch medusa" and "medusa_heads K" recorded, a round trip keeps every tensor, and bad files are
//     refused with a clear error: a config whose K disagrees with the tensors' shapes, K = 0, an unknown arch,
//     a Medusa config on a Beagle block (Draft), K = 0 in a config.
//  2. The heads' math: zero-initialised heads (u_k = f_p) give every head the target's own next-token
//     distribution, so an untrained chain proposes the root token K times (checked on every verified tree).
//  3. Greedy output equals plain greedy decoding token for token over many prompts (chain, tree, tree-60,
//     cost-aware tree with a fixed cost model, mode auto), for random heads (one set over a reduced draft
//     vocabulary) and for the shipped
//     weights/medusa-stories260K.bin, whose taus must reach the floors below (a head read at the wrong depth
//     falls under them).
//  4. Typical acceptance (accept_typical, Medusa-2) on hand-made trees: the threshold min(eps, delta e^-H), the
//     longest passing path, the target's argmax after it.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "backend/cpu/cpu_ops.h"
#include "core/crc32.h"
#include "core/rng.h"
#include "decode/accept.h"
#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

static std::string slurp(const std::string& path) { return read_file(path); }

// `bytes` with `from` replaced by `to` (the same length) and the CRC fixed, written to path
static void write_patched(const std::string& path, std::string bytes, const std::string& from, const std::string& to) {
    const size_t at = bytes.find(from);
    CHECK(at != std::string::npos && from.size() == to.size(), "patch '%s' not applicable", from.c_str());
    if (at == std::string::npos) return;
    bytes.replace(at, from.size(), to);
    const uint32_t crc = crc32_update(0, bytes.data(), bytes.size() - 4);
    memcpy(&bytes[bytes.size() - 4], &crc, 4);
    write_file_atomic(path, bytes.data(), bytes.size());
}

// Records every verified tree (the observer sees each verify before the drafter does).
struct TreeRecorder : VerifyObserver {
    std::vector<DraftTree> trees;
    void verified(const DraftTree& tree, const std::vector<int>&, const float*, int) override { trees.push_back(tree); }
};

static void typical_acceptance() {
    // V = 4; node rows are logits; temperature 1. Root row p = (0.5, 0.3, 0.15, 0.05): H = 1.142,
    // delta e^-H = 0.0957, threshold min(0.09, 0.0957) = 0.09: tokens 0, 1, 2 pass, 3 does not.
    const int V = 4;
    auto logits_of = [](std::vector<double> p) {
        std::vector<float> z;
        for (double x : p) z.push_back((float)std::log(x));
        return z;
    };
    std::vector<std::vector<float>> rows(8, logits_of({0.25, 0.25, 0.25, 0.25}));
    rows[0] = logits_of({0.5, 0.3, 0.15, 0.05});
    // node 1's row: H = 1.275, delta e^-H = 0.0838 < 0.09 is the threshold: p = 0.31 passes, p = 0.07 does not
    rows[1] = logits_of({0.31, 0.31, 0.31, 0.07});
    SamplingParams sp;
    sp.temperature = 1.0f;
    Rng rng(1);
    LogitsRow row = [&](int i) { return rows[i].data(); };
    DraftTree t;
    t.reset(0);
    const int a = t.add(0, 3, 0);  // p 0.05: fails (a leaf: its row, rows[1], is not read)
    const int b = t.add(0, 2, 0);  // p 0.15: passes, a leaf
    const int c = t.add(0, 1, 0);  // p 0.30: passes, and its child passes: the longest path
    const int d = t.add(c, 0, 0);  // row c uniform: 0.25 > min(0.09, 0.3 / 4) passes
    (void)a;
    (void)b;
    int bonus = -1;
    std::vector<int> path = accept_typical(t, row, V, sp, rng, &bonus);
    CHECK((path == std::vector<int>{0, c, d}), "typical: path of %zu nodes, expected root, c, d", path.size());
    CHECK(bonus == 0, "typical: the token after the path is the argmax of d's row (0 of a tie), got %d", bonus);
    // node 1's row: a child with p 0.07 fails under the threshold 0.0838, one with 0.31 passes
    DraftTree u;
    u.reset(0);
    const int b2 = u.add(0, 2, 0);
    u.add(b2, 3, 0);
    path = accept_typical(u, row, V, sp, rng, &bonus);
    CHECK((path == std::vector<int>{0, b2}), "typical: p 0.07 under threshold 0.0838 must fail (path %zu nodes)", path.size());
    CHECK(bonus == 0, "typical: bonus argmax of row 1, got %d", bonus);
    u.token[2] = 1;
    path = accept_typical(u, row, V, sp, rng, &bonus);
    CHECK(path.size() == 3, "typical: p 0.31 passes (path %zu nodes)", path.size());
    // temperature 0.5 sharpens the root row: p = (0.685, 0.247, 0.062, 0.007), threshold 0.09: token 2 then fails
    sp.temperature = 0.5f;
    DraftTree w;
    w.reset(0);
    w.add(0, 2, 0);
    path = accept_typical(w, row, V, sp, rng, &bonus);
    CHECK(path.size() == 1 && bonus == 0, "typical at temperature 0.5: token 2 (p 0.06) fails, bonus 0 (got %zu, %d)",
          path.size(), bonus);
}

int main() {
    typical_acceptance();
    const std::string M = test_models_dir(), target = M + "stories260K.bin";
    std::vector<std::string> prompts = test_stories_prompts();
    prompts.resize(std::min<size_t>(prompts.size(), sanitized_build() ? 3 : 10));
    const std::string path = "/tmp/beagle_test_medusa_" + std::to_string(getpid()) + ".bin";
    try {
        Session s(target, M + "tok512.bin", 1, 512, 64);
        DraftConfig c = draft_config_for_target(s.mf->config, s.tok->spec());
        c.arch = ARCH_MEDUSA;
        c.medusa_heads = 3;

        // 1. the file
        DraftWeights zero;
        zero.init_random(c, 1);
        for (int t = 0; t < DT_COUNT; t++)
            CHECK(c.has(t) == (t == DT_MEDUSA_W || t == DT_MEDUSA_B), "Medusa tensor set: %s", draft_tensor_name(t));
        CHECK(zero.t[DT_MEDUSA_W].size() == (size_t)3 * c.dim * c.dim && zero.t[DT_MEDUSA_B].size() == (size_t)3 * c.dim,
              "Medusa shapes: W %zu, b %zu", zero.t[DT_MEDUSA_W].size(), zero.t[DT_MEDUSA_B].size());
        DraftWeights rnd = zero;
        TrainRng r(5);
        for (int t : {DT_MEDUSA_W, DT_MEDUSA_B})
            for (float& x : rnd.t[t]) x = (float)(0.1 * r.normal());
        save_draft(path, rnd);
        const std::string bytes = slurp(path);
        CHECK(bytes.find("arch medusa\n") != std::string::npos && bytes.find("medusa_heads 3\n") != std::string::npos,
              "a Medusa file records its arch and K");
        DraftWeights back = load_draft(path);
        CHECK(back.cfg.arch == ARCH_MEDUSA && back.cfg.medusa_heads == 3, "round trip: arch %d, K %d", back.cfg.arch,
              back.cfg.medusa_heads);
        for (int t = 0; t < DT_COUNT; t++) CHECK(back.t[t] == rnd.t[t], "round trip: tensor %s", draft_tensor_name(t));
        write_patched(path, bytes, "medusa_heads 3\n", "medusa_heads 2\n");
        CHECK_THROWS(load_draft(path), "tensor 'medusa_w' has shape");
        write_patched(path, bytes, "medusa_heads 3\n", "medusa_heads 0\n");
        CHECK_THROWS(load_draft(path), "medusa_heads");
        write_patched(path, bytes, "arch medusa\n", "arch medusz\n");
        CHECK_THROWS(load_draft(path), "not one of beagle, eagle, medusa");
        write_patched(path, bytes, "medusa_heads 3\n", "medusa_heads x\n");
        CHECK_THROWS(load_draft(path), "medusa_heads");
        DraftConfig k0 = c;
        k0.medusa_heads = 0;
        CHECK_THROWS(k0.validate("test"), "needs 1..16 heads");
        DraftConfig kb = c;
        kb.arch = ARCH_BEAGLE;
        CHECK_THROWS(kb.validate("test"), "Medusa drafts only");
        DraftFrozen fz = frozen_from_target(*s.mf, true);
        CpuOps ops(1);
        CHECK_THROWS(Draft(rnd, fz, ops, 16), "MedusaDrafter");
        CHECK_THROWS(make_drafter(s, "nonsense", BeagleDraftParams(), &rnd, "rnd"), "unknown speculative mode");

        // 2. zero heads repeat the target's next-token guess: every candidate of a chain is the root's token
        SamplingParams greedy;
        greedy.temperature = 0;
        {
            BeagleDraftParams chain;
            chain.gamma = 5;  // more than K: K candidates
            std::unique_ptr<Drafter> d = make_drafter(s, "chain", chain, &zero, "zero");
            TreeRecorder rec;
            Acceptance acc;
            acc.observer = &rec;
            SpecParams spp;
            SpecStats st;
            std::vector<int> got;
            generate_speculative(s, *d, s.encode_prompt(prompts[0], false, ""), 40, greedy, spp, nullptr, &st, &got, acc);
            int bad = 0;
            for (const DraftTree& t : rec.trees) {
                bad += t.size() != 4;
                for (int i = 1; i < t.size(); i++) bad += t.token[i] != t.token[0];
            }
            CHECK(!rec.trees.empty() && bad == 0, "zero heads: %d of %zu trees not the root repeated 3 times", bad, rec.trees.size());
        }

        // 3. greedy exactness: random and trained heads, every mode
        BeagleDraftParams chain;
        chain.gamma = 5;
        BeagleDraftParams tree;
        tree.depth = 3;
        tree.topk = 4;
        tree.total_tokens = 12;
        BeagleDraftParams tree60;
        tree60.total_tokens = 60;
        BeagleDraftParams aware;  // a fixed cost model (verifying T tokens costs 1 + 0.3 (T - 1) steps), fixed drafting cost
        aware.verify_cost.assign(25, 1.0);
        for (int T = 1; T <= 24; T++) aware.verify_cost[T] = 1 + 0.3 * (T - 1);
        aware.auto_draft_cost = 0.15;
        aware.lookup_ngram = 3;
        const char* root = getenv("BEAGLE_ROOT");
        const std::string shipped = std::string(root ? root : ".") + "/weights/medusa-stories260K.bin";
        DraftWeights trained;
        const bool have = file_exists(shipped);
        if (have) trained = load_draft_for(s, shipped);
        else CHECK(false, "%s missing: the trained Medusa cases cannot run", shipped.c_str());
        struct Case { const char* name; const char* mode; const DraftWeights* w; BeagleDraftParams p; double min_tau; };
        DraftWeights rv = rnd;  // a reduced draft vocabulary: the heads' logits over the target head's rows for d2t
        for (int t = 0; t < rv.cfg.vocab_size; t++)
            if (t % 3 != 1) rv.d2t.push_back(t);
        rv.cfg.draft_vocab = (int)rv.d2t.size();
        std::vector<Case> cases = {
            {"random chain", "chain", &rnd, chain, 1.0},
            {"random tree", "tree", &rnd, tree, 1.0},
            {"random tree, reduced vocab", "tree", &rv, tree, 1.0},
        };
        // floors below the shipped draft's measured taus (docs/paper-comparison.md): a head read at the wrong depth
        // (d instead of d - 1) falls far under them
        if (have)
            for (const Case& k : std::vector<Case>{{"trained chain", "chain", &trained, chain, 1.2},
                                                  {"trained tree", "tree", &trained, tree, 1.35},
                                                  {"trained tree 60", "tree", &trained, tree60, 1.55},
                                                  {"trained tree, cost-aware", "tree", &trained, aware, 1.0},
                                                  {"trained auto", "auto", &trained, aware, 1.0}})
                cases.push_back(k);
        std::vector<std::unique_ptr<Drafter>> drafters;
        for (const Case& k : cases) drafters.push_back(make_drafter(s, k.mode, k.p, k.w, k.name));
        std::vector<double> committed(cases.size(), 0), rounds(cases.size(), 0);
        int mismatches = 0;
        for (size_t i = 0; i < prompts.size(); i++) {
            const std::vector<int> ids = s.encode_prompt(prompts[i], false, "");
            GenStats pst;
            std::vector<int> plain;
            s.generate_plain(ids, 128, greedy, nullptr, &pst, &plain);
            for (size_t k = 0; k < cases.size(); k++) {
                SpecParams spp;
                spp.learn_cost = false;  // the fixed cost model above
                SpecStats st;
                std::vector<int> got;
                generate_speculative(s, *drafters[k], ids, 128, greedy, spp, nullptr, &st, &got);
                mismatches += got != plain;
                CHECK(got == plain, "prompt %zu, %s: %zu tokens vs plain's %zu, not the same", i, cases[k].name, got.size(),
                      plain.size());
                committed[k] += st.gen_tokens_after_root;
                rounds[k] += st.rounds;
            }
        }
        for (size_t k = 0; k < cases.size(); k++) {
            const double tau = rounds[k] ? committed[k] / rounds[k] : 0;
            printf("%-26s tau %.3f over %.0f rounds\n", cases[k].name, tau, rounds[k]);
            CHECK(tau >= cases[k].min_tau, "%s: tau %.3f < %.2f", cases[k].name, tau, cases[k].min_tau);
        }
        printf("%d mismatches over %zu prompts x %zu drafters\n", mismatches, prompts.size(), cases.size());
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    // SmolLM2-135M (Q4_1, 30 layers, dim 576, GQA 9/3): random heads through the target's quantized LM head, chain and
    // tree, two prompts of 24 greedy tokens (a few seconds; the sanitized build: one prompt of 6 tokens, the same paths)
    const char* env = getenv("BEAGLE_MODEL");
    const std::string smol = env ? env : test_root() + "/weights/SmolLM2-135M-Instruct.Q4_1.gguf";
    const int smol_n = sanitized_build() ? 6 : 24;
    std::vector<const char*> smol_prompts = {"The capital of France is", "def fibonacci(n):"};
    if (sanitized_build()) smol_prompts.resize(1);
    if (!file_exists(smol)) {
        SKIP_PART("%s not present (make model): the SmolLM2 part did not run", smol.c_str());
    } else try {
        Session s(smol, "", 2, 256, 64);
        DraftConfig c = draft_config_for_target(s.mf->config, s.tok->spec());
        c.arch = ARCH_MEDUSA;
        c.medusa_heads = 4;
        DraftWeights w;
        w.init_random(c, 3);
        TrainRng r(4);
        for (int t : {DT_MEDUSA_W, DT_MEDUSA_B})
            for (float& x : w.t[t]) x = (float)(0.02 * r.normal());
        SamplingParams greedy;
        greedy.temperature = 0;
        BeagleDraftParams chain;
        chain.gamma = 4;
        BeagleDraftParams tree;
        tree.depth = 3;
        tree.topk = 3;
        tree.total_tokens = 10;
        std::unique_ptr<Drafter> dc = make_drafter(s, "chain", chain, &w, "smol medusa"),
                                 dt = make_drafter(s, "tree", tree, &w, "smol medusa");
        for (const char* prompt : smol_prompts) {
            const std::vector<int> ids = s.encode_prompt(prompt, false, "");
            GenStats pst;
            std::vector<int> plain;
            s.generate_plain(ids, smol_n, greedy, nullptr, &pst, &plain);
            for (Drafter* d : {dc.get(), dt.get()}) {
                SpecParams spp;
                SpecStats st;
                std::vector<int> got;
                generate_speculative(s, *d, ids, smol_n, greedy, spp, nullptr, &st, &got);
                CHECK(got == plain, "SmolLM2 '%s', %s: not plain greedy's tokens", prompt, d->name());
                printf("SmolLM2 %-5s '%s': tau %.3f\n", d->name(), prompt, st.tau());
            }
        }
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    std::remove(path.c_str());
    return test_summary("medusa_draft");
}
