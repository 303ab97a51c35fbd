// cuda_backend_tree.cpp -> build/test/test_cuda_backend_tree: the greedy EAGLE-2 tree drafted with its
// working tree on the backend (BeagleDrafter's expand_on_backend: Draft::tree_expand, Ops::tree_expand;
// docs/gpu.md "The device-resident loop"; on the CUDA backend replayed as one graph per shape,
// Draft::begin_steps) is the host loop's tree (BeagleDraftParams::tree_on_backend false) node for node:
// tokens, parents and scores bit for bit, every round of greedy speculative decoding, on the CPU backend and
// on the CUDA backend (kernels in the CPU emulator), stories260K with the shipped draft (depth 5, top-10, 60
// nodes; cost-aware, whose rows below min_score are pruned, min_score staged for the graph; hybrid; a window
// of 16 true keys, which slides inside the replayed rounds) and random drafts (reduced vocabulary through
// d2t, no-concat). The two drafters run side by side on one session (a Drafter that proposes with both and
// hands on the first's tree), and the output must equal plain greedy decoding. On the CUDA backend the
// backend tree's propose costs at most one sync (the tree's one copy down; frees, which sync too, not
// counted: the draft's key temporaries grow once with a long prompt), the host loop's one per depth. Also on
// the CUDA backend: the sampled chain replayed from graphs, with changing warp arguments, gives the texts of
// the same runs without graphs (check_sampled_warps).
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

// a = tree on the backend, b = the host loop; a's tree goes to the engine, b's must be the same.
class TwinDrafter : public Drafter {
public:
    TwinDrafter(std::unique_ptr<Drafter> a, std::unique_ptr<Drafter> b, Ops& ops) : a_(std::move(a)), b_(std::move(b)), ops_(ops) {}
    const char* name() const override { return a_->name(); }
    void begin(const std::vector<int>& prompt, const float* states) override {
        a_->begin(prompt, states);
        b_->begin(prompt, states);
    }
    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) override {
        DraftTree tb = *tree;
        const DeviceCounters* dc = ops_.device_counters();
        // syncs other than frees (a cudaFree syncs too: the draft's key temporaries grow once with the prompt)
        auto syncs = [&] { return dc ? dc->syncs - dc->frees : 0; };
        const long long s0 = syncs();
        a_->propose(history, tree, room, sp, rng);
        const long long s1 = syncs();
        b_->propose(history, &tb, room, sp, rng);
        const long long s2 = syncs();
        rounds++;
        nodes += tree->size() - 1;
        if (dc) {
            a_syncs += s1 - s0;
            b_syncs += s2 - s1;
            max_a_syncs = std::max(max_a_syncs, s1 - s0);
        }
        bool same = tree->token == tb.token && tree->parent == tb.parent && tree->score.size() == tb.score.size() &&
                    memcmp(tree->score.data(), tb.score.data(), tb.score.size() * sizeof(float)) == 0;
        if (!same && diffs++ < 3)
            printf("  round %d: backend tree %d nodes, host loop %d nodes, differ\n", rounds, tree->size(), tb.size());
    }
    void accept(const DraftTree& tree, const std::vector<int>& path, const float* st) override {
        a_->accept(tree, path, st);
        b_->accept(tree, path, st);
    }
    void accept_rows(const DraftTree& tree, const std::vector<int>& path, Ops& ops, const float* st, int dim) override {
        a_->accept_rows(tree, path, ops, st, dim);
        b_->accept_rows(tree, path, ops, st, dim);
    }
    void observe_verify(int T, double seconds, int context) override {
        a_->observe_verify(T, seconds, context);
        b_->observe_verify(T, seconds, context);
    }
    int rounds = 0, nodes = 0, diffs = 0;
    long long a_syncs = 0, b_syncs = 0, max_a_syncs = 0;

private:
    std::unique_ptr<Drafter> a_, b_;
    Ops& ops_;
};

