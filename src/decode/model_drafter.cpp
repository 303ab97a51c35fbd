// model_drafter.cpp: the independent draft model (model_drafter.h). The draft is a Llama of its own on the
// target's backend whose cache holds a prefix of the committed tokens; each round it catches up with what
// was committed since (one causal forward), then drafts a chain (one forward a token) or a tree (one forward
// a depth), and after verification keeps only the accepted path's rows (Llama::compact).
#include "model_drafter.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "../core/common.h"
#include "verify_cost.h"

namespace beagle {

void check_draft_vocab(const ModelFile& draft, const Tokenizer& target, const std::string& target_path) {
    const int nd = draft.config.vocab_size, nt = target.vocab_size();
    if (nd != nt)
        fail("draft model '%s' does not share the target's vocabulary: it has %d tokens, the target '%s' has %d "
             "(a draft model must use the target's tokenizer)", draft.path.c_str(), nd, target_path.c_str(), nt);
    const std::vector<std::string>& dt = draft.tokenizer.tokens;
    if (draft.tokenizer.kind == TokenizerSpec::NONE || dt.empty()) return;  // ids alone: the sizes agree
    const std::vector<std::string>& tt = target.spec().tokens;
    for (int i = 0; i < nt && i < (int)dt.size(); i++)
        if (dt[i] != tt[i])
            fail("draft model '%s' does not share the target's vocabulary: token %d is \"%s\" there and \"%s\" in the "
                 "target '%s'", draft.path.c_str(), i, dt[i].c_str(), tt[i].c_str(), target_path.c_str());
}

class ModelDrafter : public Drafter {
public:
    ModelDrafter(std::shared_ptr<const ModelFile> mf, Session& s, const BeagleDraftParams& p,
                 std::shared_ptr<RoundPolicy> policy, bool owner)
        : mf_(std::move(mf)), ops_(*s.ops), p_(p), policy_(std::move(policy)), owner_(owner),
          V_(mf_->config.vocab_size) {
        // one forward holds a catch-up chunk, a chain step, or a tree depth's queries with their ancestors
        const int rows = std::max({s.llama->max_batch(), p.gamma + 1, 1 + p.topk * std::max(p.depth - 1, 1)});
        llm_.reset(new Llama(*mf_, ops_, s.llama->ctx(), rows));
        ScratchSizes sz;  // the tree's top-k on a device backend
        sz.rows = rows;
        sz.topk = p.topk;
        ops_.reserve(sz);
        words_ = (rows + 63) / 64;
        std::vector<int> depths;  // cost-aware trees: the depth among 1, 2 and p.depth, as the Beagle drafter's
        if (p.tree && !policy_->cost().empty()) {
            for (int d : {1, 2})
                if (d < p.depth) depths.push_back(d);
            depths.push_back(p.depth);
        }
        policy_->set_draft(name(), depths, false);
    }
    const char* name() const override { return p_.tree ? "tree" : "chain"; }
    RoundPolicy* policy() const override { return policy_.get(); }

    // The draft prefills the prompt on its own cache (its cost counts as drafting: the engine's clock runs).
    void begin(const std::vector<int>& prompt, const float* states) override { begin_cached(prompt, 0, states); }
    // The draft's cache keeps the longest prefix (of at most `keep` tokens) that it shares with the prompt.
    void begin_cached(const std::vector<int>& prompt, int keep, const float*) override {
        BEAGLE_CHECK(keep >= 0 && keep < (int)prompt.size(), "drafter %s: keep %d cached positions for a prompt of %zu tokens",
                     name(), keep, prompt.size());
        if (owner_) policy_->begin((int)prompt.size());
        shadow_.clear();
        sent_score_.clear();
        row_.clear();
        catch_up(prompt, keep);
    }

    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) override {
        const RoundChoice& c = owner_ ? policy_->choose() : policy_->choice();
        depth_ = c.depth > 0 ? c.depth : p_.depth;
        const int64_t f0 = forwards_;
        const double t0 = now_seconds();
        ctx_ = history;
        ctx_.push_back(tree->token[0]);
        catch_up(ctx_, (int)ctx_.size());  // the last forward's last row is the root's: the distribution of depth 1
        row_.assign(1, (int)ctx_.size() - 1);
        sent_score_.assign(1, 0.0f);
        if (p_.tree) propose_tree(tree, room);
        else propose_chain(tree, room, sp, rng);
        policy_->observe_draft(now_seconds() - t0, (int)(forwards_ - f0));
    }

