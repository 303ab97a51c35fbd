// test_spec_sampling.cpp: speculative SAMPLING is lossless: the distribution of the tokens generated
// at fixed positions equals plain sampling's. stories260K, temperature 1, prompt "Once upon a time",
// N samples per method; two-sample chi-square test per position (first 3 generated tokens).
// Drafters: an oracle tree (the target's own top-3 + greedy chain: accepted often; deterministic
// candidates, point-mass q), a random-weights Beagle draft in chain mode (candidates SAMPLED from its
// q: exercises min(1, p/q) and the residual max(0, p - q)) and in tree mode (siblings rejected in
// turn), the shipped draft (chain, tree, cost-aware tree), and on a second, repetitive prompt prompt
// lookup and the hybrid (tree + lookup candidates); the EAGLE-style draft (random: sampled chain;
// shipped weights/eagle-stories260K.bin: chain and tree); the Mixture of Attentions draft (random: sampled chain
// and tree); an independent draft model (a perturbed copy of the target: sampled chain and tree); Medusa heads
// (random: sampled chain, also over a reduced vocabulary; shipped weights/medusa-stories260K.bin: chain drawn from
// each head's q, tree of the heads' top-k as point masses). Each test at alpha = 1e-3; 21 drafters x 3 positions =
// 63 tests -> family-wise false alarm <= 6.3% (Bonferroni; fixed seeds, so a given build either passes or fails
// for good).
// Test of the test: with a wrong acceptance rule (broken_residual below, given to the engine through
// Acceptance::rule: p kept after a rejection instead of the residual) the oracle drafter's output must
// be rejected with p < 1e-6.
// Under ASan (make test-asan, sanitized_build()) N is 400 per drafter and 800 for the broken one (chi2 at
// N = 2000 was 103 on 4 df: at 800 about 41, p ~ 1e-8), about 1/5 of the samples; the same fixed seeds.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "decode/drafters.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "core/rng.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

// accept_path's sampled walk with the residual step left out: after a candidate's rejection the next
// sibling (and the bonus token) is judged against the unchanged p. The wrong rule the check must catch.
static std::vector<int> broken_residual(const DraftTree& tree, const LogitsRow& row, int V, const SamplingParams& sp,
                                        Rng& rng, int* bonus) {
    std::vector<std::vector<int>> kids = tree.children();
    std::vector<int> path(1, 0);
    std::vector<float> p;
    for (int cur = 0;;) {
        warp_dense(row(cur), V, sp, &p);
        int next = -1;
        for (int c : kids[cur]) {
            const int x = tree.token[c];
            const float* q = tree.q[c];
            const float a = q ? (q[x] > 0 ? std::min(1.0f, p[x] / q[x]) : 0.0f) : p[x];
            if (rng.next_f32() < a) { next = c; break; }
        }
        if (next < 0) {  // the bonus token from p (a draw from the unnormalised p, as accept_path's)
            float total = 0, cdf = 0;
            for (float v : p) total += v;
            const float r = rng.next_f32() * total;
            int last = 0;
            *bonus = -1;
            for (int i = 0; i < V && *bonus < 0; i++) {
                if (p[i] <= 0) continue;
                cdf += p[i];
                last = i;
                if (r < cdf) *bonus = i;
            }
            if (*bonus < 0) *bonus = last;
            return path;
        }
        path.push_back(next);
        cur = next;
    }
}

// Upper tail of the chi-square distribution: Q(df/2, x/2) (regularized upper incomplete gamma).
static double chi2_sf(double x, double df) {
    double a = df / 2, z = x / 2;
    if (z <= 0) return 1.0;
    double gln = std::lgamma(a);
    if (z < a + 1) {  // series for P, return 1 - P
        double sum = 1.0 / a, term = sum;
        for (int n = 1; n < 1000; n++) {
            term *= z / (a + n);
            sum += term;
            if (term < sum * 1e-15) break;
        }
        return 1.0 - sum * std::exp(-z + a * std::log(z) - gln);
    }
    // continued fraction for Q (Lentz)
    double b = z + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (std::fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (std::fabs(c) < 1e-300) c = 1e-300;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (std::fabs(del - 1) < 1e-15) break;
    }
    return std::exp(-z + a * std::log(z) - gln) * h;
}

