// test_spec_edges.cpp: speculative decoding at the edges (EOS inside an accepted path, the
// context filling up in the middle of a tree, a tree larger than the context left): the output is
// plain greedy decoding's, cut at the same place for the same reason, never past it.
// A "script" drafter proposes the plain output itself (so whole chains are accepted) followed by
// junk, which puts the end-of-sequence token in the middle of accepted paths; the shipped stories260K
// draft (tree, 60 nodes) is run on the same cases.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "decode/verify_cost.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

// Proposes script[h+1 .. h+gamma] as a chain (h = committed tokens before the root), then junk.
class ScriptDrafter : public Drafter {
public:
    ScriptDrafter(std::vector<int> script, int gamma, int junk) : script_(std::move(script)), gamma_(gamma), junk_(junk) {}
    const char* name() const override { return "script"; }
    void begin(const std::vector<int>&, const float*) override {}
    void accept(const DraftTree&, const std::vector<int>&, const float*) override {}
    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams&, Rng&) override {
        size_t h = history.size();
        int node = 0;
        for (int k = 1; k <= gamma_ && tree->size() < room; k++) {
            size_t i = h + k;
            int t = i < script_.size() ? script_[i] : junk_;
            if (i + 1 == script_.size() && k < gamma_) eos_mid_chain++;  // the last scripted token, junk after it
            node = tree->add(node, t, 0.0f);
        }
    }
    int eos_mid_chain = 0;

private:
    std::vector<int> script_;
    int gamma_, junk_;
};

