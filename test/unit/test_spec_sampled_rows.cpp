// test_spec_sampled_rows.cpp: sampled speculative decoding with the verify's logits left on the backend
// (SpecDecoder::step brings down only the rows the acceptance walk reads) commits the same tokens, seed for
// seed, as the walk over every row brought down to the host (SpecDecoder::commit, the server's path and
// what step() did before): the same sampling math on the same floats, the same RNG draws.
//   - accept_path reads exactly the path's rows, root first, each once (a counting row source over a
//     fixed tree: candidates point masses and sampled q, rejections and acceptances);
//   - stories260K, temperature 0.8 (top-p 0.9 too), 64 tokens x 6 seeds (2 under ASan) per drafter: a random-weights Beagle
//     chain (sampled q), the shipped draft's tree of 24 (many paths), prompt lookup (point masses):
//     step() == draft() + a forward with every row downloaded + commit();
//   - the chain drawn on the backend (Draft::sample_ids, accept_chain) == the host loop
//     (BeagleDraftParams::chain_on_backend false), seed for seed, top-k and top-p on and off: random
//     stories260K drafts (Beagle and EAGLE), and SmolLM2 with its shipped draft (a reduced vocabulary: q
//     columns through d2t).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "decode/accept.h"
#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

// A tree of 8 nodes over V = 6 with made-up logits: the root has three children (point masses), node 1 two
// (sampled q); every walk must ask for the rows of its path, in order, once each. 1000 seeds reach all 7
// reachable paths (node 5 never: its token has p = 0 in the residual after node 4's rejection).
static void test_rows_read() {
    const int V = 6;
    DraftTree tree;
    tree.reset(0);
    static const float q[V] = {0.1f, 0.1f, 0.1f, 0.1f, 0.3f, 0.3f};
    int a = tree.add(0, 1, 0.0f), b = tree.add(0, 2, 0.0f);
    tree.add(0, 3, 0.0f);
    int c = tree.add(a, 4, 0.0f, q), d = tree.add(a, 5, 0.0f, q);
    tree.add(b, 0, 0.0f);
    tree.add(c, 1, 0.0f);
    (void)d;
    std::vector<float> logits((size_t)tree.size() * V);
    for (size_t i = 0; i < logits.size(); i++) logits[i] = (float)((i * 7919) % 13) / 8.0f;
    SamplingParams sp;
    sp.temperature = 0.8f;
    std::set<std::vector<int>> paths;
    for (uint64_t seed = 1; seed <= 1000; seed++) {
        Rng rng(seed * 0x9e3779b97f4a7c15ULL);  // spread: small seeds give correlated first draws
        std::vector<int> asked;
        auto row = [&](int i) {
            asked.push_back(i);
            return &logits[(size_t)i * V];
        };
        int bonus = -1;
        std::vector<int> path = accept_path(tree, row, V, sp, rng, &bonus);
        CHECK(asked == path, "seed %llu: rows read differ from the path (%zu rows read, path of %zu)",
              (unsigned long long)seed, asked.size(), path.size());
        CHECK(bonus >= 0 && bonus < V, "seed %llu: bonus %d", (unsigned long long)seed, bonus);
        paths.insert(path);
    }
    printf("accept_path: 1000 seeds, %zu distinct paths\n", paths.size());
    CHECK(paths.size() >= 7, "the walks took only %zu distinct paths: the tree is not exercised", paths.size());
}

// The walk over every downloaded row: draft(), the verify forward with all T rows of logits and states to
// the host, commit() (SpecDecoder's host path).
static std::vector<int> generate_host_rows(Session& s, Drafter& d, const std::vector<int>& prompt, int n,
                                           const SamplingParams& sp) {
    SpecStats st;
    SpecParams spp;
    spp.learn_cost = false;
    SpecDecoder dec(s, d, sp, spp, &st);
    Llama& m = *s.llama;
    const int V = m.config().vocab_size, D = m.config().dim;
    std::vector<int> out(1, dec.begin(prompt));
    std::vector<float> logits, states;
    while ((int)out.size() < n && dec.draft()) {
        const DraftTree& t = dec.tree();
        const int T = t.size();
        logits.resize((size_t)T * V);
        states.resize((size_t)T * D);
        m.forward(t.token.data(), dec.positions().data(), T, dec.mask(), t.words(), logits.data(), T, states.data(), T);
        dec.commit(logits.data(), states.data(), 0.0, &out);
    }
    out.resize(std::min((int)out.size(), n));
    return out;
}