// Two-sample chi-square test of homogeneity; categories with fewer than 10 total are pooled.
static double two_sample_p(const std::vector<int>& a, const std::vector<int>& b, double* stat_out, int* df_out) {
    std::map<int, std::pair<double, double>> c;
    for (int x : a) c[x].first++;
    for (int x : b) c[x].second++;
    std::vector<std::pair<double, double>> cats;
    std::pair<double, double> other{0, 0};
    for (auto& kv : c) {
        if (kv.second.first + kv.second.second < 10) {
            other.first += kv.second.first;
            other.second += kv.second.second;
        } else {
            cats.push_back(kv.second);
        }
    }
    if (other.first + other.second > 0) cats.push_back(other);
    double na = (double)a.size(), nb = (double)b.size(), stat = 0;
    for (auto& k : cats) {
        double tot = k.first + k.second;
        double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
        stat += (k.first - ea) * (k.first - ea) / ea + (k.second - eb) * (k.second - eb) / eb;
    }
    int df = std::max(1, (int)cats.size() - 1);
    *stat_out = stat;
    *df_out = df;
    return chi2_sf(stat, df);
}

// The target itself as the drafter: root -> its top-3 tokens; the best -> greedy chain of 2 more.
class OracleDrafter : public Drafter {
public:
    explicit OracleDrafter(Session& s) : s_(s), m_(*s.mf, *s.ops, s.llama->ctx(), 64) {}
    const char* name() const override { return "oracle"; }
    void begin(const std::vector<int>&, const float*) override {}
    void accept(const DraftTree&, const std::vector<int>&, const float*) override {}
    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams&, Rng&) override {
        int V = s_.mf->config.vocab_size;
        std::vector<int> ctx(history);
        ctx.push_back(tree->token[0]);
        std::vector<float> lg(V);
        m_.truncate(0);
        m_.prefill(ctx.data(), (int)ctx.size(), lg.data());
        std::vector<int> idx(V);
        for (int i = 0; i < V; i++) idx[i] = i;
        std::partial_sort(idx.begin(), idx.begin() + 3, idx.end(), [&](int a, int b) { return lg[a] > lg[b]; });
        int first = -1;
        for (int j = 0; j < 3 && tree->size() < room; j++) {
            int n = tree->add(0, idx[j], 0.0f);
            if (j == 0) first = n;
        }
        int node = first, t = idx[0];
        for (int k = 0; k < 2 && node >= 0 && tree->size() < room; k++) {
            int p = m_.n_past();
            m_.forward(&t, &p, 1, nullptr, 0, lg.data(), 1, nullptr, 0);
            t = argmax(lg.data(), V);
            node = tree->add(node, t, 0.0f);
        }
    }

private:
    Session& s_;
    Llama m_;
};

// Seeds for the xorshift RNG (run.c's, which uses the seed as its raw state): small consecutive
// seeds give correlated first draws, so each sample's seed goes through splitmix64.
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

