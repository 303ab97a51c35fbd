// speculative.cpp: draft -> verify (one target forward over the tree) -> accept -> compact KV ->
// tell the drafter the new true states. See speculative.h.
#include "speculative.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "../core/common.h"

namespace beagle {

// ---------------------------------------------------------------- prompt lookup drafter
int find_ngram(const std::vector<int>& ctx, int ngram, int* from) {
    const int L = (int)ctx.size();
    for (int n = std::min(ngram, L - 1); n >= 1; n--) {
        const int* tail = &ctx[L - n];
        for (int start = L - n - 1; start >= 0; start--)
            if (std::equal(tail, tail + n, &ctx[start])) {
                *from = start + n;  // < L: the continuation holds at least the token after the match
                return n;
            }
    }
    return 0;
}

class LookupDrafter : public Drafter {
public:
    LookupDrafter(int ngram, int gamma, std::vector<double> cost)
        : ngram_(ngram), gamma_(gamma), cost_(std::move(cost)), rates_(ngram, gamma) {}
    const char* name() const override { return "lookup"; }
    void begin(const std::vector<int>&, const float*) override { shadow_tok_ = -1; }
    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams&, Rng&) override {
        if (shadow_tok_ >= 0) {  // last round matched but sent nothing: was its first token the target's?
            rates_.count(shadow_m_, 1, tree->token[0] == shadow_tok_);
            shadow_tok_ = -1;
        }
        // context = history + root; the continuation of the latest earlier occurrence of its last n-gram
        std::vector<int> ctx(history);
        ctx.push_back(tree->token[0]);
        int from = 0, m = find_ngram(ctx, ngram_, &from);
        if (m == 0) return;
        int len = std::min({gamma_, (int)ctx.size() - from, room - 1});
        if (len < 1) return;
        if (!cost_.empty()) len = worth_sending(m, len, ctx[from]);
        for (int k = 0, par = 0; k < len; k++) par = tree->add(par, ctx[from + k], 0.0f);
        matched_ = m;
    }
    void observe_verify(int T, double seconds) override { cost_.observe(T, seconds); }
    void accept(const DraftTree& tree, const std::vector<int>& path, const float*) override {
        if (cost_.empty()) return;
        std::vector<int> chain(tree.size() - 1);  // the tree is the chain itself: node k at depth k
        std::iota(chain.begin(), chain.end(), 1);
        rates_.count_chain(matched_, chain, path);
    }

private:
    int ngram_, gamma_;
    VerifyCost cost_;     // non-empty: cost-aware length (see make_lookup_drafter)
    LookupRates rates_;
    int matched_ = 1, shadow_tok_ = -1, shadow_m_ = 1;
    // The chain length n <= len with the most expected tokens per unit of verify cost, from the
    // acceptance rates seen so far for matches of this length (0: a plain step).
    int worth_sending(int m, int len, int first_tok) {
        len = std::min(len, cost_.max_tokens() - 1);
        double expect = 1, reach = 1, best = 1.0 / cost_[1];
        int keep = 0;
        for (int k = 1; k <= len; k++) {
            reach *= rates_.rate(m, k);
            expect += reach;
            if (expect / cost_[k + 1] > best) { best = expect / cost_[k + 1]; keep = k; }
        }
        if (keep == 0) { shadow_tok_ = first_tok; shadow_m_ = m; }
        return keep;
    }
};

std::unique_ptr<Drafter> make_lookup_drafter(int ngram, int gamma, std::vector<double> verify_cost) {
    BEAGLE_CHECK(ngram >= 1, "--ngram must be >= 1, got %d", ngram);
    BEAGLE_CHECK(gamma >= 1, "--gamma must be >= 1, got %d", gamma);
    BEAGLE_CHECK(verify_cost.empty() || verify_cost.size() >= 3, "verify cost table needs T = 1..2 at least");
    return std::unique_ptr<Drafter>(new LookupDrafter(ngram, gamma, std::move(verify_cost)));
}

void VerifyCost::observe(int T, double seconds) {
    if (table_.empty() || T < 1 || T > max_tokens() || !(seconds > 0)) return;
    auto update = [](double& mean, int& n, double x) {  // running mean of the first 32, then weight 1/32
        n++;
        mean += (x - mean) / std::min(n, 32);
    };
    if (T == 1) {
        update(t1_, n1_, seconds);
        return;
    }
    if (n1_ < 4 || table_[T] < 1.01) return;
    const double e = (seconds / t1_ - 1.0) / (table_[T] - 1.0);
    update(r_, nr_, std::min(4.0, std::max(0.25, e)));
}

