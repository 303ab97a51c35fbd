// test_draft_truncate.cpp: a chat's next turn on the caches the last turn left (beagle chat: Resume,
// Drafter::begin_cached, Draft::truncate_true, SpecDecoder::begin with a kept prefix). For plain decoding and
// each drafter kind (prompt lookup, Beagle chain / tree / hybrid / auto / windowed / with state layers, EAGLE
// chain / tree, a draft model's chain / tree; greedy and sampled), three turns on stories260K where turn 2
// extends turn 1's cache, or departs from it inside turn 1's reply, or inside its prompt, and turn 3 extends
// turn 2's. Each turn that keeps the caches up to the common prefix must draft the same trees, verify the
// same logits rows bit for bit and commit the same tokens as the same drafter begun afresh on the whole
// prompt after the same earlier turns (so that its round policy and learnt rates have seen the same rounds).
// Greedy tokens alone could not tell: a draft fed the wrong states drafts worse, never differently committed.
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

namespace {

// Every verify: the tree's tokens and parents, the committed path and the path's logits rows.
struct Round {
    std::vector<int> tok, parent, path;
    std::vector<float> rows;
    bool operator==(const Round& o) const {
        return tok == o.tok && parent == o.parent && path == o.path && rows.size() == o.rows.size() &&
               memcmp(rows.data(), o.rows.data(), rows.size() * sizeof(float)) == 0;
    }
};

class Recorder : public VerifyObserver {
public:
    std::vector<Round> rounds;
    void verified(const DraftTree& tree, const std::vector<int>& path, const float* logits, int V) override {
        Round r;
        r.tok = tree.token;
        r.parent = tree.parent;
        r.path = path;
        for (int k : path) r.rows.insert(r.rows.end(), logits + (size_t)k * V, logits + (size_t)(k + 1) * V);
        rounds.push_back(std::move(r));
    }
};

struct Turn {
    std::vector<int> out, cache;  // committed tokens emitted; the ids of the target's cache rows after it
    std::vector<Round> rounds;
};

// One turn: prompt on a cache that keeps its first `keep` rows (0: afresh); d null: plain decoding.
Turn run_turn(Session& s, Drafter* d, const std::vector<int>& prompt, int keep, const SamplingParams& sp, int n) {
    Turn t;
    Resume r;
    r.keep = keep;
    r.cache_ids = &t.cache;
    if (!d) {
        GenStats st;
        s.generate_plain(prompt, n, sp, nullptr, &st, &t.out, r);
        return t;
    }
    Recorder rec;
    Acceptance acc;
    acc.observer = &rec;
    SpecParams spp;
    spp.learn_cost = false;  // fixed cost models below: the same choices in both runs
    SpecStats st;
    generate_speculative(s, *d, prompt, n, sp, spp, nullptr, &st, &t.out, acc, r);
    t.rounds = std::move(rec.rounds);
    return t;
}

struct Case {
    std::string name;
    Session* s;
    std::function<std::unique_ptr<Drafter>()> make;  // null result: plain decoding
    bool sampled;
};

}  // namespace