// VerifyCost: the start-up table corrected by observed forward times. With plain steps of 5 ms and
// 3-token verifies of 9 ms against a table saying cost(3) = 1.6, each token past the first costs
// (9/5 - 1.6) / 2 = 0.1 steps more than the table says, so cost(3) becomes 1.8 and cost(5) = 2.2 + 0.4.
// Before 4 plain steps nothing changes, and a plain step right after a larger pass is not one; a T beyond
// the table, T = 0 or a bad time is ignored. A table
// whose first steps are nearly free (cost(2) = 1.02, as timed at start-up on a machine where decode is
// memory-bound) and 2-token verifies 12% dearer than plain steps: cost(2) = 1.12 and cost(8) = table +
// 0.7, not the table's excess scaled by (1.12 - 1) / 0.02 (a multiplicative correction, even clamped at
// 4x, would overreact).
static void test_verify_cost() {
    std::vector<double> table(9, 1.0);
    for (int T = 1; T <= 8; T++) table[T] = 1 + 0.3 * (T - 1);
    VerifyCost c(table);
    CHECK(c.max_tokens() == 8 && c[1] == 1.0 && std::abs(c[3] - 1.6) < 1e-12, "table as given");
    c.observe(3, 0.009, 0);  // no plain step seen yet: ignored
    for (int i = 0; i < 4; i++) c.observe(1, 0.05, 0);  // the 4 passes after a 3-token pass (10x slow): not counted
    c.observe(1, 0.005, 0);
    c.observe(3, 0.009, 0);  // 1 plain step: still ignored
    CHECK(std::abs(c[3] - 1.6) < 1e-12, "cost(3) moved before 2 plain steps (or a step after a larger pass counted): %g",
          c[3]);
    c.observe(2, 0.05, 0);   // a 2-token pass, 10x slow: neither t1 (b waits) nor a break in the run
    for (int i = 0; i < 3; i++) c.observe(1, 0.05, 0);  // soon after the 3-token pass, 10x slow: not counted
    c.observe(1, 0.005, 0);  // the 5th small pass in a row: the 2nd plain step counted
    for (int i = 0; i < 50; i++) c.observe(3, 0.009, 0);
    c.observe(0, 1.0, 0);
    c.observe(2, -1.0, 0);
    c.observe(2, NAN, 0);
    CHECK(std::abs(c.per_token_excess() - 0.1) < 1e-9 && std::abs(c[3] - 1.8) < 1e-9 && std::abs(c[5] - 2.6) < 1e-9,
          "learnt excess %.6f per token, cost(3) %.6f, cost(5) %.6f; expected 0.1, 1.8, 2.6", c.per_token_excess(), c[3],
          c[5]);
    for (int i = 0; i < 200; i++) c.observe(3, 0.5, 0);  // absurdly slow verifies: the excess is clamped at 1 per token
    CHECK(c.per_token_excess() <= 1.0 + 1e-9 && c.per_token_excess() > 0.95 && std::abs(c[3] - (1.6 + 2 * c.per_token_excess())) < 1e-9,
          "clamped excess %.4f, cost(3) %.4f", c.per_token_excess(), c[3]);
    for (int i = 0; i < 400; i++) c.observe(3, 0.001, 0);  // verifies far cheaper than the table: clamped at -1/4, cost >= 1
    CHECK(c.per_token_excess() >= -0.25 - 1e-9 && c.per_token_excess() < -0.2 && c[3] >= 1.1 - 1e-9 && c[2] >= 1.0,
          "excess %.4f after cheap verifies: cost(2) %.4f, cost(3) %.4f (expected >= -1/4 per token, costs >= 1)",
          c.per_token_excess(), c[2], c[3]);
    std::vector<double> flat = {1.0, 1.0, 1.02, 1.06, 1.12, 1.2, 1.3, 1.42, 1.56};
    VerifyCost f(flat);
    for (int i = 0; i < 8; i++) f.observe(1, 0.005, 0);  // (the first 4 of a new cost model: after its prefill)
    for (int i = 0; i < 40; i++) f.observe(2, 0.0056, 0);
    CHECK(std::abs(f[2] - 1.12) < 1e-9 && std::abs(f[8] - (1.56 + 0.7)) < 1e-9,
          "flat table, 2-token verifies 1.12 steps: cost(2) %.4f, cost(8) %.4f; expected 1.12, 2.26", f[2], f[8]);
    // per context range: range 0 (< 128 tokens) keeps its excess of 0.1 while 800 learns its own; reading
    // goes with the latest context (observe, set_context)
    std::vector<double> lin(9, 1.0);
    for (int T = 1; T <= 8; T++) lin[T] = 1 + 0.3 * (T - 1);
    VerifyCost r(lin);
    for (int i = 0; i < 8; i++) r.observe(1, 0.005, 50);
    for (int i = 0; i < 50; i++) r.observe(3, 0.009, 50);  // 1.8 steps: +0.1 a token
    CHECK(std::abs(r[3] - 1.8) < 1e-9 && r.range_of(127) == 0 && r.range_of(128) == 1 && r.range_of(1023) == 3 &&
              r.range_of(1 << 20) == VerifyCost::kRanges - 1,
          "range 0: cost(3) %.4f (expected 1.8)", r[3]);
    r.observe(3, 0.009, 800);  // no plain step in that range yet: range 0's excess, borrowed
    CHECK(std::abs(r[3] - 1.8) < 1e-9, "range of 800 before its plain steps: cost(3) %.4f (expected range 0's 1.8)", r[3]);
    for (int i = 0; i < 8; i++) r.observe(1, 0.010, 800);  // the first 4 after the 3-token pass not counted
    for (int i = 0; i < 50; i++) r.observe(3, 0.014, 800);  // 1.4 steps: -0.1 a token
    CHECK(std::abs(r[3] - 1.4) < 1e-9, "range of 800: cost(3) %.4f (expected 1.4)", r[3]);
    r.set_context(60);
    CHECK(std::abs(r[3] - 1.8) < 1e-9 && std::abs(r.per_token_excess() - 0.1) < 1e-9,
          "back at context 60: cost(3) %.4f (expected range 0's 1.8)", r[3]);
    VerifyCost up(lin);  // a longer range's excess is never borrowed by a shorter one
    for (int i = 0; i < 8; i++) up.observe(1, 0.010, 800);
    for (int i = 0; i < 50; i++) up.observe(3, 0.014, 800);
    up.set_context(60);
    CHECK(std::abs(up[3] - 1.6) < 1e-12, "context 60, only 800 learnt: cost(3) %.4f (expected the table's 1.6)", up[3]);
    // staleness: no plain step observed in a range's last 32 passes (256 once it has 2 of them); a prompt's
    // prefill (set_context) restarts the run of small passes, so its first 4 plain steps are not observed
    VerifyCost st(lin);
    for (int i = 0; i < 31; i++) st.observe(3, 0.009, 0);
    CHECK(!st.t1_stale(), "stale after 31 passes");
    st.observe(3, 0.009, 0);
    CHECK(st.t1_stale(), "not stale after 32 passes without a plain step");
    for (int i = 0; i < 5; i++) st.observe(1, 0.005, 0);  // 1 observed
    CHECK(!st.t1_stale(), "stale right after plain steps");
    st.set_context(0);
    for (int i = 0; i < 4; i++) st.observe(1, 0.005, 0);  // after the prefill: not observed
    for (int i = 0; i < 31; i++) st.observe(3, 0.009, 0);
    CHECK(st.t1_stale(), "not stale 35 passes after the last observed plain step (the 4 after a prefill observed?)");
    for (int i = 0; i < 5; i++) st.observe(1, 0.005, 0);  // the 5th observed: t1 has 2
    for (int i = 0; i < 255; i++) st.observe(3, 0.009, 0);
    CHECK(!st.t1_stale(), "stale before 256 passes once t1 has 2 observations");
    st.observe(3, 0.009, 0);
    CHECK(st.t1_stale(), "not stale after 256 passes without a plain step");
    st.observe(3, 0.009, 200);
    CHECK(!st.t1_stale(), "range of 200, never observed: stale after its first pass (expected after 32)");
    // past the table (a batch of trees): priced and learnt on the table's last slope; a plain round of k
    // rows (unit k: a server's batch) measures t1 as t_k / table[k], and one-token passes are not its unit
    VerifyCost past(lin);
    for (int i = 0; i < 6; i++) past.observe(1, 0.005, 0);
    for (int i = 0; i < 50; i++) past.observe(12, 0.005 * (1 + 0.3 * 11 + 0.1 * 11), 0);
    CHECK(std::abs(past.per_token_excess() - 0.1) < 1e-9 && std::abs(past[12] - 5.4) < 1e-9,
          "passes past the table: excess %.4f, cost(12) %.4f (expected 0.1, 5.4)", past.per_token_excess(), past[12]);
    VerifyCost k4(lin, 4);
    for (int i = 0; i < 8; i++) k4.observe(1, 0.05, 0);  // one-token passes: not a batch's plain round
    for (int i = 0; i < 20; i++) k4.observe(12, 0.005 * (1 + 0.3 * 11 + 0.2 * 11), 0);
    CHECK(k4.per_token_excess() == 0 && k4.t1_stale() == false, "unit 4: learnt from one-token passes (excess %.4f)",
          k4.per_token_excess());
    for (int i = 0; i < 6; i++) k4.observe(4, 0.005 * lin[4], 0);  // settled plain rounds of 4 rows: t1 5 ms
    for (int i = 0; i < 50; i++) k4.observe(12, 0.005 * (1 + 0.3 * 11 + 0.2 * 11), 0);
    CHECK(std::abs(k4.per_token_excess() - 0.2) < 1e-9, "unit 4: excess %.4f after plain rounds of 4 rows (expected 0.2)",
          k4.per_token_excess());
    VerifyCost none;
    none.observe(1, 0.005, 0);  // no table: a no-op
    CHECK(none.empty(), "empty cost table stays empty");
}