    // The accepted path's rows stay in the draft's cache, moved to follow the root; the rest are dropped.
    void accept(const DraftTree& tree, const std::vector<int>& path, const float*) override {
        if (p_.tree && !policy_->cost().empty() && tree.size() > 1) {  // calibration of the sent candidates
            double predicted = 0;
            for (int i = 1; i < tree.size() && i < (int)sent_score_.size(); i++) predicted += std::exp((double)sent_score_[i]);
            if (predicted > 0) policy_->observe_calibration(predicted, (double)path.size() - 1);
        }
        std::vector<int> src;
        for (size_t k = 1; k < path.size() && path[k] < (int)row_.size() && row_[path[k]] >= 0; k++)
            src.push_back(row_[path[k]]);
        llm_->compact(src.data(), (int)src.size(), (int)ctx_.size());
        cached_ = ctx_;
        for (size_t k = 1; k <= src.size(); k++) cached_.push_back(tree.token[path[k]]);
        row_.clear();
        if (owner_) policy_->observe_round(tree.size(), (int)path.size());
    }
    // A round the draft sat out (mode auto ran lookup): its cache is still a prefix of what was committed;
    // the next round's catch-up feeds the rest.
    void accept_skipped(const DraftTree&, const std::vector<int>&, const float*) override {
        shadow_.clear();
        sent_score_.clear();
        row_.clear();
    }
    void observe_verify(int T, double seconds, int context) override {
        if (owner_) policy_->observe_verify(T, seconds, context);
    }

private:
    // Run tokens at positions from..from + n - 1 (the cache holds exactly `from` rows), causal, in chunks of
    // the draft's batch; they join cached_.
    void feed(const std::vector<int>& toks, int from) {
        const int n = (int)toks.size() - from;
        const double t0 = now_seconds();
        fed_last_ = n;
        for (int done = 0; done < n;) {
            const int T = std::min(llm_->max_batch(), n - done);
            pos_.resize(T);
            std::iota(pos_.begin(), pos_.end(), from + done);
            llm_->forward(toks.data() + from + done, pos_.data(), T, nullptr, 0, nullptr, 0, nullptr, 0);
            forwards_++;
            done += T;
        }
        cached_.insert(cached_.end(), toks.begin() + from, toks.end());
        feed_s_ = now_seconds() - t0;
    }
    // The cache to `ids`: keep its longest prefix that ids share (at most `limit` tokens), feed the rest (at
    // least the last token, so that the last forward ends on it: a round's root).
    void catch_up(const std::vector<int>& ids, int limit) {
        const int L = std::min(common_prefix(cached_, ids), std::min(limit, (int)ids.size() - 1));
        llm_->truncate(L);
        cached_.resize(L);
        feed(ids, L);
    }

    // One token from the last forward's last row: its argmax (greedy, chosen on the backend) or a draw from
    // its warped distribution q, kept in *q for the acceptance (speculative sampling needs q(x)).
    int next_token(const SamplingParams& sp, Rng& rng, std::vector<float>* q) {
        if (sp.temperature <= 0) {
            int id = 0;
            llm_->argmax_last(&id, 1);
            return id;
        }
        logits_.resize(V_);
        ops_.download(logits_.data(), llm_->logits_last(1), V_);
        warp_dense(logits_.data(), V_, sp, q);
        return draw_dense(q->data(), V_, rng.next_f32());
    }

    // gamma tokens, each from the forward of the one before (the root's from the catch-up).
    void propose_chain(DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) {
        const int steps = std::min(p_.gamma, room - tree->size());
        if ((int)q_.size() < steps) q_.resize(steps);
        const int R = (int)ctx_.size() - 1;
        for (int k = 0, node = 0; k < steps; k++) {
            if (k > 0) {  // node k joins the cache at its position, row R + k
                int tok = tree->token[node], pos = R + k;
                llm_->forward(&tok, &pos, 1, nullptr, 0, nullptr, 0, nullptr, 0);
                forwards_++;
                row_.push_back(pos);
            }
            const int next = next_token(sp, rng, &q_[k]);
            node = tree->add(node, next, 0.0f, sp.temperature > 0 ? q_[k].data() : nullptr);
        }
    }

    // working tree: token, parent, depth, cumulative log-probability, cache row of the last forward (-1 none)
    struct Node { int tok, parent, depth; float score; int row; };

