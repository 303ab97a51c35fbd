// beagle_drafter.cpp: drafting with the Beagle cross-attention draft (SPEC section 3, inference):
// chain (gamma steps, each query sees the true states plus, in concat mode, its own earlier
// predictions) and the EAGLE-2 dynamic tree (expand the top-k nodes of each depth by cumulative
// draft log-probability, then keep the best total_tokens nodes of the whole tree).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "../core/common.h"
#include "../model/draft.h"
#include "speculative.h"

namespace beagle {

class BeagleDrafter : public Drafter {
public:
    BeagleDrafter(const DraftWeights& w, const DraftFrozen& fz, Session& s, const BeagleDraftParams& p)
        : p_(p), V_(w.cfg.head_rows()), Vt_(w.cfg.vocab_size), d2t_(w.d2t), cost_(p.verify_cost) {
        int max_pred = p.tree ? 1 + p.topk * std::max(0, p.depth - 1) : p.gamma;
        max_pred = std::max(max_pred, 1);
        draft_.reset(new Draft(w, fz, *s.ops, s.llama->ctx(), max_pred + 1, std::max(p.topk, 1)));
        draft_->use_target_weights(s.llama->tok_embd_weight(), s.llama->lm_head_weight());
        if (p.q8) draft_->use_q8_weights(w);
        draft_->set_concat(p.concat);
        words_ = (max_pred + 1 + 63) / 64;
    }
    const char* name() const override { return p_.tree ? "tree" : "chain"; }

    void begin(const std::vector<int>& prompt, const float* states) override {
        draft_->reset();
        draft_->add_true_states(states, (int)prompt.size());
        shadow_tok_ = -1;
    }

    void accept(const DraftTree& tree, const std::vector<int>& path, const float* path_states) override {
        if (!cost_.empty() && tree.size() > 1) {  // calibration: accepted vs predicted
            for (int i = 1; i < tree.size(); i++) predicted_ += std::exp((double)tree.score[i]);
            accepted_ += (double)path.size() - 1;
        }
        draft_->clear_pred();
        draft_->add_true_states(path_states, (int)path.size());
    }

    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) override {
        BEAGLE_CHECK((int)history.size() == draft_->n_true(), "draft out of step: %zu committed tokens, %d true states",
                     history.size(), draft_->n_true());
        draft_->clear_pred();
        if (p_.tree) propose_tree(tree, room);
        else propose_chain(tree, room, sp, rng);
    }

    void observe_verify(int T, double seconds) override { cost_.observe(T, seconds); }

private:
    BeagleDraftParams p_;
    int V_, Vt_, words_;          // draft logits per row; the target's vocabulary
    std::vector<int32_t> d2t_;    // reduced vocabulary: draft logit i is target token d2t_[i] (empty: identity)
    VerifyCost cost_;             // p_.verify_cost, corrected online (empty: fixed tree size)
    std::vector<float> qsub_;
    int tok_of(int i) const { return d2t_.empty() ? i : d2t_[i]; }
    std::unique_ptr<Draft> draft_;
    double predicted_ = 4, accepted_ = 4;  // cost-aware trees: sum of exp(score) sent, accepted (prior 4/4)
    int shadow_tok_ = -1;                  // cost-aware trees: best candidate of a round that sent none
    double shadow_p_ = 0;
    std::vector<float> logits_;
    std::vector<std::vector<float>> q_;  // chain sampling: the distribution each token was drawn from

    // log-softmax of one row
    void log_softmax(const float* lg, std::vector<float>* out) {
        float mx = *std::max_element(lg, lg + V_);
        float sum = 0;
        for (int i = 0; i < V_; i++) sum += expf(lg[i] - mx);
        float lse = mx + logf(sum);
        out->resize(V_);
        for (int i = 0; i < V_; i++) (*out)[i] = lg[i] - lse;
    }

