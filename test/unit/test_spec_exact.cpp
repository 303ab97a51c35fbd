// test_spec_exact.cpp: greedy speculative decoding is token-identical to plain greedy decoding.
// stories260K, 50 prompts x 256 tokens, against the plain decoding loop: prompt lookup (several
// n-gram/gamma settings), chain and tree drafting with a random-weights Beagle draft, EAGLE draft and MoA draft (which are
// rejected almost everywhere, exercising every rejection path), tree without concat, the hybrid (tree + lookup candidates),
// auto (per round hybrid or lookup / plain: the draft sits rounds out and catches up), the
// shipped trained drafts when present, Beagle and EAGLE (accepted often: exercises long accepted paths +
// compaction, and the EAGLE draft's predicted keys over deep trees).
// Tokens alone would miss a verify row that is off by an ulp without changing an argmax, so every
// committed position's verify logits row is also compared bit for bit with plain decoding's (one
// causal forward over prompt + output: batch-invariant rows); and the test shows that comparison
// failing once, on a verify whose root row has one logit one ulp off. The rows come from the engine
// through its observer (Acceptance::observer, RowRecorder below).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "decode/session.h"
#include "decode/drafters.h"
#include "decode/speculative.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

// Every committed position's verify logits row, in order (the rows of each verify's path). plant_ulp:
// the first verify of more than one token has one logit of its root row moved one ulp up, as the
// engine would have it had that verify been off by an ulp.
class RowRecorder : public VerifyObserver {
public:
    std::vector<float> rows;
    bool plant_ulp = false;
    void verified(const DraftTree& tree, const std::vector<int>& path, const float* logits, int V) override {
        const size_t at = rows.size();
        for (int k : path) rows.insert(rows.end(), logits + (size_t)k * V, logits + (size_t)(k + 1) * V);
        if (plant_ulp && tree.size() > 1) {  // path[0] is the root: its row is at `at`
            float& z = rows[at + (size_t)tree.token[1] % V];
            z = nextafterf(z, INFINITY);
            plant_ulp = false;
        }
    }
};