// best_prefix: the candidates a round verifies. Costs 1 / 1.1 / 1.5 / 1.9 decode steps for 1 / 2 / 3 / 4
// tokens: with acceptance chances 0.5, 0.4, 0.05, 1.5 / 1.1 = 1.364 tokens per step (one candidate) beats
// 1.9 / 1.5 = 1.267 (two); with 0.9, 0.9, 0.05, 2.8 / 1.5 = 1.867 (two) beats 1.9 / 1.1 = 1.727 (one); a
// third at 0.05 never pays. All-unlikely candidates: none (a plain step). A list longer than the table is
// cut to max_tokens - 1. And the step time that converts drafting seconds to steps: a 5.6 ms 2-token
// verify at cost(2) = 1.12 is a 5 ms step.
static void test_best_prefix() {
    VerifyCost c(std::vector<double>{1.0, 1.0, 1.1, 1.5, 1.9});
    const double p[] = {0.5, 0.4, 0.05, 0.9, 0.9};
    CHECK(best_prefix(p, 3, c) == 1, "%d candidates, expected 1", best_prefix(p, 3, c));
    const double p2[] = {0.9, 0.9, 0.05};
    CHECK(best_prefix(p2, 3, c) == 2, "%d candidates, expected 2", best_prefix(p2, 3, c));
    CHECK(best_prefix(p, 0, c) == 0, "empty list: %d", best_prefix(p, 0, c));
    const double low[] = {0.05, 0.04};
    CHECK(best_prefix(low, 2, c) == 0, "unlikely candidates sent: %d", best_prefix(low, 2, c));
    const double sure[] = {1, 1, 1, 1, 1};
    CHECK(best_prefix(sure, 5, c) == 3, "a list past the table: %d candidates, expected max_tokens - 1 = 3",
          best_prefix(sure, 5, c));
    VerifyCost f(std::vector<double>{1.0, 1.0, 1.02, 1.06});
    CHECK(f.step_seconds() == 0, "step time before any observation: %g", f.step_seconds());
    for (int i = 0; i < 8; i++) f.observe(1, 0.005, 0);
    for (int i = 0; i < 200; i++) f.observe(2, 0.0056, 0);
    CHECK(std::abs(f.step_seconds() - 0.005) < 1e-6, "step time %.7f s, expected 0.005", f.step_seconds());
}