static void run_backend(const std::string& backend, const std::string& M, const std::vector<std::string>& prompts,
                        int n_tok, const DraftWeights* trained) {
    select_backend(backend);
    Session s(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);
    CHECK(std::string(s.ops->name()) == backend, "session backend %s, wanted %s", s.ops->name(), backend.c_str());
    SamplingParams greedy;
    greedy.temperature = 0;
    DraftWeights rnd;
    rnd.init_random(draft_config_for_target(s.mf->config, s.tok->spec()), 7);
    DraftWeights rv = rnd;  // reduced vocabulary: two thirds of the tokens, ids through d2t on the backend
    for (int t = 0; t < rv.cfg.vocab_size; t++)
        if (t % 3 != 1) rv.d2t.push_back(t);
    rv.cfg.draft_vocab = (int)rv.d2t.size();
    BeagleDraftParams big;  // the defaults: depth 5, top-10, 60 nodes
    BeagleDraftParams small;
    small.depth = 3;
    small.topk = 4;
    small.total_tokens = 12;
    BeagleDraftParams nc = small;
    nc.concat = false;
    BeagleDraftParams aware;  // cost-aware (a fixed cost model): rows below min_score are pruned
    aware.verify_cost.assign(25, 1.0);
    for (int T = 1; T <= 24; T++) aware.verify_cost[T] = 1 + 0.3 * (T - 1);
    BeagleDraftParams hybrid = aware;
    hybrid.lookup_ngram = 3;
    BeagleDraftParams window = small;  // the last 16 true keys only: the window slides inside captured rounds
    window.true_window = 16;
    struct Case { const char* name; const char* mode; const DraftWeights* w; BeagleDraftParams p; };
    std::vector<Case> cases = {{"random tree, reduced vocab", "tree", &rv, small},
                               {"random tree no-concat", "tree", &rnd, nc}};
    if (trained) {
        cases.push_back({"trained tree 60", "tree", trained, big});
        cases.push_back({"trained tree, cost-aware", "tree", trained, aware});
        cases.push_back({"trained hybrid, cost-aware", "hybrid", trained, hybrid});
        cases.push_back({"trained tree, window 16", "tree", trained, window});
    }
    for (const Case& c : cases) {
        BeagleDraftParams ph = c.p;
        ph.tree_on_backend = false;
        TwinDrafter twin(make_drafter(s, c.mode, c.p, c.w, c.name), make_drafter(s, c.mode, ph, c.w, c.name), *s.ops);
        int mismatches = 0;
        for (const std::string& pr : prompts) {
            std::vector<int> ids = s.encode_prompt(pr, false, "");
            std::vector<int> plain, got;
            GenStats pst;
            s.generate_plain(ids, n_tok, greedy, nullptr, &pst, &plain);
            SpecParams spp;
            spp.max_tree = 64;
            spp.learn_cost = false;
            SpecStats st;
            generate_speculative(s, twin, ids, n_tok, greedy, spp, nullptr, &st, &got);
            mismatches += got != plain;
        }
        printf("  %-5s %-28s rounds %4d  nodes/round %5.1f  trees differing %d  syncs in propose: backend tree %.2f "
               "(max %lld), host loop %.2f per round\n",
               backend.c_str(), c.name, twin.rounds, (double)twin.nodes / std::max(twin.rounds, 1), twin.diffs,
               (double)twin.a_syncs / std::max(twin.rounds, 1), twin.max_a_syncs,
               (double)twin.b_syncs / std::max(twin.rounds, 1));
        CHECK(twin.rounds >= (int)prompts.size() && twin.nodes > twin.rounds, "%s %s: %d rounds, %d nodes: nothing drafted",
              backend.c_str(), c.name, twin.rounds, twin.nodes);
        CHECK(twin.diffs == 0, "%s %s: %d of %d rounds' trees differ from the host loop's", backend.c_str(), c.name,
              twin.diffs, twin.rounds);
        CHECK(mismatches == 0, "%s %s: %d of %zu outputs differ from plain greedy", backend.c_str(), c.name, mismatches,
              prompts.size());
        if (backend == "cuda") {  // one copy down per round where the draft ran (hybrid may skip it: 0)
            CHECK(twin.max_a_syncs == 1, "%s %s: the backend tree's propose synced up to %lld times", backend.c_str(),
                  c.name, twin.max_a_syncs);
            // the host loop syncs once per expanded depth: at least twice per round at a fixed depth of 2+;
            // a cost-aware tree's round policy also runs depth-1 rounds (one sync either way), so there
            // only some rounds save one
            const long long k = c.p.verify_cost.empty() ? 2 : 1;
            CHECK(twin.b_syncs > k * twin.a_syncs, "%s %s: host loop %lld syncs vs backend tree %lld: no depth's sync saved",
                  backend.c_str(), c.name, twin.b_syncs, twin.a_syncs);
        }
    }
}

