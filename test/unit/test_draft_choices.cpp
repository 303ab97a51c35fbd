// test_draft_choices.cpp: what the round policy chooses by measurement while generating (round_policy.h:
// the draft's threads under --draft-threads -1, the depth of a cost-aware tree) changes nothing but time
// and tree shape, never the output (the policy's rule itself: test_round_policy). (1) On a 2-thread
// session the shipped stories260K draft with its forwards on a pool of its own (1), on the target's
// whole pool (0), and chosen (-1) drafts the same trees and chains bit for bit (same outputs, tau,
// acceptance by depth); -1 tries both (SpecStats::draft_threads). (2) A cost-aware tree, with timed
// verifies or a fixed cost model, tries depths 1, 2 and 5 (SpecStats::draft_depth) and its output is
// plain greedy decoding's.
#include <map>
#include <string>
#include <vector>

#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

int main() {
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
        // (2) the depth of a cost-aware tree (verify cost table: 1 + 0.3 (T - 1) decode steps)
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
            CHECK(depths.size() == 3 && depths[1] >= 2 && depths[2] >= 2 && depths[5] >= 2,
                  "cost-aware tree, timed %d: depths tried 1: %d, 2: %d, 5: %d (expected >= 2 each)", (int)timed,
                  depths[1], depths[2], depths[5]);
            printf("cost-aware tree, timed %d: rounds at depth 1 / 2 / 5: %d / %d / %d, outputs == plain\n", (int)timed,
                   depths[1], depths[2], depths[5]);
        }
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("test_draft_choices");
}