// ---------------------------------------------------------------- acceptance
static int sample_dense(const std::vector<float>& p, float coin) {
    float total = 0;
    for (float v : p) total += v;
    float r = coin * total, cdf = 0;
    int last = 0;
    for (size_t i = 0; i < p.size(); i++) {
        if (p[i] <= 0) continue;
        cdf += p[i];
        last = (int)i;
        if (r < cdf) return (int)i;
    }
    return last;
}

// Walk the tree from the root; returns the accepted path (node indices, root first) and the
// target's token after it in *bonus. logits: one row per tree node.
static std::vector<int> accept_path(const DraftTree& tree, const float* logits, int V, const SamplingParams& sp,
                                    const SpecParams& spp, Rng& rng, int* bonus) {
    std::vector<std::vector<int>> kids = tree.children();
    std::vector<int> path(1, 0);
    int cur = 0;
    std::vector<float> p, p0;
    for (;;) {
        const float* lg = logits + (size_t)cur * V;
        if (sp.temperature <= 0) {
            int y = argmax(lg, V), next = -1;
            for (int c : kids[cur])
                if (tree.token[c] == y) { next = c; break; }
            if (next < 0) { *bonus = y; return path; }
            path.push_back(next);
            cur = next;
            continue;
        }
        warp_dense(lg, V, sp, &p);
        p0 = p;
        int next = -1;
        for (int c : kids[cur]) {
            int x = tree.token[c];
            const float* q = tree.q[c];
            float prob = q ? (q[x] > 0 ? std::min(1.0f, p[x] / q[x]) : 0.0f) : p[x];
            if (rng.next_f32() < prob) { next = c; break; }
            if (spp.debug_break_residual) continue;  // WRONG on purpose (tests only): keep p
            // residual: p <- norm(max(0, p - q)), q a point mass when the candidate was not sampled
            double sum = 0;
            if (q) {
                for (int i = 0; i < V; i++) { p[i] = std::max(0.0f, p[i] - q[i]); sum += p[i]; }
            } else {
                p[x] = 0;
                for (int i = 0; i < V; i++) sum += p[i];
            }
            if (sum <= 0) { p = p0; continue; }  // p == q exactly: cannot happen after a rejection but be safe
            for (int i = 0; i < V; i++) p[i] = (float)(p[i] / sum);
        }
        if (next < 0) { *bonus = sample_dense(p, rng.next_f32()); return path; }
        path.push_back(next);
        cur = next;
    }
}

SpecDecoder::SpecDecoder(Session& s, Drafter& d, const SamplingParams& sp, const SpecParams& spp, SpecStats* st)
    : s_(s), d_(d), sp_(sp), spp_(spp), st_(st), sampler_(sp, s.llama->config().vocab_size) {}

int SpecDecoder::begin(const std::vector<int>& prompt) {
    Llama& m = *s_.llama;
    const int V = m.config().vocab_size, D = m.config().dim;
    *st_ = SpecStats();
    st_->prompt_tokens = (int)prompt.size();
    m.truncate(0);
    std::vector<float> logits(V), pstates((size_t)prompt.size() * D);
    double t0 = now_seconds();
    m.prefill(prompt.data(), (int)prompt.size(), logits.data(), pstates.data());
    st_->prefill_s = now_seconds() - t0;
    t1_ = now_seconds();
    d_.begin(prompt, pstates.data());
    history_ = prompt;
    root_ = sampler_.sample(logits.data());
    return root_;
}

bool SpecDecoder::step(std::vector<int>* out) {
    if (!draft()) return false;
    Llama& m = *s_.llama;
    const int T = tree_.size();
    vlogits_.resize((size_t)T * m.config().vocab_size);
    vstates_.resize((size_t)T * m.config().dim);
    const double tf = now_seconds();
    m.forward(tree_.token.data(), pos_.data(), T, mask(), tree_.words(), vlogits_.data(), T, vstates_.data(), T);
    commit(vlogits_.data(), vstates_.data(), now_seconds() - tf, out);
    return true;
}