// The sampled chain's draft steps replayed from a graph (Draft::begin_steps with the warp) give the text of
// the same run without graphs, seed for seed, when one drafter samples with changing warp arguments (a
// server's requests): a graph captured at temperature 0.8 and top-p 0.9 must not serve a round at 0.6 and
// top-k 20.
static void check_sampled_warps(const std::string& M, const std::vector<std::string>& prompts, const DraftWeights& w) {
    std::vector<std::vector<int>> outs[2];
    for (int graphs = 0; graphs < 2; graphs++) {
        select_backend("cuda");
        setenv("BEAGLE_CUDA_GRAPH", graphs ? "1" : "0", 1);
        Session s(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);
        unsetenv("BEAGLE_CUDA_GRAPH");
        BeagleDraftParams p;
        p.tree = false;
        std::unique_ptr<Drafter> d = make_drafter(s, "chain", p, &w, "sampled chain");
        const DeviceCounters before = *s.ops->device_counters();
        for (const std::string& pr : prompts)
            for (int c = 0; c < 3; c++) {
                SamplingParams sp;
                sp.temperature = c == 1 ? 0.6f : 0.8f;
                sp.top_k = c == 1 ? 20 : 0;
                sp.top_p = c == 1 ? 1.0f : 0.9f;
                sp.seed = 11 + c;
                SpecParams spp;
                spp.learn_cost = false;
                SpecStats st;
                std::vector<int> got;
                generate_speculative(s, *d, s.encode_prompt(pr, false, ""), 32, sp, spp, nullptr, &st, &got);
                outs[graphs].push_back(got);
            }
        const DeviceCounters dc = *s.ops->device_counters() - before;
        CHECK((dc.graph_launches > 0) == (graphs == 1), "sampled chain: %lld graph launches with graphs %s",
              dc.graph_launches, graphs ? "on" : "off");
    }
    int differ = 0;
    for (size_t i = 0; i < outs[0].size(); i++) differ += outs[0][i] != outs[1][i];
    printf("  cuda  sampled chain, changing warps: %zu texts, %d differ with graphs\n", outs[0].size(), differ);
    CHECK(differ == 0, "sampled chain: %d of %zu texts differ between graphs on and off", differ, outs[0].size());
}

int main() {
    const std::string M = test_models_dir(), root = test_root();
    const std::vector<std::string> prompts = test_stories_prompts();
    CHECK(prompts.size() >= 8, "expected the stories prompts, read %zu", prompts.size());
    try {
        std::string shipped = root + "/weights/beagle-stories260K.bin";
        DraftWeights trained;
        const bool have = file_exists(shipped);
        if (have) trained = load_draft(shipped);
        else SKIP_PART("%s not present: the trained-draft cases did not run", shipped.c_str());
        run_backend("cpu", M, std::vector<std::string>(prompts.begin(), prompts.begin() + 8), 128, have ? &trained : nullptr);
        run_backend("cuda", M, std::vector<std::string>(prompts.begin(), prompts.begin() + 2), 40, have ? &trained : nullptr);
        if (have) check_sampled_warps(M, std::vector<std::string>(prompts.begin(), prompts.begin() + 2), trained);
    } catch (const std::exception& e) {
        CHECK(false, "exception: %s", e.what());
    }
    return test_summary("test_cuda_backend_tree");
}