int main() {
    const std::string M = test_models_dir(), root = test_root();
    const std::vector<std::string> prompts = test_stories_prompts();
    CHECK(prompts.size() == 50, "expected 50 prompts, read %zu", prompts.size());
    try {
        Session s(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);  // 1 thread: tiny model, no sync cost
        SamplingParams greedy;
        greedy.temperature = 0;
        int total_tokens = 0, total_passes = 0, mismatches = 0;
        DraftWeights rnd;
        rnd.init_random(draft_config_for_target(s.mf->config, s.tok->spec()), 7);
        // sess: the session a case runs on (null: s; a draft with state layers makes its target keep them)
        struct DraftCase { const char* name; const char* mode; const DraftWeights* w; BeagleDraftParams p; Session* sess = nullptr; };
        std::vector<DraftCase> dcases;
        BeagleDraftParams chain;
        chain.tree = false;
        chain.gamma = 5;
        BeagleDraftParams tree;  // small tree for the random draft: it is rejected at depth 1 anyway
        tree.depth = 3;
        tree.topk = 4;
        tree.total_tokens = 12;
        BeagleDraftParams tree_nc = tree;
        tree_nc.concat = false;
        dcases.push_back({"random chain", "chain", &rnd, chain});
        dcases.push_back({"random tree", "tree", &rnd, tree});
        dcases.push_back({"random tree no-concat", "tree", &rnd, tree_nc});
        DraftWeights rv = rnd;  // reduced draft vocabulary (EAGLE-3 style): two thirds of the tokens
        for (int t = 0; t < rv.cfg.vocab_size; t++)
            if (t % 3 != 1) rv.d2t.push_back(t);
        rv.cfg.draft_vocab = (int)rv.d2t.size();
        dcases.push_back({"random chain, reduced vocab", "chain", &rv, chain});
        dcases.push_back({"random tree, reduced vocab", "tree", &rv, tree});
        // cost-aware trees (--total-tokens auto) with a fixed cost model instead of timings, so the
        // sizes are reproducible: verifying T tokens costs 1 + 0.3 (T - 1) decode steps, T <= 24
        BeagleDraftParams aware;
        aware.verify_cost.assign(25, 1.0);
        for (int T = 1; T <= 24; T++) aware.verify_cost[T] = 1 + 0.3 * (T - 1);
        dcases.push_back({"random tree, cost-aware", "tree", &rnd, aware});
        BeagleDraftParams hybrid = aware;  // the cost-aware tree with lookup candidates merged in (--spec hybrid)
        hybrid.lookup_ngram = 3;
        BeagleDraftParams hybrid_fixed = tree;
        hybrid_fixed.lookup_ngram = 3;
        dcases.push_back({"random hybrid, cost-aware", "hybrid", &rnd, hybrid});
        // mode auto (the default of generate -d): per round hybrid or cost-aware lookup / plain; a draft
        // round's drafting is modelled as kDraftCost decode steps (its timings would make the choices vary)
        const double kDraftCost = 0.15;
        BeagleDraftParams autop = hybrid;
        autop.auto_draft_cost = kDraftCost;
        dcases.push_back({"random auto", "auto", &rnd, autop});
        dcases.push_back({"random hybrid", "hybrid", &rnd, hybrid_fixed});
        // the EAGLE-style draft (arch eagle): same engine, its self-attention KV cache grows with the tree
        DraftConfig ec = draft_config_for_target(s.mf->config, s.tok->spec());
        ec.arch = ARCH_EAGLE;
        DraftWeights rnd_eagle;
        rnd_eagle.init_random(ec, 7);
        dcases.push_back({"random eagle chain", "chain", &rnd_eagle, chain});  // (the trained one below drafts trees)
        // the Mixture of Attentions draft (arch moa: LSA over f and layers 1, 3; its self-attention cache grows
        // with the tree) on a session of its own, whose target keeps those layers' rows
        Session s_moa(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);
        DraftConfig mc = draft_config_for_target(s.mf->config, s.tok->spec());
        mc.arch = ARCH_MOA;
        mc.state_layers = {1, 3};
        DraftWeights rnd_moa;
        rnd_moa.init_random(mc, 7);
        dcases.push_back({"random moa tree", "tree", &rnd_moa, tree, &s_moa});
        std::string shipped = root + "/weights/beagle-stories260K.bin";
        DraftWeights trained;
        if (file_exists(shipped)) {
            trained = load_draft(shipped);
            BeagleDraftParams big;  // the paper's GPU setting: depth 5, top-10, 60 nodes
            big.total_tokens = 60;
            dcases.push_back({"trained chain", "chain", &trained, chain});
            dcases.push_back({"trained tree", "tree", &trained, tree});
            dcases.push_back({"trained tree 60", "tree", &trained, big});
            dcases.push_back({"trained tree, cost-aware", "tree", &trained, aware});
            dcases.push_back({"trained hybrid, cost-aware", "hybrid", &trained, hybrid});
            dcases.push_back({"trained auto", "auto", &trained, autop});
        } else {
            SKIP_PART("%s not present: the trained-draft cases did not run", shipped.c_str());
        }
        std::string shipped_eagle = root + "/weights/eagle-stories260K.bin";
        DraftWeights trained_eagle;
        if (file_exists(shipped_eagle)) {
            trained_eagle = load_draft(shipped_eagle);
            CHECK(trained_eagle.cfg.arch == ARCH_EAGLE, "%s is not an EAGLE draft", shipped_eagle.c_str());
            BeagleDraftParams big;
            big.total_tokens = 60;
            dcases.push_back({"trained eagle chain", "chain", &trained_eagle, chain});
            dcases.push_back({"trained eagle tree 60", "tree", &trained_eagle, big});
        } else {
            SKIP_PART("%s not present: the trained EAGLE cases did not run", shipped_eagle.c_str());
        }
        // plain decoding's logits row of every generated position P .. P+n-1 (P = prompt length, n = the
        // output's length): one causal forward over prompt + output, rows out (batch-invariant: equal to
        // the rows of the decode steps, test_batch_invariance)
        const int V = s.mf->config.vocab_size;
        auto plain_rows = [&](const std::vector<int>& ids, const std::vector<int>& out) {
            std::vector<int> all = ids;
            all.insert(all.end(), out.begin(), out.end());
            std::vector<float> lg(all.size() * V);
            s.llama->truncate(0);
            for (size_t b = 0; b < all.size(); b += 64) {
                int T = (int)std::min<size_t>(64, all.size() - b);
                std::vector<int> pos(T);
                for (int i = 0; i < T; i++) pos[i] = (int)b + i;
                s.llama->forward(&all[b], pos.data(), T, nullptr, 0, &lg[b * V], T, nullptr, 0);
            }
            return std::vector<float>(lg.begin() + ids.size() * V, lg.end());
        };
        // rows recorded by the speculative run equal the plain rows bit for bit (the first n; it may verify
        // a few positions past the end), and there are at least n - 1 of them (the last may be cut by the stop)
        int row_mismatches = 0;
        auto rows_equal = [&](const std::vector<float>& got, const std::vector<float>& want) {
            size_t n = std::min(got.size(), want.size());
            return got.size() + V >= want.size() && memcmp(got.data(), want.data(), n * sizeof(float)) == 0;
        };
        std::vector<std::unique_ptr<Drafter>> drafters;
        for (auto& c : dcases) drafters.push_back(make_drafter(c.sess ? *c.sess : s, c.mode, c.p, c.w, c.name));
        std::vector<double> tau_sum(dcases.size(), 0), committed(dcases.size(), 0), model_cost(dcases.size(), 0);
        std::vector<std::map<std::string, int>> modes(dcases.size());  // rounds by mode (auto switches)
        std::vector<double> draft_rounds(dcases.size(), 0);              // rounds that ran the draft
        std::unique_ptr<Drafter> lookup_aware;
        double lookup_committed[2] = {0, 0}, lookup_cost[2] = {0, 0};
        for (size_t i = 0; i < prompts.size(); i++) {
            std::vector<int> ids = s.encode_prompt(prompts[i], false, "");
            GenStats pst;
            std::vector<int> plain;
            s.generate_plain(ids, 256, greedy, nullptr, &pst, &plain);
            std::vector<float> want_rows = plain_rows(ids, plain);
            // the last two: fixed gamma 5 and cost-aware (same cost model as the trees), compared below;
            // the cost-aware lookup keeps its acceptance counts across prompts, as in a bench run
            struct { int ngram, gamma, max_tree; bool aware; } cfgs[] = {
                {3, 5, 64, false}, {1, 8, 64, false}, {2, 3, 2, false}, {3, 8, 64, true}};
            for (auto& c : cfgs) {
                std::unique_ptr<Drafter> fresh;
                if (!c.aware) fresh = make_lookup_drafter(c.ngram, c.gamma);
                else if (!lookup_aware) lookup_aware = make_lookup_drafter(c.ngram, c.gamma, aware.verify_cost);
                Drafter* d = c.aware ? lookup_aware.get() : fresh.get();
                SpecParams spp;
                spp.max_tree = c.max_tree;
                spp.learn_cost = false;  // the assertions below are in units of the fixed cost model
                SpecStats st;
                std::vector<int> got;
                RowRecorder rec;
                Acceptance acc;
                acc.observer = &rec;
                generate_speculative(s, *d, ids, 256, greedy, spp, nullptr, &st, &got, acc);
                const std::vector<float>& rows = rec.rows;
                row_mismatches += !rows_equal(rows, want_rows);
                CHECK(rows_equal(rows, want_rows), "prompt %zu lookup ngram %d gamma %d: verify rows differ from plain", i,
                      c.ngram, c.gamma);
                if (c.ngram == 3) {  // tokens per modelled cost: [0] fixed gamma 5, [1] cost-aware
                    lookup_committed[c.aware] += st.gen_tokens_after_root;
                    lookup_cost[c.aware] += st.rounds + 0.3 * st.drafted;
                }
                bool same = got == plain;
                if (!same) mismatches++;
                CHECK(same, "prompt %zu ('%s') lookup ngram %d gamma %d: %zu vs %zu tokens, differ", i, prompts[i].c_str(),
                      c.ngram, c.gamma, got.size(), plain.size());
                total_tokens += st.gen_tokens;
                total_passes += st.target_passes;
            }
            for (size_t k = 0; k < dcases.size(); k++) {
                SpecParams spp;
                spp.max_tree = 64;
                spp.learn_cost = false;
                SpecStats st;
                std::vector<int> got;
                RowRecorder rec;
                Acceptance acc;
                acc.observer = &rec;
                generate_speculative(dcases[k].sess ? *dcases[k].sess : s, *drafters[k], ids, 256, greedy, spp, nullptr, &st,
                                     &got, acc);
                const std::vector<float>& rows = rec.rows;
                row_mismatches += !rows_equal(rows, want_rows);
                CHECK(rows_equal(rows, want_rows), "prompt %zu %s: verify rows differ from plain", i, dcases[k].name);
                if (got != plain) mismatches++;
                CHECK(got == plain, "prompt %zu ('%s') %s: %zu vs %zu tokens, differ", i, prompts[i].c_str(), dcases[k].name,
                      got.size(), plain.size());
                tau_sum[k] += st.tau();
                committed[k] += st.gen_tokens_after_root;
                model_cost[k] += st.rounds + 0.3 * st.drafted;  // the cost model above, summed over rounds
                for (const auto& kv : st.rounds_by_mode) {
                    modes[k][kv.first] += kv.second;
                    if (kv.first != "lookup" && kv.first != "plain") draft_rounds[k] += kv.second;
                }
            }
            if (i == 0) {  // the checker fails on the smallest error: one logit of one verify row one ulp off
                SpecParams spp;
                spp.learn_cost = false;
                SpecStats st;
                std::vector<int> got;
                RowRecorder rec;
                rec.plant_ulp = true;
                Acceptance acc;
                acc.observer = &rec;
                std::unique_ptr<Drafter> d = make_lookup_drafter(1, 8);  // drafts from the first round on
                generate_speculative(s, *d, ids, 256, greedy, spp, nullptr, &st, &got, acc);
                CHECK(!rec.plant_ulp, "no verify of more than one token: nothing was planted");
                CHECK(!rows_equal(rec.rows, want_rows), "a verify row one ulp off was NOT caught");
                printf("planted: a verify row one ulp off: rows differ from plain (caught); tokens %s\n",
                       got == plain ? "still identical (a token comparison alone would not see it)" : "differ");
            }
        }
        // tokens per unit of modelled verify cost (a plain step = 1): the cost-aware tree must beat every
        // fixed tree of the same draft under the model it optimises, and never fall far below plain
        auto per_cost = [&](const char* name) {
            for (size_t k = 0; k < dcases.size(); k++)
                if (std::string(dcases[k].name) == name) return committed[k] / model_cost[k];
            return -1.0;
        };
        for (size_t k = 0; k < dcases.size(); k++)
            printf("%s: mean tau %.3f, tokens per modelled cost %.3f\n", dcases[k].name, tau_sum[k] / prompts.size(),
                   committed[k] / model_cost[k]);
        // with the draft's own cost too (kDraftCost per round that ran it): what mode auto optimises
        auto per_cost_d = [&](const char* name) {
            for (size_t k = 0; k < dcases.size(); k++)
                if (std::string(dcases[k].name) == name) return committed[k] / (model_cost[k] + kDraftCost * draft_rounds[k]);
            return -1.0;
        };
        auto rounds_of = [&](const char* name, const char* mode) {
            for (size_t k = 0; k < dcases.size(); k++)
                if (std::string(dcases[k].name) == name) return modes[k].count(mode) ? modes[k][mode] : 0;
            return -1;
        };
        for (const char* name : {"random auto", "trained auto"})
            if (rounds_of(name, "hybrid") >= 0)
                printf("%s: rounds hybrid %d, lookup %d, plain %d; tokens per modelled cost with drafting %.3f\n", name,
                       rounds_of(name, "hybrid"), rounds_of(name, "lookup"), rounds_of(name, "plain"), per_cost_d(name));
        for (const char* name : {"random hybrid, cost-aware", "trained hybrid, cost-aware", "trained tree, cost-aware"})
            printf("%s: tokens per modelled cost with drafting %.3f\n", name, per_cost_d(name));
        // auto, random draft (never pays): both arms ran (so the exactness above covers switching), and it
        // does about as well as the cost-aware lookup alone (5% slack: its lookup sends up to --gamma 5
        // tokens, that one up to 8) and better than always drafting (hybrid) once drafting costs something
        CHECK(rounds_of("random auto", "hybrid") > 0 && rounds_of("random auto", "plain") + rounds_of("random auto", "lookup") > 0,
              "random auto: rounds hybrid %d, lookup %d, plain %d; expected both the draft and lookup / plain",
              rounds_of("random auto", "hybrid"), rounds_of("random auto", "lookup"), rounds_of("random auto", "plain"));
        CHECK(per_cost_d("random auto") > per_cost_d("random hybrid, cost-aware"),
              "random auto: %.3f tokens per modelled cost with drafting, not above always-hybrid's %.3f",
              per_cost_d("random auto"), per_cost_d("random hybrid, cost-aware"));
        double rnd_aware = per_cost("random tree, cost-aware");
        CHECK(rnd_aware >= 0.95 && rnd_aware > 2 * per_cost("random tree"),
              "random draft, cost-aware: %.3f tokens per cost (fixed tree %.3f); expected >= 0.95 (about plain)", rnd_aware,
              per_cost("random tree"));
        double lk_fixed = lookup_committed[0] / lookup_cost[0], lk_aware = lookup_committed[1] / lookup_cost[1];
        printf("lookup ngram 3: tokens per modelled cost %.3f with gamma 5, %.3f cost-aware (up to 8)\n", lk_fixed, lk_aware);
        // hybrid: with a random draft the lookup candidates carry it, so it must do about as well as
        // the cost-aware lookup alone (5% slack: the lookup here may be up to depth 5, not 8)
        double rnd_hybrid = per_cost("random hybrid, cost-aware");
        CHECK(rnd_hybrid >= 0.95 * lk_aware && rnd_hybrid > rnd_aware,
              "random draft, hybrid: %.3f tokens per cost; cost-aware lookup %.3f, cost-aware tree %.3f", rnd_hybrid,
              lk_aware, rnd_aware);
        // auto measures the lookup rounds' own gain and runs the draft only when it beats that (2% slack:
        // its probes, and its lookup sends up to --gamma 5 tokens where this one sends up to 8): the rule
        // that compared the draft with plain decoding alone ran this random draft in 2279 of 8281 rounds
        // and reached 0.975 x the lookup's rate
        CHECK(per_cost_d("random auto") >= 0.98 * lk_aware, "random auto: %.3f tokens per modelled cost with drafting, "
              "below 0.98 x the cost-aware lookup's %.3f", per_cost_d("random auto"), lk_aware);
        // and a draft that pays keeps running: within 2% of always drafting (hybrid)
        if (rounds_of("trained auto", "hybrid") >= 0)
            CHECK(per_cost_d("trained auto") >= 0.98 * per_cost_d("trained hybrid, cost-aware"),
                  "trained auto: %.3f tokens per modelled cost with drafting, below 0.98 x always-hybrid's %.3f",
                  per_cost_d("trained auto"), per_cost_d("trained hybrid, cost-aware"));
        CHECK(lk_aware > lk_fixed && lk_aware >= 0.95, "cost-aware lookup: %.3f tokens per modelled cost, fixed gamma 5: %.3f",
              lk_aware, lk_fixed);
        if (trained.cfg.dim) {
            double tr_aware = per_cost("trained tree, cost-aware");
            double tr_hybrid = per_cost("trained hybrid, cost-aware");
            CHECK(tr_hybrid > tr_aware && tr_hybrid > lk_aware,
                  "trained draft: hybrid %.3f tokens per cost, not above the cost-aware tree %.3f and lookup %.3f",
                  tr_hybrid, tr_aware, lk_aware);
            // auto, trained draft (it pays here): mostly draft rounds, and within 3% of always drafting
            // (the price of its warm-up and of sitting out up to 16 rounds after a bad stretch)
            CHECK(rounds_of("trained auto", "hybrid") * 2 > rounds_of("trained auto", "lookup") + rounds_of("trained auto", "plain") &&
                      per_cost_d("trained auto") >= 0.97 * per_cost_d("trained hybrid, cost-aware") &&
                      per_cost_d("trained auto") > per_cost_d("trained tree, cost-aware"),
                  "trained auto: %.3f tokens per modelled cost with drafting (hybrid %.3f, tree %.3f), rounds hybrid %d, "
                  "lookup %d, plain %d", per_cost_d("trained auto"), per_cost_d("trained hybrid, cost-aware"),
                  per_cost_d("trained tree, cost-aware"), rounds_of("trained auto", "hybrid"),
                  rounds_of("trained auto", "lookup"), rounds_of("trained auto", "plain"));
            for (const char* fixed : {"trained tree", "trained tree 60"})
                CHECK(tr_aware > per_cost(fixed), "trained draft: cost-aware %.3f tokens per cost, not above %s's %.3f",
                      tr_aware, fixed, per_cost(fixed));
        }
        printf("lookup: %d tokens in %d target passes (tau %.3f), %d mismatches\n", total_tokens, total_passes,
               total_passes ? (double)total_tokens / total_passes : 0.0, mismatches);
        printf("verify rows differing from plain decoding's: %d runs\n", row_mismatches);
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("spec_exact");
}