    // Children of the last forward's last n rows (nodes at[0..n)): the top-k of each row scored by log-softmax.
    void add_children(const std::vector<int>& at, int k) {
        const int n = (int)at.size();
        idx_.resize((size_t)n * k);
        val_.resize((size_t)n * k);
        lse_.resize(n);
        ops_.topk_rows(idx_.data(), val_.data(), lse_.data(), llm_->logits_last(n), n, V_, k);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < k; j++) {
                const size_t e = (size_t)i * k + j;
                if (idx_[e] < 0) continue;
                const Node& par = nodes_[at[i]];
                nodes_.push_back({idx_[e], at[i], par.depth + 1, par.score + (val_[e] - lse_[i]), -1});
            }
    }

    // The EAGLE-2 dynamic tree over the draft's log-probabilities: per depth the top-k nodes are expanded, then
    // the best candidates of the whole tree are kept. The draft's attention takes the cache's rows before a
    // forward as a causal prefix that every query sees, so depth d's forward keeps in the cache only the leading
    // rows that are ancestors of all its queries (a trunk the expanded nodes share: the whole path of a chain-
    // like tree) and runs the other ancestors again with the expanded nodes under the tree mask.
    void propose_tree(DraftTree* tree, int room) {
        const bool aware = !policy_->cost().empty();
        const int total = std::min(room, aware ? policy_->cost().max_tokens() : p_.total_tokens);
        if (total <= 1) return;
        shadow_.settle(*policy_, tree->token[0]);  // last round sent nothing: was its best candidate the target's?
        const double a = aware ? policy_->calibration() : 1.0;
        // cost-aware: a node is expanded only if its chance a q(path) can pay for a child's verify slot and for
        // the draft row that computes its children (the draft's measured seconds per extra row, in decode steps;
        // none where p.auto_draft_cost fixes the round's drafting cost, so that the tree does not follow the clock)
        const double step_s = policy_->cost().step_seconds();
        const double row_steps = p_.auto_draft_cost < 0 && step_s > 0 ? row_s_.v / step_s : 0.0;
        const float min_score = aware ? (float)std::log((policy_->cost().min_token_cost() + row_steps) / a) : -INFINITY;
        const int depth = std::min(depth_, total - 1), k = std::min({p_.topk, total - 1, V_});
        const int R = (int)ctx_.size() - 1;
        nodes_.assign(1, Node{tree->token[0], -1, 0, 0.0f, R});
        cached_nodes_.clear();
        double t0 = now_seconds();
        add_children({0}, k);
        if (fed_last_ == 1) one_row_s_.add(now_seconds() - t0 + feed_s_);
        std::vector<int> frontier, run, under;
        for (int d = 1; d < depth; d++) {
            frontier.clear();
            for (int i = 1; i < (int)nodes_.size(); i++)
                if (nodes_[i].depth == d) frontier.push_back(i);
            std::stable_sort(frontier.begin(), frontier.end(),
                             [&](int x, int y) { return nodes_[x].score > nodes_[y].score; });
            if ((int)frontier.size() > p_.topk) frontier.resize(p_.topk);
            while (!frontier.empty() && nodes_[frontier.back()].score < min_score) frontier.pop_back();
            if (frontier.empty()) break;
            // the frontier and its ancestors below the root; those that are ancestors of every frontier node and
            // lead the cache's rows (a common trunk) stay in the cache as causal prefix, the rest run again
            under.assign(nodes_.size(), 0);
            for (int f : frontier)
                for (int x = f; x > 0; x = nodes_[x].parent) under[x]++;
            size_t keep = 0;
            while (keep < cached_nodes_.size() && under[cached_nodes_[keep]] == (int)frontier.size()) keep++;
            const int base = R + 1 + (int)keep;  // the first row of this forward
            run.clear();  // the kept trunk is the nodes on rows R + 1 .. base - 1
            for (int i = 1; i < (int)nodes_.size(); i++)
                if (under[i] && !(nodes_[i].row > R && nodes_[i].row < base)) run.push_back(i);
            const int n = (int)run.size();
            if (base + n > llm_->ctx() || n > llm_->max_batch()) break;
            for (size_t i = keep; i < cached_nodes_.size(); i++) nodes_[cached_nodes_[i]].row = -1;
            cached_nodes_.resize(keep);
            toks_.resize(n), pos_.resize(n);
            mask_.assign((size_t)n * words_, 0);
            for (int t = 0; t < n; t++) {
                Node& x = nodes_[run[t]];
                x.row = base + t;
                toks_[t] = x.tok;
                pos_[t] = R + x.depth;
                for (int y = run[t]; y > 0 && nodes_[y].row >= base; y = nodes_[y].parent) {
                    const int j = nodes_[y].row - base;
                    mask_[(size_t)t * words_ + j / 64] |= 1ULL << (j % 64);
                }
                cached_nodes_.push_back(run[t]);
            }
            llm_->truncate(base);
            t0 = now_seconds();
            llm_->forward(toks_.data(), pos_.data(), n, mask_.data(), words_, nullptr, 0, nullptr, 0);
            forwards_++;
            // the frontier is the deepest part of `run`: its last rows, in creation order
            const std::vector<int> last(run.end() - (int)frontier.size(), run.end());
            add_children(last, k);
            if (n >= 2 && one_row_s_.n > 0) row_s_.add(std::max(0.0, now_seconds() - t0 - one_row_s_.v) / (n - 1));
        }
        rerank(tree, total, aware, a);
    }

    // The best total - 1 candidates by a q(path) (a child never scores above its parent and ties go to the lower
    // index, so every kept node's ancestors are kept); cost-aware: the prefix worth its verify cost (best_prefix).
    void rerank(DraftTree* tree, int total, bool aware, double a) {
        const float la = (float)std::log(a);
        std::vector<int> order(nodes_.size() - 1);
        std::iota(order.begin(), order.end(), 1);
        std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return nodes_[x].score > nodes_[y].score; });
        if ((int)order.size() > total - 1) order.resize(total - 1);
        if (aware) {
            accept_p_.resize(order.size());
            for (size_t i = 0; i < order.size(); i++) accept_p_[i] = std::exp((double)(nodes_[order[i]].score + la));
            const int keep = best_prefix(accept_p_.data(), (int)order.size(), policy_->cost());
            if (keep == 0 && !order.empty()) {
                shadow_.set(nodes_[order[0]].tok, std::exp((double)nodes_[order[0]].score));
            }
            order.resize(keep);
        }
        std::sort(order.begin(), order.end());  // creation order is topological
        std::vector<int> newidx(nodes_.size(), -1);
        newidx[0] = 0;
        for (int o : order) {
            const int par = newidx[nodes_[o].parent];
            if (par < 0) continue;
            newidx[o] = tree->add(par, nodes_[o].tok, nodes_[o].score + la);
            row_.push_back(nodes_[o].row);
            sent_score_.push_back(nodes_[o].score);
        }
    }

    std::shared_ptr<const ModelFile> mf_;  // the draft's weights, shared by every drafter made from them
    Ops& ops_;
    BeagleDraftParams p_;
    std::shared_ptr<RoundPolicy> policy_;
    bool owner_;
    int V_, words_ = 1, depth_ = 0;
    std::unique_ptr<Llama> llm_;
    std::vector<int> cached_;  // the tokens of the draft's cache rows
    std::vector<int> ctx_;     // this round: the committed tokens and the root
    std::vector<int> row_;     // per node of the proposed tree: its row in the draft's cache (-1: not run)
    std::vector<float> sent_score_;  // per node of the proposed tree: its draft log-probability
    ShadowCandidate shadow_;         // cost-aware: the best candidate of a round that sent none
    int64_t forwards_ = 0;
    // the draft's forward time (a row's children included): of one row, and of each further row; the last
    // feed's rows and seconds
    RunningMean32 one_row_s_, row_s_;
    int fed_last_ = 0;
    double feed_s_ = 0;
    std::vector<Node> nodes_;
    std::vector<int> cached_nodes_;  // tree: the nodes of the draft's cache rows after the root, in row order
    std::vector<int> idx_, toks_, pos_;
    std::vector<float> val_, lse_, logits_;
    std::vector<double> accept_p_;
    std::vector<uint64_t> mask_;
    std::vector<std::vector<float>> q_;  // sampled chain: the distribution each token was drawn from
};

std::unique_ptr<Drafter> make_model_drafter(std::shared_ptr<const ModelFile> draft, Session& s,
                                            const BeagleDraftParams& p, std::shared_ptr<RoundPolicy> policy, bool owner) {
    BEAGLE_CHECK(draft, "make_model_drafter: no draft model");
    check_draft_vocab(*draft, *s.tok, s.mf->path);
    check_draft_params(p);
    policy = policy_or_own(p, std::move(policy), &owner);
    return std::unique_ptr<Drafter>(new ModelDrafter(std::move(draft), s, p, std::move(policy), owner));
}

}  // namespace beagle