int main() {
    const std::string M = test_models_dir();
    const int N = sanitized_build() ? 400 : 2000, N_BROKEN = sanitized_build() ? 800 : 2000, NPOS = 3;
    try {
        Session s(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);
        // prompt 2 repeats itself, so that prompt lookup finds n-gram matches
        const std::vector<std::vector<int>> prompts = {
            s.encode_prompt("Once upon a time", false, ""),
            s.encode_prompt("Once upon a time, there was a little girl named Lily. Lily went to the park. "
                            "Lily went to the park with her mom. Lily", false, "")};
        SamplingParams sp;
        sp.temperature = 1.0f;
        sp.top_p = 1.0f;
        sp.top_k = 0;
        // plain sampling, per prompt: position k of sample i
        std::vector<std::vector<std::vector<int>>> plain(prompts.size(), std::vector<std::vector<int>>(NPOS));
        for (size_t pi = 0; pi < prompts.size(); pi++)
            for (int i = 0; i < std::max(N, N_BROKEN); i++) {
                sp.seed = mix(1 + i);
                GenStats st;
                std::vector<int> out;
                s.generate_plain(prompts[pi], NPOS, sp, nullptr, &st, &out);
                CHECK((int)out.size() == NPOS, "plain sample %d has %zu tokens", i, out.size());
                for (int k = 0; k < NPOS && k < (int)out.size(); k++) plain[pi][k].push_back(out[k]);
            }
        DraftWeights rnd;
        rnd.init_random(draft_config_for_target(s.mf->config, s.tok->spec()), 11);
        BeagleDraftParams chain;
        chain.tree = false;
        chain.gamma = 3;
        BeagleDraftParams tree;
        tree.total_tokens = 12;
        tree.topk = 4;
        // sess: the session a case runs on (null: s; a draft with state layers makes its target keep them)
        struct Case { const char* name; std::unique_ptr<Drafter> d; bool broken; int prompt = 0; Session* sess = nullptr; };
        Session s_moa(M + "stories260K.bin", M + "tok512.bin", 1, 512, 64);  // before the cases: it outlives their drafters
        std::vector<Case> cases;
        cases.push_back({"oracle tree", std::unique_ptr<Drafter>(new OracleDrafter(s)), false});
        cases.push_back({"random chain (sampled q)", make_drafter(s, "chain", chain, &rnd, "random"), false});
        cases.push_back({"random tree", make_drafter(s, "tree", tree, &rnd, "random"), false});
        // reduced draft vocabulary (EAGLE-3 style): q is zero outside it, so the target's other tokens
        // can only come from the residual
        DraftWeights rv = rnd;
        for (int t = 0; t < rv.cfg.vocab_size; t++)
            if (t % 3 != 1) rv.d2t.push_back(t);
        rv.cfg.draft_vocab = (int)rv.d2t.size();
        cases.push_back({"random chain, reduced vocab", make_drafter(s, "chain", chain, &rv, "random, reduced vocab"), false});
        DraftConfig ec = draft_config_for_target(s.mf->config, s.tok->spec());
        ec.arch = ARCH_EAGLE;
        DraftWeights rnd_eagle;
        rnd_eagle.init_random(ec, 11);
        cases.push_back({"random eagle chain (sampled q)", make_drafter(s, "chain", chain, &rnd_eagle, "random eagle"), false});
        // the Mixture of Attentions draft (arch moa, LSA over f and layers 1, 3) on the session s_moa (above)
        DraftConfig mc = draft_config_for_target(s.mf->config, s.tok->spec());
        mc.arch = ARCH_MOA;
        mc.state_layers = {1, 3};
        DraftWeights rnd_moa;
        rnd_moa.init_random(mc, 11);
        cases.push_back({"random moa chain (sampled q)", make_drafter(s_moa, "chain", chain, &rnd_moa, "random moa"), false, 0,
                         &s_moa});
        cases.push_back({"random moa tree", make_drafter(s_moa, "tree", tree, &rnd_moa, "random moa"), false, 0, &s_moa});
        const char* root = getenv("BEAGLE_ROOT");
        std::string shipped = std::string(root ? root : ".") + "/weights/beagle-stories260K.bin";
        DraftWeights trained;
        if (file_exists(shipped)) {
            trained = load_draft(shipped);
            cases.push_back({"trained chain (sampled q)", make_drafter(s, "chain", chain, &trained, shipped), false});
            cases.push_back({"trained tree", make_drafter(s, "tree", tree, &trained, shipped), false});
            // cost-aware tree (--total-tokens auto): the tree of each round depends on past acceptance
            // (the calibration), still a function of the history only; a fixed cost model (see
            // test_spec_exact.cpp) instead of timings
            BeagleDraftParams aware;
            aware.verify_cost.assign(17, 1.0);
            for (int T = 1; T <= 16; T++) aware.verify_cost[T] = 1 + 0.3 * (T - 1);
            cases.push_back({"trained tree, cost-aware", make_drafter(s, "tree", aware, &trained, shipped), false});
            // prompt lookup and the hybrid on the repetitive prompt (ids2), where n-gram matches occur
            BeagleDraftParams hybrid = aware;  // lookup candidates (point masses) merged into the tree
            hybrid.lookup_ngram = 3;
            cases.push_back({"lookup (prompt 2)", make_lookup_drafter(3, 4), false, 1});
            cases.push_back({"trained tree, cost-aware (p2)", make_drafter(s, "tree", aware, &trained, shipped), false, 1});
            cases.push_back({"trained hybrid, cost-aware (p2)", make_drafter(s, "hybrid", hybrid, &trained, shipped), false, 1});
        } else {
            CHECK(false, "%s missing: the trained-draft cases cannot run", shipped.c_str());
        }
        std::string shipped_eagle = std::string(root ? root : ".") + "/weights/eagle-stories260K.bin";
        DraftWeights trained_eagle;
        if (file_exists(shipped_eagle)) {
            trained_eagle = load_draft(shipped_eagle);
            cases.push_back({"trained eagle chain (sampled q)", make_drafter(s, "chain", chain, &trained_eagle, shipped_eagle), false});
            cases.push_back({"trained eagle tree", make_drafter(s, "tree", tree, &trained_eagle, shipped_eagle), false});
        } else {
            CHECK(false, "%s missing: the trained EAGLE cases cannot run", shipped_eagle.c_str());
        }
        // Medusa heads: random (W, b ~ N(0, 0.1^2): each head's q differs from the target's p) and trained
        DraftConfig dc = draft_config_for_target(s.mf->config, s.tok->spec());
        dc.arch = ARCH_MEDUSA;
        dc.medusa_heads = 3;
        DraftWeights rnd_medusa;
        rnd_medusa.init_random(dc, 11);
        {
            TrainRng r(12);
            for (int t : {DT_MEDUSA_W, DT_MEDUSA_B})
                for (float& x : rnd_medusa.t[t]) x = (float)(0.1 * r.normal());
        }
        cases.push_back({"random medusa chain (sampled q)", make_drafter(s, "chain", chain, &rnd_medusa, "random medusa"), false});
        DraftWeights rv_medusa = rnd_medusa;  // q over the reduced vocabulary's tokens only (zero elsewhere)
        rv_medusa.d2t = rv.d2t;
        rv_medusa.cfg.draft_vocab = rv.cfg.draft_vocab;
        cases.push_back({"random medusa chain, reduced vocab", make_drafter(s, "chain", chain, &rv_medusa, "random medusa, reduced"), false});
        std::string shipped_medusa = std::string(root ? root : ".") + "/weights/medusa-stories260K.bin";
        DraftWeights trained_medusa;
        if (file_exists(shipped_medusa)) {
            trained_medusa = load_draft(shipped_medusa);
            cases.push_back({"trained medusa chain (sampled q)", make_drafter(s, "chain", chain, &trained_medusa, shipped_medusa), false});
            cases.push_back({"trained medusa tree", make_drafter(s, "tree", tree, &trained_medusa, shipped_medusa), false});
        } else {
            CHECK(false, "%s missing: the trained Medusa cases cannot run", shipped_medusa.c_str());
        }
        // an independent draft model (-md): stories260K with perturbed weights (testlib.h), its chain sampled
        // from its own q over the whole vocabulary, its tree of point masses
        const std::string noisy = "/tmp/beagle_test_spec_sampling_noisy.bin";
        write_perturbed_llama2c(M + "stories260K.bin", noisy, 0.15f, 3);
        std::shared_ptr<const ModelFile> dm = load_draft_model_for(s, noisy);
        std::remove(noisy.c_str());  // loaded (mapped or read): the file is no longer needed
        cases.push_back({"draft model chain (sampled q)", make_drafter(s, "chain", chain, dm), false});
        cases.push_back({"draft model tree", make_drafter(s, "tree", tree, dm), false});
        cases.push_back({"oracle tree, BROKEN residual", std::unique_ptr<Drafter>(new OracleDrafter(s)), true});
        for (auto& c : cases) {
            std::vector<std::vector<int>> sd(NPOS);
            double tau = 0;
            const int n = c.broken ? N_BROKEN : N;
            for (int i = 0; i < n; i++) {
                sp.seed = mix(1000003 + i);
                SpecParams spp;
                Acceptance acc;
                if (c.broken) acc.rule = broken_residual;
                SpecStats st;
                std::vector<int> out;
                generate_speculative(c.sess ? *c.sess : s, *c.d, prompts[c.prompt], NPOS, sp, spp, nullptr, &st, &out, acc);
                CHECK((int)out.size() == NPOS, "%s sample %d has %zu tokens", c.name, i, out.size());
                for (int k = 0; k < NPOS && k < (int)out.size(); k++) sd[k].push_back(out[k]);
                tau += st.tau();
            }
            double min_p = 1;
            for (int k = 0; k < NPOS; k++) {
                double stat;
                int df;
                double p = two_sample_p(plain[c.prompt][k], sd[k], &stat, &df);
                min_p = std::min(min_p, p);
                printf("%-30s position %d: chi2 %.1f df %d p %.3g\n", c.name, k, stat, df, p);
                if (!c.broken) CHECK(p >= 1e-3, "%s: position %d distribution differs from plain sampling (p %.3g)", c.name, k, p);
            }
            printf("%-30s mean tau %.3f (%d samples)\n", c.name, tau / n, n);
            if (c.broken) CHECK(min_p < 1e-6, "the broken residual rule was NOT detected (min p %.3g)", min_p);
        }
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("spec_sampling");
}
