// test_draft_choices.cpp: what the drafter chooses by measurement while generating (MeasuredChoice:
// the draft's threads under --draft-threads -1, the depth of a cost-aware tree) changes nothing but time
// and tree shape, never the output. (1) The policy with fake values: warm-up over every arm, then the
// best, the others probed in turn, a change noticed. (2) On a 2-thread session the shipped stories260K
// draft with its forwards on a pool of its own (1), on the target's whole pool (0), and chosen (-1)
// drafts the same trees and chains bit for bit (same outputs, tau, acceptance by depth); -1 tries both
// (SpecStats::draft_threads). (3) A cost-aware tree with timed verifies tries depths 1, 2 and 5
// (SpecStats::draft_depth) and its output is plain greedy decoding's; untimed, it stays at --depth.
#include <map>
#include <string>
#include <vector>

#include "decode/auto_drafter.h"
#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

// The policy alone: alternate for 2 x WARM drafting rounds, then the faster, the other every PROBE_EVERY.
static void test_policy() {
    for (int fast : {0, 1}) {
        MeasuredChoice p(2);
        int picks[2] = {0, 0}, warm[2] = {0, 0};
        for (int r = 0; r < 200; r++) {
            const int w = p.pick();
            (r < 2 * 4 ? warm : picks)[w]++;
            p.observe(w, w == fast ? 2000 : 667);  // forwards per second: 0.5 ms each on the fast arm, 1.5 on the other
        }
        CHECK(warm[0] == 4 && warm[1] == 4, "fast %d: warm-up picks %d / %d, expected %d each",
              fast, warm[0], warm[1], 4);
        const int probes = (200 - 2 * 4) / MeasuredChoice::PROBE_EVERY;
        CHECK(picks[1 - fast] >= probes - 1 && picks[1 - fast] <= probes + 1 && picks[fast] == 192 - picks[1 - fast],
              "fast %d: after warm-up %d rounds on it, %d on the slow one (expected ~%d probes)", fast, picks[fast],
              picks[1 - fast], probes);
        CHECK(p.mean[fast] > 1999 && p.mean[fast] < 2001, "fast %d: mean %.6g forwards/s, expected 2000", fast, p.mean[fast]);
    }
    // the machine changes: the pool that was faster gets slower, and the probes find it
    MeasuredChoice p(2);
    int late[2] = {0, 0};
    for (int r = 0; r < 400; r++) {
        const int w = p.pick();
        const double t = r < 100 ? (w ? 1e-3 : 2e-3) : (w ? 4e-3 : 2e-3);  // "all" fast, then 2x slower than one
        if (r >= 300) late[w]++;
        p.observe(w, 1 / t);
    }
    CHECK(late[0] > 90, "after the pool turned slow: %d of the last 100 rounds on one thread", late[0]);
}

// Three arms (depths), the middle one best: 2 warm-up rounds each, then it, the other two probed in turn.
static void test_policy_arms() {
    MeasuredChoice p(3, 2);
    int warm[3] = {0, 0, 0}, after[3] = {0, 0, 0};
    const double value[3] = {300, 400, 250};  // tokens per second of each arm
    for (int r = 0; r < 326; r++) {
        // settled (mode auto judges the draft only then) exactly when every arm has its 2 warm-up values
        CHECK(p.settled() == (r >= 6), "3 arms, round %d: settled() %d", r, (int)p.settled());
        const int a = p.pick();
        (r < 6 ? warm : after)[a]++;
        p.observe(a, value[a]);
    }
    CHECK(warm[0] == 2 && warm[1] == 2 && warm[2] == 2, "3 arms: warm-up picks %d / %d / %d, expected 2 each", warm[0],
          warm[1], warm[2]);
    CHECK(after[0] >= 4 && after[2] >= 4 && after[0] + after[2] <= 11 && after[1] == 320 - after[0] - after[2],
          "3 arms: after warm-up %d / %d / %d (expected the middle one, ~5 probes each of the others)", after[0], after[1],
          after[2]);
    MeasuredChoice none(3, 2);  // never observed (nothing timed): always arm 0
    CHECK(none.pick() == 0 && none.pick() == 0, "an unobserved choice picks arm %d", none.pick());
    CHECK(!none.settled() && MeasuredChoice(1, 2).settled(), "settled(): unobserved 3 arms %d, one arm %d",
          (int)none.settled(), (int)MeasuredChoice(1, 2).settled());
}