// The chain drawn on the backend (Draft::sample_ids through Ops::warp_rows, accepted by accept_chain) commits
// what the host loop commits (each step's logits downloaded, warped and drawn on the host, the walk over host q
// rows), seed for seed, top-k and top-p on and off: on the CPU backend the same floats and draws.
static void chain_on_backend_vs_host(Session& s, const DraftWeights& w, const std::string& source,
                                     const std::vector<int>& prompt, int n) {
    BeagleDraftParams p;
    p.tree = false;
    p.gamma = 4;
    BeagleDraftParams host = p;
    host.chain_on_backend = false;
    std::unique_ptr<Drafter> d_back = make_drafter(s, "chain", p, &w, source), d_host = make_drafter(s, "chain", host, &w, source);
    int same = 0, rounds = 0;
    const int seeds = sanitized_build() ? 3 : 6;  // ASan: 3 (temperature 0.8; top-p and top-k each on and off)
    for (int k = 0; k < seeds; k++) {
        SamplingParams sp;
        sp.temperature = k < 3 ? 0.8f : 1.2f;
        sp.top_p = k % 3 == 0 ? 1.0f : 0.9f;
        sp.top_k = k % 3 == 2 ? 20 : 0;
        sp.seed = 2000 + k;
        SpecParams spp;
        spp.learn_cost = false;
        SpecStats st_b, st_h;
        std::vector<int> got, want;
        generate_speculative(s, *d_back, prompt, n, sp, spp, nullptr, &st_b, &got);
        generate_speculative(s, *d_host, prompt, n, sp, spp, nullptr, &st_h, &want);
        same += got == want;
        rounds += st_b.rounds;
        CHECK(got == want && st_b.rounds == st_h.rounds, "%s seed %d: the chain drawn on the backend committed %zu tokens "
              "in %d rounds, the host loop %zu in %d: differ", source.c_str(), 2000 + k, got.size(), st_b.rounds,
              want.size(), st_h.rounds);
    }
    printf("sampled chain on the backend vs the host loop, %s: %d/%d seeds identical (%d rounds)\n", source.c_str(), same,
           seeds, rounds);
}

int main() {
    test_rows_read();
    const std::string M = test_models_dir(), root = test_root();
    try {
        Session s(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);
        DraftWeights rnd;
        rnd.init_random(draft_config_for_target(s.mf->config, s.tok->spec()), 11);
        BeagleDraftParams chain;
        chain.tree = false;
        chain.gamma = 4;
        BeagleDraftParams tree;
        tree.total_tokens = 24;
        struct Case { const char* name; std::unique_ptr<Drafter> d; };
        std::vector<Case> cases;
        cases.push_back({"random chain (sampled q)", make_drafter(s, "chain", chain, &rnd, "random")});
        const std::string shipped = root + "/weights/beagle-stories260K.bin";
        DraftWeights trained;
        if (file_exists(shipped)) {
            trained = load_draft(shipped);
            cases.push_back({"trained tree of 24", make_drafter(s, "tree", tree, &trained, shipped)});
        } else {
            CHECK(false, "%s missing: the trained-draft case cannot run", shipped.c_str());
        }
        cases.push_back({"lookup (point masses)", make_lookup_drafter(2, 4)});
        const std::vector<int> prompt = s.encode_prompt(
            "Once upon a time, there was a little girl named Lily. Lily went to the park with her mom. Lily", false, "");
        const int n = 64;
        for (auto& c : cases) {
            int same = 0, rounds = 0, tokens_after_root = 0;
            const int seeds = sanitized_build() ? 2 : 6;  // ASan: 2 (top-p on and off)
            for (int k = 0; k < seeds; k++) {
                SamplingParams sp;
                sp.temperature = 0.8f;
                sp.top_p = k % 2 ? 0.9f : 1.0f;
                sp.top_k = 0;
                sp.seed = 1000 + k;
                SpecParams spp;
                spp.learn_cost = false;
                SpecStats st;
                std::vector<int> got;
                generate_speculative(s, *c.d, prompt, n, sp, spp, nullptr, &st, &got);
                std::vector<int> want = generate_host_rows(s, *c.d, prompt, n, sp);
                // the stop token ends generate_speculative's output early; the host loop runs on to n
                const bool ok = got.size() <= want.size() && std::equal(got.begin(), got.end(), want.begin()) &&
                                (got.size() == want.size() || s.is_stop(want[got.size()]));
                same += ok;
                CHECK(ok, "%s seed %d: %zu tokens from the path's rows, %zu from every row: differ", c.name, 1000 + k,
                      got.size(), want.size());
                rounds += st.rounds;
                tokens_after_root += st.gen_tokens_after_root;
            }
            printf("%-26s %d seeds x %d tokens: %d/%d identical; %d rounds, tau %.2f\n", c.name, seeds, n, same, seeds, rounds,
                   rounds ? (double)tokens_after_root / rounds : 0.0);
        }
        chain_on_backend_vs_host(s, rnd, "random", prompt, 64);
        DraftConfig ec = draft_config_for_target(s.mf->config, s.tok->spec());
        ec.arch = ARCH_EAGLE;  // its token embedding placed on the backend too (forward_ids)
        DraftWeights rnd_eagle;
        rnd_eagle.init_random(ec, 7);
        chain_on_backend_vs_host(s, rnd_eagle, "random eagle", prompt, 64);
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    // SmolLM2 with its shipped draft: a reduced vocabulary (the q rows' columns are target tokens through d2t)
    const std::string sm = root + "/weights/SmolLM2-135M-Instruct.Q4_1.gguf", sd = root + "/weights/beagle-smollm2-135m.bin";
    if (file_exists(sm) && file_exists(sd)) {
        try {
            Session s(sm, "", 2, 512, 64);
            DraftWeights w = load_draft(sd);
            chain_on_backend_vs_host(s, w, sd, s.encode_prompt("Write a short story about a robot learning to paint.",
                                                                 true, ""), 32);
        } catch (const Error& e) {
            CHECK(false, "error: %s", e.what());
        }
    } else {
        CHECK(false, "%s or %s missing (make model): the reduced-vocabulary case cannot run", sm.c_str(), sd.c_str());
    }
    return test_summary("spec_sampled_rows");
}