bool SpecDecoder::draft() {
    Llama& m = *s_.llama;
    int room = std::min(spp_.max_tree, m.ctx() - m.n_past());
    if (room < 1) return false;
    double ta = now_seconds();
    DraftTree& tree = tree_;
    tree.reset(root_);
    d_.propose(history_, &tree, room, sp_, sampler_.rng());
    tree.truncate(room);
    tb_ = now_seconds();
    st_->draft_s += tb_ - ta;

    int T = tree.size();
    n0_ = m.n_past();
    if (T > 1) tree.mask(&mask_);  // the root alone: a plain causal step
    pos_.resize(T);
    for (int i = 0; i < T; i++) pos_[i] = n0_ + tree.depth[i];
    return true;
}

void SpecDecoder::commit(const float* vlogits, const float* vstates, double forward_s, std::vector<int>* out) {
    Llama& m = *s_.llama;
    const int V = m.config().vocab_size, D = m.config().dim;
    const DraftTree& tree = tree_;
    const int T = tree.size(), n0 = n0_;
    if (spp_.learn_cost) d_.observe_verify(T, forward_s);
    int bonus = -1;
    std::vector<int> path = accept_path(tree, vlogits, V, sp_, spp_, sampler_.rng(), &bonus);
    std::vector<int> src(path.size());
    for (size_t i = 0; i < path.size(); i++) src[i] = n0 + path[i];
    m.compact(src.data(), (int)path.size(), n0);
    st_->verify_s += now_seconds() - tb_;

    // statistics
    st_->rounds++;
    st_->target_passes++;
    st_->drafted += T - 1;
    st_->gen_tokens_after_root += (int)path.size();
    std::vector<std::vector<int>> kids = tree.children();
    for (size_t k = 0; k < path.size(); k++) {
        if (kids[path[k]].empty()) break;
        if (st_->reached_by_depth.size() <= k) { st_->reached_by_depth.resize(k + 1); st_->accept_by_depth.resize(k + 1); }
        st_->reached_by_depth[k]++;
        if (k + 1 < path.size()) st_->accept_by_depth[k]++;
    }
    // commit: accepted candidates, then the bonus token
    history_.push_back(root_);
    for (size_t k = 1; k < path.size(); k++) {
        history_.push_back(tree.token[path[k]]);
        out->push_back(tree.token[path[k]]);
    }
    path_states_.resize(path.size() * D);
    for (size_t k = 0; k < path.size(); k++)
        memcpy(&path_states_[k * D], &vstates[(size_t)path[k] * D], D * sizeof(float));
    double tc = now_seconds();
    d_.accept(tree, path, path_states_.data());
    st_->draft_s += now_seconds() - tc;
    root_ = bonus;
    out->push_back(bonus);
}

std::string run_commits(Session& s, int prev, int first, int n, const std::function<bool(std::vector<int>*)>& step,
                        FILE* stream, GenStats* st, std::vector<int>* out_ids) {
    std::string text;
    auto emit = [&](int tok) {  // returns false when generation must stop before `tok`
        if (s.is_stop(tok)) { st->stopped_eog = true; return false; }
        std::string piece = s.tok->decode_token(prev, tok);
        text += piece;
        if (stream) { fwrite(piece.data(), 1, piece.size(), stream); fflush(stream); }
        if (out_ids) out_ids->push_back(tok);
        st->gen_tokens++;
        prev = tok;
        return st->gen_tokens < n;
    };
    if (n <= 0) return text;
    bool done = !emit(first);
    std::vector<int> committed;
    while (!done) {
        committed.clear();
        if (!step(&committed)) { st->stopped_ctx = true; break; }
        for (int tok : committed)
            if (!emit(tok)) { done = true; break; }
    }
    return text;
}

std::string generate_speculative(Session& s, Drafter& d, const std::vector<int>& prompt, int n, const SamplingParams& sp,
                                 const SpecParams& spp, FILE* stream, SpecStats* st, std::vector<int>* out_ids) {
    SpecDecoder dec(s, d, sp, spp, st);
    int root = dec.begin(prompt);
    std::string text = run_commits(s, prompt.back(), root, n, [&](std::vector<int>* out) { return dec.step(out); },
                                   stream, st, out_ids);
    if (n > 0) st->decode_s = now_seconds() - dec.decode_start();
    return text;
}