// Mode auto's switch (auto_drafter.h) with fake drafters and a fixed cost model (verify of T tokens =
// 1 + 0.3 (T - 1) steps, a draft round 0.15 more): the draft sends 3 candidates; in a good stretch 2 of
// them are accepted (3 tokens for 1.75 steps), in a bad stretch none (1 token). Lookup sends nothing (a
// plain step). 40 good rounds, 40 bad ones (the draft is turned off), then good again: the probes must
// bring the draft back within a few probes, not leave it off for the rest of the text. (Before the
// probes ran 4 rounds in a row, one probe round moved the draft's record by 1/16 of its worth: it ran
// 22 of the last 240 rounds.)
struct FakeDrafter : Drafter {
    const char* nm;
    int send;  // candidates proposed under the root
    FakeDrafter(const char* n, int k) : nm(n), send(k) {}
    const char* name() const override { return nm; }
    void begin(const std::vector<int>&, const float*) override {}
    void propose(const std::vector<int>&, DraftTree* tree, int, const SamplingParams&, Rng&) override {
        for (int k = 0; k < send; k++) tree->add(k, 1, 0.0f);
    }
    void accept(const DraftTree&, const std::vector<int>&, const float*) override {}
    void accept_skipped(const DraftTree&, const std::vector<int>&, const float*) override {}
};

static void test_auto_probes() {
    std::vector<double> cost(25, 1.0);
    for (int T = 1; T <= 24; T++) cost[T] = 1 + 0.3 * (T - 1);
    std::unique_ptr<Drafter> a = make_auto_drafter(std::unique_ptr<Drafter>(new FakeDrafter("hybrid", 3)),
                                                   std::unique_ptr<Drafter>(new FakeDrafter("lookup", 0)), cost, 0.15);
    a->begin({0}, nullptr);
    SamplingParams sp;
    Rng rng(1);
    int draft_bad = 0, draft_after = 0;
    const int good1 = 40, bad = 40, good2 = 240;
    for (int r = 0; r < good1 + bad + good2; r++) {
        const bool good = r < good1 || r >= good1 + bad;
        DraftTree tree;
        tree.reset(0);
        a->propose({0}, &tree, 64, sp, rng);
        const bool drafted = std::string(a->round_mode()) == "hybrid";
        std::vector<int> path = {0};
        if (drafted && good) path = {0, 1, 2};
        a->accept(tree, path, nullptr);
        if (r >= good1 && r < good1 + bad) draft_bad += drafted;
        if (r >= good1 + bad) draft_after += drafted;
    }
    CHECK(draft_bad < bad / 2, "auto: the draft ran %d of %d rounds of the bad stretch (expected it turned off)",
          draft_bad, bad);
    CHECK(draft_after >= good2 - 40, "auto: the draft ran %d of the %d rounds after the bad stretch (expected >= %d: "
          "the probes bring it back)", draft_after, good2, good2 - 40);
    printf("auto: the draft ran %d of %d rounds of a bad stretch, %d of the %d rounds after it\n", draft_bad, bad,
           draft_after, good2);
}

