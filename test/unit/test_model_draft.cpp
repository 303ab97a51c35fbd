// test_model_draft.cpp: the independent draft model (-md, model_drafter.h). stories260K is the target; the
// drafts are the same file (it agrees with the target at every position, so every round's whole chain or
// deepest path must be accepted: a draft cache rolled back to the wrong rows would show as a lower tau) and
// a copy with its weights perturbed (written here; it agrees often but not always, which exercises every
// rejection and the catch-up after it). Greedy output equals plain decoding's token for token in chain,
// tree, tree-60, cost-aware tree and auto modes; a draft of another vocabulary is refused.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "testlib.h"

using namespace beagle;

int main() {
    const std::string M = test_models_dir(), target = M + "stories260K.bin";
    std::vector<std::string> prompts = test_stories_prompts();
    CHECK(prompts.size() == 50, "expected 50 prompts, read %zu", prompts.size());
    prompts.resize(std::min<size_t>(prompts.size(), sanitized_build() ? 4 : 20));
    const std::string noisy = "/tmp/beagle_test_model_draft_noisy.bin";
    try {
        // weights scaled by 1 + 0.15 u, u uniform in [-1, 1), one draw per float (a fixed seed)
        write_perturbed_llama2c(target, noisy, 0.15f, 3);
        Session s(target, M + "tok512.bin", 1, 512, 64);
        std::shared_ptr<const ModelFile> self = load_draft_model_for(s, target), other = load_draft_model_for(s, noisy);
        SamplingParams greedy;
        greedy.temperature = 0;
        BeagleDraftParams chain;
        chain.gamma = 5;
        BeagleDraftParams tree;
        tree.depth = 3;
        tree.topk = 4;
        tree.total_tokens = 12;
        BeagleDraftParams top1;  // a chain-shaped tree: each depth's one query keeps the whole path in the cache
        top1.depth = 5;
        top1.topk = 1;
        top1.total_tokens = 6;
        BeagleDraftParams tree60;  // the paper's GPU setting: depth 5, top-10, 60 nodes
        tree60.total_tokens = 60;
        // cost-aware trees with a fixed cost model (verifying T tokens costs 1 + 0.3 (T - 1) steps; see
        // test_spec_exact.cpp) and a fixed drafting cost, so that the choices are the same on every run
        BeagleDraftParams aware;
        aware.verify_cost.assign(25, 1.0);
        for (int T = 1; T <= 24; T++) aware.verify_cost[T] = 1 + 0.3 * (T - 1);
        aware.auto_draft_cost = 0.15;
        aware.lookup_ngram = 3;  // mode auto's lookup side
        // min_tau: the self draft's rounds accept all they send; the noisy one's must accept something
        BeagleDraftParams dear = aware;  // a draft round's drafting costs 1.5 steps: lookup and plain rounds win
        dear.auto_draft_cost = 1.5;        // most rounds, the draft is probed and catches up after each stretch
        // min_tau: the self draft's rounds accept all they send (but at a text's end); the noisy one's often
        struct Case { const char* name; const char* mode; std::shared_ptr<const ModelFile> d; BeagleDraftParams p; double min_tau; };
        const std::vector<Case> cases = {
            {"self chain", "chain", self, chain, 5.5},        {"self tree", "tree", self, tree, 3.6},
            {"self tree 60", "tree", self, tree60, 5.4},      {"noisy chain", "chain", other, chain, 2.5},
            {"noisy tree", "tree", other, tree, 2.5},         {"noisy tree 60", "tree", other, tree60, 4.0},
            {"self tree, top-1", "tree", self, top1, 5.5},    {"noisy tree, top-1", "tree", other, top1, 2.5},
            {"noisy tree, cost-aware", "tree", other, aware, 1.8}, {"noisy auto", "auto", other, aware, 1.5},
            {"noisy auto, dear draft", "auto", other, dear, 1.0},
        };
        std::vector<std::unique_ptr<Drafter>> drafters;
        for (const Case& c : cases) drafters.push_back(make_drafter(s, c.mode, c.p, c.d));
        std::vector<double> committed(cases.size(), 0), rounds(cases.size(), 0);
        std::vector<std::map<std::string, int>> modes(cases.size());
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
                const bool same = got == plain;
                mismatches += !same;
                CHECK(same, "prompt %zu, %s: %zu tokens vs plain's %zu, not the same", i, cases[k].name, got.size(), plain.size());
                committed[k] += st.gen_tokens_after_root;
                rounds[k] += st.rounds;
                for (const auto& m : st.rounds_by_mode) modes[k][m.first] += m.second;
            }
        }
        for (size_t k = 0; k < cases.size(); k++) {
            const double tau = rounds[k] ? committed[k] / rounds[k] : 0;
            std::string by;
            for (const auto& m : modes[k]) by += strfmt(" %s %d", m.first.c_str(), m.second);
            printf("%-24s tau %.3f over %.0f rounds;%s\n", cases[k].name, tau, rounds[k], by.c_str());
            CHECK(tau >= cases[k].min_tau, "%s: tau %.3f < %.2f", cases[k].name, tau, cases[k].min_tau);
        }
        // mode auto ran both sides: draft rounds (the probes: at least one a prompt) and stretches of lookup or
        // plain ones, each caught up after (the sanitizer builds run fewer prompts)
        std::map<std::string, int>& dm = modes.back();
        const int np = (int)prompts.size();
        CHECK(dm["tree"] >= np && dm["lookup"] + dm["plain"] >= 10 * np,
              "auto with a dear draft over %d prompts: %d draft rounds, %d lookup, %d plain", np, dm["tree"], dm["lookup"],
              dm["plain"]);
        printf("%d mismatches over %zu prompts x %zu drafters\n", mismatches, prompts.size(), cases.size());

        // a draft of another vocabulary: a different size, or the same size with one token's text changed
        const std::string smol = test_root() + "/weights/SmolLM2-135M-Instruct.Q4_1.gguf";
        if (file_exists(smol)) CHECK_THROWS(load_draft_model_for(s, smol), "does not share the target's vocabulary");
        else SKIP_PART("%s not present (make model): the vocabulary-size refusal did not run", smol.c_str());
        std::unique_ptr<ModelFile> renamed = load_model(target);
        renamed->tokenizer = s.tok->spec();
        renamed->tokenizer.tokens[300] += "x";
        CHECK_THROWS(check_draft_vocab(*renamed, *s.tok, target), "token 300");
        renamed->tokenizer.tokens[300] = s.tok->spec().tokens[300];
        check_draft_vocab(*renamed, *s.tok, target);  // the same tokens: accepted
        CHECK_THROWS(make_drafter(s, "hybrid", tree, self), "does not take a draft model");
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    std::remove(noisy.c_str());
    return test_summary("model_draft");
}