int main() {
    const std::string M = test_models_dir(), root = test_root();
    std::vector<std::string> prompts = test_stories_prompts();
    CHECK(prompts.size() == 50, "expected 50 prompts, read %zu", prompts.size());
    prompts.resize(sanitized_build() ? 2 : 4);
    const std::string noisy = "/tmp/beagle_test_draft_truncate_noisy.bin";
    try {
        write_perturbed_llama2c(M + "stories260K.bin", noisy, 0.15f, 3);
        Session s(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);
        Session sl(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);  // its target keeps state layers
        std::shared_ptr<const ModelFile> dm = load_draft_model_for(s, noisy);

        BeagleDraftParams chain;
        chain.tree = false;
        chain.gamma = 5;
        BeagleDraftParams tree;
        tree.depth = 4;
        tree.topk = 4;
        tree.total_tokens = 16;
        BeagleDraftParams window = tree;  // the draft sees the last 16 true states only
        window.true_window = 16;
        // cost-aware trees and mode auto with a fixed cost model: verifying T tokens costs 1 + 0.3 (T - 1)
        // steps, a draft round's drafting 0.15 (test_spec_exact.cpp), so that both runs choose alike
        BeagleDraftParams aware;
        aware.verify_cost.assign(25, 1.0);
        for (int T = 1; T <= 24; T++) aware.verify_cost[T] = 1 + 0.3 * (T - 1);
        aware.auto_draft_cost = 0.15;
        aware.lookup_ngram = 3;

        DraftWeights trained, trained_eagle;
        const std::string shipped = root + "/weights/beagle-stories260K.bin", shipped_eagle = root + "/weights/eagle-stories260K.bin";
        DraftWeights rnd_eagle, rnd_layers;
        DraftConfig ec = draft_config_for_target(s.mf->config, s.tok->spec());
        ec.arch = ARCH_EAGLE;
        rnd_eagle.init_random(ec, 7);
        DraftConfig lc = draft_config_for_target(s.mf->config, s.tok->spec());
        lc.state_layers = {1, 3};
        rnd_layers.init_random(lc, 11);

        std::vector<Case> cases;
        cases.push_back({"plain", &s, [] { return nullptr; }, false});
        cases.push_back({"plain sampled", &s, [] { return nullptr; }, true});
        cases.push_back({"lookup", &s, [] { return make_lookup_drafter(3, 5); }, false});
        cases.push_back({"lookup, cost-aware", &s, [&] { return make_lookup_drafter(3, 5, aware.verify_cost); }, false});
        auto beagle = [&](const char* name, const char* mode, const DraftWeights* w, BeagleDraftParams p, bool sampled,
                          Session* on) {
            cases.push_back({name, on, [=] { return make_drafter(*on, mode, p, w, name); }, sampled});
        };
        if (file_exists(shipped)) {
            trained = load_draft(shipped);
            beagle("beagle chain", "chain", &trained, chain, false, &s);
            beagle("beagle tree", "tree", &trained, tree, false, &s);
            beagle("beagle tree, window 16", "tree", &trained, window, false, &s);
            beagle("beagle hybrid, cost-aware", "hybrid", &trained, aware, false, &s);
            beagle("beagle auto", "auto", &trained, aware, false, &s);
            beagle("beagle chain sampled", "chain", &trained, chain, true, &s);
            beagle("beagle tree sampled", "tree", &trained, tree, true, &s);
        } else {
            SKIP_PART("%s not present: the Beagle draft cases did not run", shipped.c_str());
        }
        if (file_exists(shipped_eagle)) {
            trained_eagle = load_draft(shipped_eagle);
            beagle("eagle chain", "chain", &trained_eagle, chain, false, &s);
            beagle("eagle tree", "tree", &trained_eagle, tree, false, &s);
        } else {
            SKIP_PART("%s not present: the trained EAGLE cases did not run", shipped_eagle.c_str());
        }
        beagle("random eagle tree", "tree", &rnd_eagle, tree, false, &s);
        beagle("random beagle tree, state layers 1,3", "tree", &rnd_layers, tree, false, &sl);
        cases.push_back({"draft model chain", &s, [&] { return make_drafter(s, "chain", chain, dm); }, false});
        cases.push_back({"draft model tree", &s, [&] { return make_drafter(s, "tree", tree, dm); }, false});

        SamplingParams greedy, sampled;
        greedy.temperature = 0;
        sampled.temperature = 0.8f;
        sampled.top_p = 0.95f;
        sampled.seed = 5;
        const int n = 40;
        const char* kModes[] = {"extends turn 1", "departs in turn 1's reply", "departs in turn 1's prompt"};
        int compared = 0, cut_turns = 0;
        for (const Case& c : cases) {
            Session& cs = *c.s;
            const SamplingParams& sp = c.sampled ? sampled : greedy;
            int bad = 0;
            for (size_t i = 0; i < prompts.size(); i++) {
                const std::vector<int> p1 = cs.encode_prompt(prompts[i], false, "");
                // the text a turn appends: another prompt's tokens, without BOS
                const std::vector<int> more = cs.tok->encode(" " + prompts[(i + 1) % prompts.size()], false, false),
                                       more3 = cs.tok->encode(" The end. " + prompts[(i + 2) % prompts.size()], false, false);
                for (int m = 0; m < 3; m++) try {
                    std::unique_ptr<Drafter> fresh = c.make(), kept = c.make();
                    // the reference: every turn begun afresh on its whole prompt
                    const Turn r1 = run_turn(cs, fresh.get(), p1, 0, sp, n);
                    const std::vector<int>& c1 = r1.cache;
                    size_t cut = m == 0 ? c1.size() : m == 1 ? p1.size() + (c1.size() - p1.size()) / 2 : p1.size() / 2;
                    std::vector<int> p2(c1.begin(), c1.begin() + cut);
                    p2.insert(p2.end(), more.begin(), more.end());
                    const Turn r2 = run_turn(cs, fresh.get(), p2, 0, sp, n);
                    std::vector<int> p3 = r2.cache;
                    p3.insert(p3.end(), more3.begin(), more3.end());
                    const Turn r3 = run_turn(cs, fresh.get(), p3, 0, sp, n);
                    // the same turns, each on the caches the last one left
                    const Turn t1 = run_turn(cs, kept.get(), p1, 0, sp, n);
                    const int keep2 = reusable_prefix(t1.cache, p2);
                    const Turn t2 = run_turn(cs, kept.get(), p2, keep2, sp, n);
                    const int keep3 = reusable_prefix(t2.cache, p3);
                    const Turn t3 = run_turn(cs, kept.get(), p3, keep3, sp, n);
                    CHECK(t1.cache == c1 && c1.size() > p1.size(), "%s: turn 1 cache of %zu ids, the reference's %zu",
                          c.name.c_str(), t1.cache.size(), c1.size());
                    CHECK(keep2 >= (int)cut && (m == 0 || keep2 < (int)c1.size()) && keep3 == (int)r2.cache.size(),
                          "%s, prompt %zu, turn 2 %s: kept %d (cut at %zu of %zu), turn 3 kept %d of %zu", c.name.c_str(), i,
                          kModes[m], keep2, cut, c1.size(), keep3, r2.cache.size());
                    cut_turns += m > 0;
                    const bool same = t1.out == r1.out && t2.out == r2.out && t3.out == r3.out && t2.cache == r2.cache &&
                                      t3.cache == r3.cache && t2.rounds == r2.rounds && t3.rounds == r3.rounds;
                    bad += !same;
                    CHECK(same, "%s, prompt %zu, turn 2 %s: the kept caches gave other tokens (%d, %d) or trees "
                          "(%zu vs %zu, %zu vs %zu rounds) than a fresh begin", c.name.c_str(), i, kModes[m],
                          (int)(t2.out == r2.out), (int)(t3.out == r3.out), t2.rounds.size(), r2.rounds.size(),
                          t3.rounds.size(), r3.rounds.size());
                    CHECK(!fresh || (!r2.rounds.empty() && !r3.rounds.empty()), "%s: no verify rounds recorded", c.name.c_str());
                    compared++;
                } catch (const Error& e) {  // a drafter out of step with the target, say: the other cases still run
                    bad++;
                    CHECK(false, "%s, prompt %zu, turn 2 %s: error: %s", c.name.c_str(), i, kModes[m], e.what());
                }
            }
            printf("%-40s %s\n", c.name.c_str(), bad ? "DIFFERS" : "same trees, rows and tokens as a fresh begin");
        }
        CHECK(cut_turns > 0 && compared == (int)(cases.size() * prompts.size() * 3), "%d conversations compared", compared);

        // a drafter that cannot keep a prefix says so; a prefix longer than the cache is refused
        struct Fresh : Drafter {
            const char* name() const override { return "fresh-only"; }
            void begin(const std::vector<int>&, const float*) override {}
            void propose(const std::vector<int>&, DraftTree*, int, const SamplingParams&, Rng&) override {}
            void accept(const DraftTree&, const std::vector<int>&, const float*) override {}
        } fresh_only;
        const std::vector<int> p = s.encode_prompt(prompts[0], false, "");
        CHECK_THROWS(fresh_only.begin_cached(p, 2, nullptr), "drafter fresh-only cannot keep a cached prefix (2 tokens)");
        GenStats st;
        Resume r;
        s.llama->truncate(0);
        r.keep = 3;
        CHECK_THROWS(s.generate_plain(p, 4, greedy, nullptr, &st, nullptr, r), "keep 3 cached rows of 0");
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    remove(noisy.c_str());
    return test_summary("test_draft_truncate");
}