int main() {
    test_policy();
    test_policy_arms();
    test_auto_probes();
    const std::string M = test_models_dir(), shipped = test_root() + "/weights/beagle-stories260K.bin";
    CHECK(file_exists(shipped), "%s missing", shipped.c_str());
    const std::vector<std::string> prompts = test_stories_prompts();
    try {
        Session s(M + "stories260K.bin", M + "tok512.bin", 2, 512, 64);
        DraftWeights dw = load_draft(shipped);
        SamplingParams greedy;
        greedy.temperature = 0;
        SamplingParams sampled;  // sampling draws from the draft's q: its logits must not move either
        sampled.temperature = 0.8f;
        sampled.seed = 5;
        for (const char* mode : {"chain", "tree"})
            for (const SamplingParams* sp : {&greedy, &sampled}) {
                if (sp == &sampled && std::string(mode) == "tree") continue;  // sampling drafts chains
                std::vector<std::string> got[3];
                std::vector<std::vector<int>> acc[3];
                std::vector<double> tau[3];
                int tried[2] = {0, 0};
                const int threads[3] = {1, 0, -1};
                for (int c = 0; c < 3; c++) {
                    BeagleDraftParams p;
                    p.tree = std::string(mode) == "tree";
                    p.total_tokens = 24;
                    p.threads = threads[c];
                    std::unique_ptr<Drafter> d = make_drafter(s, mode, p, &dw, shipped);
                    for (size_t i = 0; i < 12; i++) {
                        std::vector<int> ids = s.encode_prompt(prompts[i], false, "");
                        SpecParams spp;
                        SpecStats st;
                        std::vector<int> out;
                        generate_speculative(s, *d, ids, 120, *sp, spp, nullptr, &st, &out);
                        got[c].push_back(std::string((const char*)out.data(), out.size() * sizeof(int)));
                        acc[c].push_back(st.accept_by_depth);
                        tau[c].push_back(st.tau());
                        if (threads[c] == -1) {
                            tried[0] += st.draft_threads.count("1") ? st.draft_threads.at("1") : 0;
                            tried[1] += st.draft_threads.count("all") ? st.draft_threads.at("all") : 0;
                        } else {
                            CHECK(st.draft_threads.empty(), "%s --draft-threads %d: %zu split counts reported", mode,
                                  threads[c], st.draft_threads.size());
                        }
                    }
                }
                const char* how = sp == &greedy ? "greedy" : "sampled";
                for (int c = 1; c < 3; c++)
                    CHECK(got[c] == got[0] && acc[c] == acc[0] && tau[c] == tau[0],
                          "%s %s: --draft-threads %d drafts differently from --draft-threads 1", how, mode, threads[c]);
                CHECK(tried[0] >= 4 && tried[1] >= 4,
                      "%s %s --draft-threads -1: %d rounds on one thread, %d on all (expected >= %d each)", how, mode,
                      tried[0], tried[1], 4);
                printf("%s %s: the same drafts with the forwards on 1 thread, the pool, and measured (%d / %d rounds)\n",
                       how, mode, tried[0], tried[1]);
            }
        // (3) the depth of a cost-aware tree (verify cost table: 1 + 0.3 (T - 1) decode steps)
        BeagleDraftParams aware;
        aware.verify_cost.assign(25, 1.0);
        for (int T = 1; T <= 24; T++) aware.verify_cost[T] = 1 + 0.3 * (T - 1);
        for (bool timed : {true, false}) {
            std::unique_ptr<Drafter> d = make_drafter(s, "tree", aware, &dw, shipped);
            std::map<int, int> depths;
            int same = 0;
            const int n_prompts = 8;
            for (int i = 0; i < n_prompts; i++) {
                std::vector<int> ids = s.encode_prompt(prompts[i], false, "");
                GenStats pst;
                std::vector<int> plain, out;
                s.generate_plain(ids, 120, greedy, nullptr, &pst, &plain);
                SpecParams spp;
                spp.learn_cost = timed;
                SpecStats st;
                generate_speculative(s, *d, ids, 120, greedy, spp, nullptr, &st, &out);
                same += out == plain;
                for (const auto& kv : st.draft_depth) depths[std::stoi(kv.first)] += kv.second;
            }
            CHECK(same == n_prompts, "cost-aware tree, timed %d: %d of %d outputs equal plain greedy", (int)timed, same, n_prompts);
            if (timed) {
                CHECK(depths.size() == 3 && depths[1] >= 2 && depths[2] >= 2 && depths[5] >= 2,
                      "timed cost-aware tree: depths tried 1: %d, 2: %d, 5: %d (expected >= 2 each)", depths[1], depths[2],
                      depths[5]);
                printf("cost-aware tree, timed: rounds at depth 1 / 2 / 5: %d / %d / %d, outputs == plain\n", depths[1],
                       depths[2], depths[5]);
            } else {
                CHECK(depths.empty(), "untimed cost-aware tree: %zu measured depths reported, expected none", depths.size());
            }
        }
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("test_draft_choices");
}