    void propose_chain(DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) {
        int P = draft_->n_true();
        std::vector<uint64_t> mask(words_, 0);
        int node = 0;
        if (q_.size() < (size_t)p_.gamma) q_.resize(p_.gamma);
        logits_.resize(V_);
        for (int k = 0; k < p_.gamma && tree->size() < room; k++) {
            int tok = tree->token[node], pos = P + k, row = 0;
            draft_->forward(&tok, &pos, 1, k ? mask.data() : nullptr, words_, nullptr, logits_.data());
            int pr = draft_->keep_pred(&row, 1);
            mask[pr / 64] |= 1ULL << (pr % 64);
            int next;
            const float* q = nullptr;
            if (sp.temperature <= 0) {
                next = tok_of(argmax(logits_.data(), V_));
            } else {  // speculative sampling: draw from the draft's own (warped) distribution q
                warp_dense(logits_.data(), V_, sp, &qsub_);
                float coin = rng.next_f32(), cdf = 0;
                next = V_ - 1;
                for (int i = 0; i < V_; i++) {
                    cdf += qsub_[i];
                    if (coin < cdf) { next = i; break; }
                }
                next = tok_of(next);
                // q over the target's vocabulary (zero outside a reduced vocabulary)
                q_[k].assign(Vt_, 0.0f);
                for (int i = 0; i < V_; i++) q_[k][tok_of(i)] = qsub_[i];
                q = q_[k].data();
            }
            node = tree->add(node, next, 0.0f, q);
        }
    }

    // Cost-aware trees (verify_cost non-empty): a = calibration. A tree of T tokens beats a plain step
    // only if its candidates' expected acceptances sum to more than cost[T] - 1, so candidates whose
    // a exp(score) is below the cheapest average cost of an extra token, min_T (cost[T] - 1) / (T - 1),
    // are not expanded (their children score lower still).
    double calib() const { return std::min(1.5, std::max(0.1, accepted_ / predicted_)); }
    double min_token_cost() const {
        double m = 1e30;
        for (int T = 2; T <= cost_.max_tokens(); T++) m = std::min(m, (cost_[T] - cost_[1]) / (double)(T - 1));
        return std::max(m, 1e-3);
    }