double time_verify(Llama& m, const int* tokens, int T, int reps) {
    const int n0 = m.n_past();
    DraftTree chain;
    chain.reset(tokens[0]);
    for (int i = 1; i < T; i++) chain.add(i - 1, tokens[i], 0.0f);
    std::vector<uint64_t> mask;
    chain.mask(&mask);
    std::vector<int> pos(T);
    for (int i = 0; i < T; i++) pos[i] = n0 + i;
    std::vector<float> logits((size_t)T * m.config().vocab_size);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        m.forward(chain.token.data(), pos.data(), T, mask.data(), chain.words(), logits.data(), T, nullptr, 0);
        best = std::min(best, now_seconds() - t0);
        m.truncate(n0);
    }
    return best;
}

std::vector<double> measure_verify_cost(Session& s, int max_nodes, int max_commit) {
    Llama& m = *s.llama;
    int cap = std::max(2, std::min({max_nodes, m.max_batch(), m.ctx() - 40}));
    // a context of typical length (attention grows with it), as much as fits
    const int n_ctx = std::max(1, std::min(160, m.ctx() - cap - 1));
    m.truncate(0);
    std::vector<int> toks(n_ctx + cap);
    for (size_t i = 0; i < toks.size(); i++) toks[i] = (int)(i * 7919 % m.config().vocab_size);
    m.prefill(toks.data(), n_ctx, nullptr);
    const int* tree_toks = toks.data() + n_ctx;
    std::vector<int> grid;
    for (int T : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128})
        if (T < cap) grid.push_back(T);
    grid.push_back(cap);
    time_verify(m, tree_toks, 1, 2);  // warm-up: caches, the pool's workers
    // sweep 0 finds the useful end of the grid: a round commits at most max_commit tokens, so a verify
    // costing more can never beat plain steps. Then more sweeps over it, interleaved so that every T
    // sees the same machine conditions; per T the median of the sweeps.
    const int sweeps = 5;
    std::vector<std::vector<double>> t;
    for (size_t g = 0; g < grid.size(); g++) {
        t.push_back({time_verify(m, tree_toks, grid[g], 1)});
        if (g > 0 && t[g][0] >= max_commit * t[0][0]) {
            grid.resize(g + 1);
            break;
        }
    }
    for (int r = 1; r < sweeps; r++)
        for (size_t g = 0; g < grid.size(); g++) t[g].push_back(time_verify(m, tree_toks, grid[g], 1));
    std::vector<double> med(grid.size());
    for (size_t g = 0; g < grid.size(); g++) {
        std::sort(t[g].begin(), t[g].end());
        med[g] = t[g][t[g].size() / 2];
    }
    cap = grid.back();
    m.truncate(0);
    std::vector<double> cost(cap + 1, 1.0);
    for (size_t g = 0; g + 1 < grid.size(); g++)
        for (int T = grid[g]; T <= grid[g + 1]; T++) {
            double f = (double)(T - grid[g]) / (grid[g + 1] - grid[g]);
            cost[T] = ((1 - f) * med[g] + f * med[g + 1]) / med[0];
        }
    for (int T = 2; T <= cap; T++) cost[T] = std::max(cost[T], cost[T - 1]);  // timing noise
    return cost;
}

std::string spec_stats_json(const char* mode, const SpecStats& st, int threads) {
    std::string acc = "[", reach = "[";
    for (size_t k = 0; k < st.accept_by_depth.size(); k++) {
        acc += strfmt("%s%.4f", k ? ", " : "", st.reached_by_depth[k] ? (double)st.accept_by_depth[k] / st.reached_by_depth[k] : 0.0);
        reach += strfmt("%s%d", k ? ", " : "", st.reached_by_depth[k]);
    }
    acc += "]";
    reach += "]";
    double tok_s = st.decode_s > 0 ? st.gen_tokens / st.decode_s : 0;
    return strfmt(
        "{\"mode\": \"%s\", \"prompt_tokens\": %d, \"tokens\": %d, \"target_passes\": %d, \"tau\": %.4f, "
        "\"drafted\": %d, \"accept_by_depth\": %s, \"reached_by_depth\": %s, \"prefill_ms\": %.3f, \"draft_ms\": %.3f, "
        "\"verify_ms\": %.3f, \"decode_ms\": %.3f, \"tok_s\": %.3f, \"threads\": %d, \"peak_rss_bytes\": %zu}",
        mode, st.prompt_tokens, st.gen_tokens, st.target_passes, st.tau(), st.drafted, acc.c_str(), reach.c_str(),
        st.prefill_s * 1e3, st.draft_s * 1e3, st.verify_s * 1e3, st.decode_s * 1e3, tok_s, threads, peak_rss_bytes());
}

}  // namespace beagle