// argmax and the tree drafter's ranking helpers against plain references: log_sum_exp vs a float64 sum (rows
// of 8192 logits, spread 0..30 and one far outlier; relative error < 1e-5: the vectorized exp is
// within a few ulp per term) and top_k_indices vs a stable sort (many exact ties, k = 1, 10, n).
static void test_ranking_helpers() {
    uint64_t r = 99;
    auto uni = [&]() { r = r * 6364136223846793005ULL + 1442695040888963407ULL; return (double)(r >> 11) / 9007199254740992.0; };
    for (int n : {1, 7, 8, 8192, 8195}) {
        std::vector<float> x(n);
        for (int i = 0; i < n; i++) x[i] = (float)(30 * uni() - 15);
        if (n > 8) x[n / 2] = 60;
        double mx = -1e300, sum = 0;
        for (float v : x) mx = std::max(mx, (double)v);
        for (float v : x) sum += std::exp((double)v - mx);
        double ref = mx + std::log(sum), got = log_sum_exp(x.data(), n);
        CHECK(std::abs(got - ref) <= 1e-5 * std::max(1.0, std::abs(ref)), "log_sum_exp n %d: %.9g vs %.9g", n, got, ref);
        for (int i = 0; i < n; i++) x[i] = (float)(int)(8 * uni());  // 8 distinct values: ties everywhere
        int ref_arg = 0;  // argmax: the first index of the maximum
        for (int i = 1; i < n; i++)
            if (x[i] > x[ref_arg]) ref_arg = i;
        CHECK(argmax(x.data(), n) == ref_arg, "argmax n %d: %d, expected %d", n, argmax(x.data(), n), ref_arg);
        if (n > 2) {
            std::vector<float> y(x);
            y[1] = NAN;  // a NaN never wins
            int a2 = argmax(y.data(), n);
            CHECK(a2 != 1 && (ref_arg == 1 || a2 == ref_arg), "argmax with a NaN at 1 (n %d): %d", n, a2);
        }
        std::vector<int> order(n);
        for (int i = 0; i < n; i++) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
        for (int k : {1, 10, n}) {
            int kk = std::min(k, n);
            std::vector<int> got_idx(kk);
            top_k_indices(x.data(), n, k, got_idx.data());
            CHECK(std::equal(got_idx.begin(), got_idx.end(), order.begin()), "top_k_indices n %d k %d differs from a stable sort", n, k);
        }
    }
}