    void propose_tree(DraftTree* tree, int room) {
        int P = draft_->n_true();
        const bool aware = !cost_.empty();
        int total = std::min(room, aware ? cost_.max_tokens() : p_.total_tokens);
        if (total <= 1) return;
        if (shadow_tok_ >= 0) {  // last round sent nothing: was its best depth-1 candidate the target's token?
            predicted_ += shadow_p_;
            accepted_ += tree->token[0] == shadow_tok_ ? 1 : 0;
            shadow_tok_ = -1;
        }
        const double a = aware ? calib() : 1.0;
        const float min_score = aware ? (float)std::log(min_token_cost() / a) : -INFINITY;
        // working tree (before the final rerank): token, parent, depth, score, pred row
        struct Node { int tok, parent, depth; float score; int pred; };
        std::vector<Node> nodes;
        nodes.push_back({tree->token[0], -1, 0, 0.0f, -1});
        std::vector<int> frontier(1, 0);
        std::vector<float> lp;
        // a tree of `total` nodes needs no more than total - 1 levels or children per node
        const int depth = std::min(p_.depth, total - 1), topk = std::min(p_.topk, total - 1);
        for (int d = 0; d < depth; d++) {
            // expand the best `topk` frontier nodes (the root alone at depth 0)
            std::vector<int> ex(frontier);
            std::stable_sort(ex.begin(), ex.end(), [&](int a, int b) { return nodes[a].score > nodes[b].score; });
            if ((int)ex.size() > topk) ex.resize(topk);
            if (d > 0)  // nodes that cannot pay for themselves get no children (the root is always expanded)
                while (!ex.empty() && nodes[ex.back()].score < min_score) ex.pop_back();
            int n = (int)ex.size();
            if (n == 0) break;
            std::vector<int> toks(n), pos(n), rows(n);
            std::vector<uint64_t> mask((size_t)n * words_, 0);
            for (int i = 0; i < n; i++) {
                toks[i] = nodes[ex[i]].tok;
                pos[i] = P + nodes[ex[i]].depth;
                rows[i] = i;
                for (int a = nodes[ex[i]].parent; a >= 0; a = nodes[a].parent)
                    mask[(size_t)i * words_ + nodes[a].pred / 64] |= 1ULL << (nodes[a].pred % 64);
            }
            logits_.resize((size_t)n * V_);
            draft_->forward(toks.data(), pos.data(), n, d ? mask.data() : nullptr, words_, nullptr, logits_.data());
            if (d + 1 < depth) {  // their predicted states become keys for their children
                int base = draft_->keep_pred(rows.data(), n);
                for (int i = 0; i < n; i++) nodes[ex[i]].pred = base + i;
            }
            frontier.clear();
            for (int i = 0; i < n; i++) {
                log_softmax(&logits_[(size_t)i * V_], &lp);
                std::vector<int> idx(V_);
                std::iota(idx.begin(), idx.end(), 0);
                int k = std::min(topk, V_);
                std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
                    return lp[a] > lp[b] || (lp[a] == lp[b] && a < b);
                });
                for (int j = 0; j < k; j++) {
                    nodes.push_back({tok_of(idx[j]), ex[i], nodes[ex[i]].depth + 1, nodes[ex[i]].score + lp[idx[j]], -1});
                    frontier.push_back((int)nodes.size() - 1);
                }
            }
        }
        // rerank: the best total - 1 candidates by cumulative log-probability. A child never scores
        // above its parent (log q <= 0) and ties go to the lower index (parents come first), so
        // the kept set contains every kept node's ancestors.
        std::vector<int> order(nodes.size() - 1);
        std::iota(order.begin(), order.end(), 1);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return nodes[a].score > nodes[b].score; });
        if ((int)order.size() > total - 1) order.resize(total - 1);
        if (aware) {  // the prefix of the ranking with the most expected tokens per unit of verify cost
            double expect = 1, best = 1.0 / cost_[1];
            size_t keep = 0;
            if (!order.empty()) {  // kept only if nothing is sent: calibrates against the next root
                shadow_tok_ = nodes[order[0]].tok;
                shadow_p_ = std::exp((double)nodes[order[0]].score);
            }
            for (size_t i = 0; i < order.size(); i++) {
                expect += a * std::exp((double)nodes[order[i]].score);
                double gain = expect / cost_[(int)i + 2];
                if (gain > best) { best = gain; keep = i + 1; }
            }
            order.resize(keep);
            if (keep) shadow_tok_ = -1;
        }
        std::sort(order.begin(), order.end());  // creation order is topological, siblings by score
        std::vector<int> newidx(nodes.size(), -1);
        newidx[0] = 0;
        for (int o : order) {
            int par = newidx[nodes[o].parent];
            if (par < 0) continue;  // cannot happen (see above); keep the tree valid regardless
            newidx[o] = tree->add(par, nodes[o].tok, nodes[o].score);
        }
    }
};

std::unique_ptr<Drafter> make_beagle_drafter(const DraftWeights& w, const DraftFrozen& fz, Session& s,
                                             const BeagleDraftParams& p) {
    BEAGLE_CHECK(p.depth >= 1, "--depth must be >= 1, got %d", p.depth);
    BEAGLE_CHECK(p.topk >= 1, "--topk must be >= 1, got %d", p.topk);
    BEAGLE_CHECK(p.gamma >= 1, "--gamma must be >= 1, got %d", p.gamma);
    BEAGLE_CHECK(p.total_tokens >= 2, "--total-tokens must be >= 2, got %d", p.total_tokens);
    BEAGLE_CHECK(p.verify_cost.empty() || p.verify_cost.size() >= 3, "verify cost table needs T = 1..2 at least");
    return std::unique_ptr<Drafter>(new BeagleDrafter(w, fz, s, p));
}

}  // namespace beagle
