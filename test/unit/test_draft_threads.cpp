// test_draft_threads.cpp: where the draft's forwards run (--draft-threads) changes nothing but time.
// On a 2-thread session, the shipped stories260K draft with its forwards on a pool of its own (1), on
// the target's whole pool (0), and chosen by measurement (-1: one thread or all, DraftPool) drafts the
// same trees and chains bit for bit: the same outputs, tau and acceptance by depth. -1 tries both in
// its first rounds and says so (SpecStats::draft_threads). DraftPool's choice: fake timings.
#include <string>
#include <vector>

#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

// The policy alone: alternate for 2 x WARM drafting rounds, then the faster, the other every PROBE_EVERY.
static void test_policy() {
    for (int fast : {0, 1}) {
        DraftPool p;
        int picks[2] = {0, 0}, warm[2] = {0, 0};
        for (int r = 0; r < 200; r++) {
            const int w = p.pick();
            (r < 2 * DraftPool::WARM ? warm : picks)[w]++;
            p.observe(w, w == fast ? 1e-3 : 3e-3, 2);  // 0.5 ms per forward on the fast one, 1.5 ms on the other
            if (r % 7 == 3) p.observe(1 - w, 1.0, 0);   // a round without draft forwards counts for nothing
        }
        CHECK(warm[0] == DraftPool::WARM && warm[1] == DraftPool::WARM, "fast %d: warm-up picks %d / %d, expected %d each",
              fast, warm[0], warm[1], DraftPool::WARM);
        const int probes = (200 - 2 * DraftPool::WARM) / DraftPool::PROBE_EVERY;
        CHECK(picks[1 - fast] >= probes - 1 && picks[1 - fast] <= probes + 1 && picks[fast] == 192 - picks[1 - fast],
              "fast %d: after warm-up %d rounds on it, %d on the slow one (expected ~%d probes)", fast, picks[fast],
              picks[1 - fast], probes);
        CHECK(p.sec[fast] > 0.4e-3 && p.sec[fast] < 0.6e-3, "fast %d: mean %.3g s per forward, expected 0.5 ms", fast,
              p.sec[fast]);
    }
    // the machine changes: the pool that was faster gets slower, and the probes find it
    DraftPool p;
    int late[2] = {0, 0};
    for (int r = 0; r < 400; r++) {
        const int w = p.pick();
        const double t = r < 100 ? (w ? 1e-3 : 2e-3) : (w ? 4e-3 : 2e-3);  // "all" fast, then 2x slower than one
        if (r >= 300) late[w]++;
        p.observe(w, t, 1);
    }
    CHECK(late[0] > 90, "after the pool turned slow: %d of the last 100 rounds on one thread", late[0]);
}

int main() {
    test_policy();
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
                CHECK(tried[0] >= DraftPool::WARM && tried[1] >= DraftPool::WARM,
                      "%s %s --draft-threads -1: %d rounds on one thread, %d on all (expected >= %d each)", how, mode,
                      tried[0], tried[1], DraftPool::WARM);
                printf("%s %s: the same drafts with the forwards on 1 thread, the pool, and measured (%d / %d rounds)\n",
                       how, mode, tried[0], tried[1]);
            }
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("test_draft_threads");
}