int main() {
    test_verify_cost();
    test_best_prefix();
    test_ranking_helpers();
    const std::string M = test_models_dir(), root = test_root();
    const std::vector<std::string> prompts = test_stories_prompts();
    CHECK(prompts.size() >= 20, "expected the stories prompts, read %zu", prompts.size());
    std::string shipped = root + "/weights/beagle-stories260K.bin";
    CHECK(file_exists(shipped), "%s missing", shipped.c_str());
    try {
        SamplingParams greedy;
        greedy.temperature = 0;
        // ---- EOS inside an accepted path ----
        {
            Session s(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);
            DraftWeights dw = load_draft(shipped);
            BeagleDraftParams big;
            big.total_tokens = 60;
            std::unique_ptr<Drafter> tree = make_drafter(s, "tree", big, &dw, shipped);
            int eos_cases = 0, mid = 0;
            for (size_t i = 0; i < prompts.size() && eos_cases < 8; i++) {
                std::vector<int> ids = s.encode_prompt(prompts[i], false, "");
                GenStats pst;
                std::vector<int> plain;
                s.generate_plain(ids, 480, greedy, nullptr, &pst, &plain);
                if (!pst.stopped_eog) continue;  // this story did not end within 480 tokens
                eos_cases++;
                // the script: prompt, plain output, the stop token the target chose, then junk
                std::vector<int> script(ids);
                script.insert(script.end(), plain.begin(), plain.end());
                int stop = -1;
                for (int t = 0; t < s.mf->config.vocab_size && stop < 0; t++)
                    if (s.is_stop(t)) stop = t;
                script.push_back(stop);
                for (int gamma : {3, 7, 16}) {
                    ScriptDrafter d(script, gamma, 42);
                    SpecParams spp;
                    SpecStats st;
                    std::vector<int> got;
                    generate_speculative(s, d, ids, 480, greedy, spp, nullptr, &st, &got);
                    CHECK(got == plain && st.stopped_eog && !st.stopped_ctx,
                          "prompt %zu, script gamma %d: %zu tokens (eog %d) vs plain %zu", i, gamma, got.size(),
                          (int)st.stopped_eog, plain.size());
                    mid += d.eos_mid_chain;
                }
                SpecParams spp;
                SpecStats st;
                std::vector<int> got;
                generate_speculative(s, *tree, ids, 480, greedy, spp, nullptr, &st, &got);
                CHECK(got == plain && st.stopped_eog, "prompt %zu, trained tree: %zu tokens vs plain %zu", i, got.size(),
                      plain.size());
            }
            CHECK(eos_cases >= 3, "only %d prompts ended with the stop token: EOS case not exercised", eos_cases);
            CHECK(mid >= 3, "the stop token was mid-chain only %d times", mid);
            printf("EOS: %d prompts, stop token mid-chain %d times, outputs equal plain decoding\n", eos_cases, mid);
        }
        // ---- the context fills up mid-tree; trees larger than the context left ----
        for (int ctx : {40, 57, 64}) {
            Session s(M + "stories260K.bin", M + "tok512.bin", 1, ctx, 64);
            DraftWeights dw = load_draft(shipped);
            BeagleDraftParams big;
            big.total_tokens = 60;  // larger than the whole context left after the prompt
            std::unique_ptr<Drafter> tree = make_drafter(s, "tree", big, &dw, shipped);
            for (size_t i = 0; i < 6; i++) {
                std::vector<int> ids = s.encode_prompt(prompts[i], false, "");
                GenStats pst;
                std::vector<int> plain;
                s.generate_plain(ids, 1000, greedy, nullptr, &pst, &plain);
                CHECK(pst.stopped_ctx || pst.stopped_eog, "ctx %d prompt %zu: plain decoding neither filled the context nor stopped",
                      ctx, i);
                std::vector<int> script(ids);
                script.insert(script.end(), plain.begin(), plain.end());
                ScriptDrafter sd(script, 30, 42);
                for (Drafter* d : {(Drafter*)&sd, tree.get()}) {
                    SpecParams spp;
                    spp.max_tree = 64;
                    SpecStats st;
                    std::vector<int> got;
                    generate_speculative(s, *d, ids, 1000, greedy, spp, nullptr, &st, &got);
                    CHECK(got == plain && st.stopped_ctx == pst.stopped_ctx && st.stopped_eog == pst.stopped_eog,
                          "ctx %d prompt %zu %s: %zu tokens (ctx %d eog %d) vs plain %zu (ctx %d eog %d)", ctx, i, d->name(),
                          got.size(), (int)st.stopped_ctx, (int)st.stopped_eog, plain.size(), (int)pst.stopped_ctx,
                          (int)pst.stopped_eog);
                    CHECK(s.llama->n_past() <= ctx, "ctx %d: cache holds %d rows", ctx, s.llama->n_past());
                }
            }
        }
        printf("context full mid-tree: outputs equal plain decoding for ctx 40, 57, 64\n");
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("spec_edges");
}
