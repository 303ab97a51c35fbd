// beagle_drafter.cpp: drafting with a draft model, the Beagle cross-attention draft (docs/method.md section 3,
// inference), the EAGLE-style draft or the Mixture of Attentions draft (section 4; the same Draft interface,
// see draft.h):
// chain (gamma steps, each query sees the true states plus, in concat mode, its own earlier
// predictions) and the EAGLE-2 dynamic tree (expand the top-k nodes of each depth by cumulative
// draft log-probability, then keep the best total_tokens nodes of the whole tree); optionally with the
// prompt-lookup continuation merged into the tree (hybrid).
#include "beagle_drafter.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../model/draft.h"
#include "lookup_drafter.h"
#include "round_policy.h"
#include "verify_cost.h"

namespace beagle {

class BeagleDrafter : public Drafter {
public:
    BeagleDrafter(const DraftWeights& w, const DraftFrozen& fz, Session& s, const BeagleDraftParams& p,
                  std::shared_ptr<RoundPolicy> policy, bool owner)
        : policy_(std::move(policy)), owner_(owner), p_(p), V_(w.cfg.head_rows()), Vt_(w.cfg.vocab_size), d2t_(w.d2t),
          rates_(std::max(p.lookup_ngram, 1), std::max(p.depth, 1)) {
        const int max_pred = beagle_max_pred(p.tree, p.gamma, p.depth, p.topk);
        Ops* ops = s.ops.get();
        const bool cpu = std::string(ops->name()) == "cpu";
        if (p.threads > 0 && p.threads != s.threads && cpu) {
            own_ops_ = make_ops("cpu", p.threads);  // host buffers: the target's states and weights are shared as is
            ops = own_ops_.get();
        }
        if (p.threads < 0 && cpu && s.threads > 1) pool_ops_ = ops;  // chosen by the policy: one thread or all
        std::vector<int> depths;  // cost-aware trees: the policy chooses the depth too, among 1, 2 and p.depth
        if (p.tree && !policy_->cost().empty()) {
            for (int d : {1, 2})
                if (d < p.depth) depths.push_back(d);
            depths.push_back(p.depth);
        }
        policy_->set_draft(name(), depths, pool_ops_ != nullptr);
        // a draft with state layers fuses these layers of the target's residual stream: from now on the
        // target's state rows carry them (Llama::set_state_layers)
        if (!w.cfg.state_layers.empty()) s.llama->set_state_layers(w.cfg.state_layers);
        draft_.reset(new Draft(w, fz, *ops, s.llama->ctx(), max_pred + 1, std::max(p.topk, 1)));
        draft_->use_target_weights(s.llama->tok_embd_weight(), s.llama->lm_head_weight());
        if (p.q8) draft_->use_q8_weights(w);
        draft_->set_concat(p.concat);
        draft_->set_true_window(p.true_window >= 0 ? p.true_window : draft_trained_seq_len(w));
        words_ = (max_pred + 1 + 63) / 64;
    }
    const char* name() const override { return !p_.tree ? "chain" : p_.lookup_ngram ? "hybrid" : "tree"; }

    RoundPolicy* policy() const override { return policy_.get(); }

    void begin(const std::vector<int>& prompt, const float* states) override { begin_cached(prompt, 0, states); }
    // The draft's true states past `keep` go (Draft::truncate_true; 0: all of them), the new ones join.
    void begin_cached(const std::vector<int>& prompt, int keep, const float* states) override {
        BEAGLE_CHECK(keep >= 0 && keep <= draft_->n_true() && keep < (int)prompt.size(),
                     "drafter %s: keep %d cached positions of %d for a prompt of %zu tokens", name(), keep,
                     draft_->n_true(), prompt.size());
        if (owner_) policy_->begin((int)prompt.size());
        draft_->truncate_true(keep);
        draft_->add_true_states(states, (int)prompt.size() - keep, prompt.data() + keep);
        shadow_.clear();
        shadow_lk_tok_ = -1;
        sent_score_.clear();
        lk_sent_.clear();
    }

    void accept(const DraftTree& tree, const std::vector<int>& path, const float* path_states) override {
        accepted(tree, path);
        draft_->add_true_states(path_states, (int)path.size(), path_tokens(tree, path));
        if (owner_) policy_->observe_round(tree.size(), (int)path.size());
    }
    void accept_rows(const DraftTree& tree, const std::vector<int>& path, Ops&, const float* states, int) override {
        accepted(tree, path);
        draft_->add_true_state_rows(states, path.data(), (int)path.size(), path_tokens(tree, path));  // never leaves the backend
        if (owner_) policy_->observe_round(tree.size(), (int)path.size());
    }

    // Another drafter's round (mode auto): the new true states join the draft's keys (their K/V are
    // computed with the next draft forward); this round's tree was not ours, so nothing is learnt from it.
    void accept_skipped(const DraftTree& tree, const std::vector<int>& path, const float* path_states) override {
        shadow_.clear();
        shadow_lk_tok_ = -1;
        sent_score_.clear();
        lk_sent_.clear();
        draft_->clear_pred();
        draft_->add_true_states(path_states, (int)path.size(), path_tokens(tree, path));
    }

    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) override {
        BEAGLE_CHECK((int)history.size() == draft_->n_true(), "draft out of step: %zu committed tokens, %d true states",
                     history.size(), draft_->n_true());
        draft_->clear_pred();
        // the round's choice (the policy's: depth, threads), then its drafting timed for the policy
        const RoundChoice& c = owner_ ? policy_->choose() : policy_->choice();
        depth_ = c.depth > 0 ? c.depth : p_.depth;
        struct Limit {  // the target's pool back to all its threads, whatever happens
            Ops* ops;
            ~Limit() {
                if (ops) ops->set_threads(0);
            }
        } limit{pool_ops_};
        if (pool_ops_) pool_ops_->set_threads(c.threads > 0 ? 0 : 1);
        const int64_t f0 = draft_->forwards();
        const double t0 = now_seconds();
        if (p_.tree) propose_tree(history, tree, room);
        else propose_chain(tree, room, sp, rng);
        policy_->observe_draft(now_seconds() - t0, (int)(draft_->forwards() - f0));
    }

    void observe_verify(int T, double seconds, int context) override {
        if (owner_) policy_->observe_verify(T, seconds, context);
    }

    int draft_alone(int root) override {
        draft_->clear_pred();
        const int pos = draft_->n_true();
        // the predicted state stands in for the true one; its state-layer rows (if any) are unknown: zero,
        // so its key is made of f^ alone
        alone_state_.assign(draft_->state_width(), 0.0f);
        logits_.resize(V_);
        draft_->forward(&root, &pos, 1, nullptr, words_, alone_state_.data(), logits_.data());
        draft_->add_true_states(alone_state_.data(), 1, &root);
        return tok_of(argmax(logits_.data(), V_));
    }

private:
    // The round's bookkeeping before the path's states are appended (calibration, lookup rates).
    const int* path_tokens(const DraftTree& tree, const std::vector<int>& path) {
        path_tok_.resize(path.size());
        for (size_t k = 0; k < path.size(); k++) path_tok_[k] = tree.token[path[k]];
        return path_tok_.data();
    }
    void accepted(const DraftTree& tree, const std::vector<int>& path) {
        if (p_.tree && !policy_->cost().empty() && tree.size() > 1) {  // calibration of drafted nodes, for the policy
            double predicted = 0, accepted = 0;
            for (int i = 1; i < tree.size() && i < (int)sent_score_.size(); i++)
                if (std::isfinite(sent_score_[i])) predicted += std::exp((double)sent_score_[i]);
            for (size_t k = 1; k < path.size(); k++)
                if (path[k] < (int)sent_score_.size() && std::isfinite(sent_score_[path[k]])) accepted += 1;
            if (predicted > 0) policy_->observe_calibration(predicted, accepted);
        }
        rates_.count_chain(lk_m_, lk_sent_, path);  // hybrid: the lookup chain sent (empty otherwise)
        lk_sent_.clear();
        draft_->clear_pred();
    }

    std::unique_ptr<Ops> own_ops_;  // the draft's own thread pool (p_.threads), destroyed after draft_
    // --draft-threads -1 on a CPU pool of 2+ threads: the draft's forwards on the target's pool, on one
    // thread (arm 0: the caller alone, no barrier) or all of them (arm 1), whichever drafts more forwards per
    // second. A draft forward is small (a chain step: one query through 3.5 M weights and an 8192-row head):
    // the split gains little, and a barrier on a busy machine (a descheduled worker) costs milliseconds.
    // The drafts are the same bits either way (the split is static; each row computed as by one thread).
    Ops* pool_ops_ = nullptr;
    // The round policy (round_policy.h): the verify cost, the calibration, each round's depth and thread
    // arm. Cost-aware trees choose the depth among 1, 2 and p.depth: on a 2-core CPU a draft forward of
    // 10 queries costs a good part of a decode step and deep nodes rarely pay for it; on a GPU the full
    // depth may. owner_: this drafter is the one the engine talks to (false under mode auto's switch).
    std::shared_ptr<RoundPolicy> policy_;
    bool owner_;
    int depth_ = 0;               // this round's tree depth
    BeagleDraftParams p_;
    int V_, Vt_, words_;          // draft logits per row; the target's vocabulary
    std::vector<int32_t> d2t_;    // reduced vocabulary: draft logit i is target token d2t_[i] (empty: identity)
    std::vector<float> qsub_;
    int tok_of(int i) const { return d2t_.empty() ? i : d2t_[i]; }
    std::unique_ptr<Draft> draft_;
    std::vector<double> accept_p_;         // propose_rerank: the ranked candidates' estimated acceptance
    ShadowCandidate shadow_;               // cost-aware trees: best candidate of a round that sent none
    std::vector<float> sent_score_;        // per node of the last tree: draft log-probability (-inf: lookup only)
    LookupRates rates_;                    // hybrid: acceptance of lookup candidates per (n-gram length, depth)
    std::vector<int> lk_sent_;             // hybrid: tree indices of the lookup chain sent last round, by depth
    int lk_m_ = 0, shadow_lk_tok_ = -1, shadow_lk_m_ = 0;  // its n-gram length; a match that sent nothing
    std::vector<float> logits_;           // chain sampling: the draft's logits of the step
    std::vector<float> alone_state_;      // drafting alone (server lost): the predicted state fed back
    std::vector<float> top_val_, top_lse_;  // tree: the top-k values and logsumexp of each expanded row
    std::vector<TreeNode> tree_nodes_;   // tree on the backend: its nodes as downloaded
    std::vector<int> path_tok_;          // the accepted path's tokens (an EAGLE draft's keys need them)
    std::vector<std::vector<float>> q_;  // chain sampling: the distribution each token was drawn from
    std::vector<float> coins_;           // sampled chain on the backend: the round's coins, one per step

    // The chain with its ids kept on the backend: step k's id is chosen there, the argmax (greedy) or a draw
    // from the step's warped row with the host's coin k (sampled: Draft::sample_ids; the coins drawn up front
    // in the host loop's order), and step k + 1 embeds it (Draft::forward_ids), so the gamma ids come to the
    // host in one copy after the last step, not one sync per step. Sampled, the q rows stay there for the
    // acceptance (DraftTree::backend_q; SpecDecoder reads q at the drawn tokens and one row at a rejection).
    // The same ids as propose_chain's host loop: on the CPU backend the same floats and draws.
    // The steps are the same calls at every round of `steps` steps and as many new true states (the accepted
    // path, whose keys the first step computes; sampled: the coins staged, the warp the same), so a device
    // backend replays them as one graph (Draft::begin_steps; variants: greedy chains steps, sampled 1024 +
    // steps, trees < 0).
    void propose_chain_on_backend(DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) {
        const int P = draft_->n_true(), steps = std::min(p_.gamma, room - tree->size());
        if (steps <= 0) return;
        const bool sampled = sp.temperature > 0;
        coins_.resize(sampled ? steps : 0);
        for (float& c : coins_) c = rng.next_f32();
        std::vector<uint64_t> mask(words_, 0);
        const int root = tree->token[0];
        const bool graph = sampled ? draft_->begin_steps(1024 + steps, &sp) : draft_->begin_steps(steps);
        for (int k = 0; k < steps; k++) {
            int pos = P + k, row = 0;
            if (k == 0) draft_->forward(&root, &pos, 1, nullptr, words_, nullptr, nullptr);
            else draft_->forward_ids(k - 1, &pos, 1, mask.data(), words_);
            if (sampled) draft_->sample_ids(k, sp, coins_[k]);
            else draft_->argmax_ids(k);
            int pr = draft_->keep_pred(&row, 1);
            mask[pr / 64] |= 1ULL << (pr % 64);
        }
        if (graph) draft_->end_steps();
        std::vector<int> ids(steps);
        draft_->download_ids(ids.data(), steps);
        if (sampled) {
            DraftTree::BackendQ& bq = tree->backend_q;
            bq.rows = draft_->q_rows();
            bq.cols = V_;
            bq.d2t = d2t_.empty() ? nullptr : d2t_.data();
            bq.col = ids;
        }
        for (int k = 0, node = 0; k < steps; k++) node = tree->add(node, tok_of(ids[k]), 0.0f, nullptr);
    }

    void propose_chain(DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) {
        if (draft_->can_forward_ids() && (sp.temperature <= 0 || p_.chain_on_backend))
            return propose_chain_on_backend(tree, room, sp, rng);
        int P = draft_->n_true();
        std::vector<uint64_t> mask(words_, 0);
        int node = 0;
        if (q_.size() < (size_t)p_.gamma) q_.resize(p_.gamma);
        logits_.resize(V_);
        for (int k = 0; k < p_.gamma && tree->size() < room; k++) {
            int tok = tree->token[node], pos = P + k, row = 0;
            const bool greedy = sp.temperature <= 0;  // greedy: only the argmax comes to the host
            draft_->forward(&tok, &pos, 1, k ? mask.data() : nullptr, words_, nullptr, greedy ? nullptr : logits_.data());
            int next = -1;
            if (greedy) draft_->top_k(1, &next, nullptr, nullptr);  // before keep_pred: EAGLE's consumes the query rows
            int pr = draft_->keep_pred(&row, 1);
            mask[pr / 64] |= 1ULL << (pr % 64);
            const float* q = nullptr;
            if (greedy) {
                next = tok_of(next);
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

    // Cost-aware trees (a verify cost): a = the policy's calibration. A tree of T tokens beats a plain
    // step only if its candidates' expected acceptances sum to more than cost[T] - 1, so candidates whose
    // a exp(score) is below the cheapest average cost of an extra token (VerifyCost::min_token_cost) are
    // not expanded (their children score lower still). The round's drafting is spent by then, so it is
    // not part of the choice (the policy charges it when it chooses the round).
    void propose_tree(const std::vector<int>& history, DraftTree* tree, int room) {
        int P = draft_->n_true();
        const bool aware = !policy_->cost().empty();
        int total = std::min(room, aware ? policy_->cost().max_tokens() : p_.total_tokens);
        if (total <= 1) return;
        shadow_.settle(*policy_, tree->token[0]);  // last round sent nothing: was its best depth-1 candidate right?
        if (shadow_lk_tok_ >= 0) {  // the same for the lookup chain's first token
            rates_.count(shadow_lk_m_, 1, tree->token[0] == shadow_lk_tok_);
            shadow_lk_tok_ = -1;
        }
        const double a = aware ? policy_->calibration() : 1.0;
        const float min_score = aware ? (float)std::log(policy_->cost().min_token_cost() / a) : -INFINITY;
        std::vector<Node> nodes;
        nodes.push_back({tree->token[0], -1, 0, 0.0f, -1, true});
        // a tree of `total` nodes needs no more than total - 1 levels or children per node
        const int depth = std::min(depth_, total - 1), topk = std::min(p_.topk, total - 1);
        // hybrid: find the lookup match first; one whose first token is accepted often enough
        // (learnt rate >= lookup_skip) is sent without running the draft at all
        std::vector<int> ctx;
        int lk_from = 0, lk_m = 0;
        if (p_.lookup_ngram > 0) {
            ctx = history;
            ctx.push_back(tree->token[0]);
            lk_m = find_ngram(ctx, p_.lookup_ngram, &lk_from);
        }
        const bool skip_draft = lk_m > 0 && rates_.rate(lk_m, 1) >= p_.lookup_skip;
        if (!skip_draft) {
            if (p_.tree_on_backend && draft_->can_forward_tree()) expand_on_backend(P, depth, topk, min_score, &nodes);
            else expand_on_host(P, depth, topk, min_score, &nodes);
        }
        propose_rerank(tree, total, aware, a, !skip_draft, lk_m, lk_from, ctx, &nodes);
    }

    // working tree (before the final rerank): token, parent, depth, score, pred row
    struct Node { int tok, parent, depth; float score; int pred; bool drafted; };

    // The dynamic tree expanded on the host: per depth the top-k ids, values and logsumexps of the
    // expanded rows come down (one sync each) and the host picks the next frontier (EAGLE drafts, and the
    // reference of expand_on_backend: BeagleDraftParams::tree_on_backend false).
    void expand_on_host(int P, int depth, int topk, float min_score, std::vector<Node>* nodes_out) {
        std::vector<Node>& nodes = *nodes_out;
        std::vector<int> frontier(1, 0);
        std::vector<int> idx;
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
            draft_->forward(toks.data(), pos.data(), n, d ? mask.data() : nullptr, words_, nullptr, nullptr);
            // the children: the top-k of each row, scored by log-softmax (ids, values and logsumexp
            // chosen where the logits are; only these come to the host)
            const int k = std::min(topk, V_);
            idx.resize((size_t)n * k);
            top_val_.resize((size_t)n * k);
            top_lse_.resize(n);
            draft_->top_k(k, idx.data(), top_val_.data(), top_lse_.data());
            if (d + 1 < depth) {  // their predicted states become keys for their children
                int base = draft_->keep_pred(rows.data(), n);
                for (int i = 0; i < n; i++) nodes[ex[i]].pred = base + i;
            }
            frontier.clear();
            for (int i = 0; i < n; i++) {
                for (int j = 0; j < k; j++) {
                    const size_t e = (size_t)i * k + j;
                    nodes.push_back({tok_of(idx[e]), ex[i], nodes[ex[i]].depth + 1,
                                     nodes[ex[i]].score + (top_val_[e] - top_lse_[i]), -1, true});
                    frontier.push_back((int)nodes.size() - 1);
                }
            }
        }
    }

    // The same tree with the working tree on the backend (Draft::tree_expand, docs/gpu.md "Syncs per
    // round"): depth d's forward, its top-k children scored and the next depth's queries chosen (their
    // ids, mask rows) by one op, so nothing comes down until the whole tree does, in one copy. The host
    // knows every size: depth d > 0 runs n = min(topk, rows x k) queries, where the host loop runs only
    // the rows at or above min_score (cost-aware trees); the others run too and their children come
    // back marked dead (TreeNode::live 0) and are dropped here, so `nodes` is the host loop's, node for
    // node, bit for bit (the same top-k, logsumexp and float expression for the scores, the same order).
    void expand_on_backend(int P, int depth, int topk, float min_score, std::vector<Node>* nodes_out) {
        const int k = std::min(topk, V_), root = (*nodes_out)[0].tok;
        int n = 1, n_nodes = 1;
        std::vector<int> pos, rows;
        // the same calls at every round of this shape and count of new true keys (min_score is staged): one graph
        const bool graph = depth < 64 && topk < 256 && k < 256 && draft_->begin_steps(-1 - ((depth * 256 + topk) * 256 + k));
        for (int d = 0; d < depth; d++) {
            pos.assign(n, P + d);
            if (d == 0) draft_->forward(&root, pos.data(), 1, nullptr, words_, nullptr, nullptr);
            else draft_->forward_tree(d, pos.data(), n);
            const bool last = d + 1 == depth;
            int base = -1;
            if (!last) {  // their predicted states become keys for their children
                rows.resize(n);
                std::iota(rows.begin(), rows.end(), 0);
                base = draft_->keep_pred(rows.data(), n);
            }
            const int n_next = last ? 0 : std::min(topk, n * k);
            draft_->tree_expand(d, k, n_nodes, n_next, base, min_score);
            n_nodes += n * k;
            n = n_next;
        }
        if (graph) draft_->end_steps();
        tree_nodes_.resize(n_nodes);
        draft_->download_tree(tree_nodes_.data() + 1, 1, n_nodes - 1);
        std::vector<int> newidx(n_nodes, -1);  // device node -> index in nodes (live ones)
        newidx[0] = 0;
        std::vector<Node>& nodes = *nodes_out;
        for (int c = 1; c < n_nodes; c++) {
            const TreeNode& t = tree_nodes_[c];
            if (!t.live) continue;
            const int par = t.parent >= 0 && t.parent < c ? newidx[t.parent] : -1;
            BEAGLE_CHECK(par >= 0, "draft tree: live node %d under node %d, not a live node before it", c, t.parent);
            nodes.push_back({tok_of(t.tok), par, nodes[par].depth + 1, t.score, -1, true});
            newidx[c] = (int)nodes.size() - 1;
        }
    }

    void propose_rerank(DraftTree* tree, int total, bool aware, double a, bool drafted, int lk_m, int lk_from,
                        const std::vector<int>& ctx, std::vector<Node>* nodes_out) {
        std::vector<Node>& nodes = *nodes_out;
        // value = log of the estimated chance that a node is accepted: a q(path) for drafted nodes
        int best_drafted = nodes.size() > 1 ? 1 : 0;  // depth-1 nodes come first, best first
        std::vector<float> val(nodes.size());
        for (size_t i = 0; i < nodes.size(); i++) val[i] = nodes[i].score + (float)std::log(a);
        std::vector<int> lk_nodes;  // hybrid: the lookup chain's nodes by depth
        if (lk_m > 0) merge_lookup(ctx, lk_m, lk_from, std::min(p_.depth, total - 1), &nodes, &val, &lk_nodes);
        // rerank: the best total - 1 candidates by value. A child never scores above its parent (log q
        // <= 0, lookup rates <= 1) and ties go to the lower index (parents come first), so the kept
        // set contains every kept node's ancestors.
        std::vector<int> order(nodes.size() - 1);
        std::iota(order.begin(), order.end(), 1);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return val[a] > val[b]; });
        if ((int)order.size() > total - 1) order.resize(total - 1);
        if (aware) {  // the prefix of the ranking with the most expected tokens per unit of cost
            accept_p_.resize(order.size());
            for (size_t i = 0; i < order.size(); i++) accept_p_[i] = std::exp((double)val[order[i]]);
            order.resize(best_prefix(accept_p_.data(), (int)order.size(), policy_->cost()));
        }
        // nothing sent: the best drafted candidate and the lookup's first token are checked against
        // the next root instead (else their estimates could only fall)
        if (aware && order.empty() && best_drafted > 0) {
            shadow_.set(nodes[best_drafted].tok, std::exp((double)nodes[best_drafted].score));
        }
        if (!lk_nodes.empty() && std::find(order.begin(), order.end(), lk_nodes[0]) == order.end()) {
            shadow_lk_tok_ = nodes[lk_nodes[0]].tok;
            shadow_lk_m_ = lk_m_;
        }
        std::sort(order.begin(), order.end());  // creation order is topological, siblings by score
        std::vector<int> newidx(nodes.size(), -1);
        newidx[0] = 0;
        sent_score_.assign(1, 0.0f);
        for (int o : order) {
            int par = newidx[nodes[o].parent];
            if (par < 0) continue;  // cannot happen (see above); keep the tree valid regardless
            newidx[o] = tree->add(par, nodes[o].tok, val[o]);
            sent_score_.push_back(nodes[o].drafted ? nodes[o].score : -INFINITY);
        }
        lk_sent_.clear();
        for (int i : lk_nodes) {
            if (newidx[i] < 0) break;
            lk_sent_.push_back(newidx[i]);
        }
    }

    // Hybrid: the continuation ctx[from ..] of the context's last m-gram (find_ngram) becomes a chain
    // under the root, each node valued log(reach), reach = the product of the learnt rates down to
    // it. A chain node the draft also proposed (same parent and token) stays one node with the larger
    // value.
    void merge_lookup(const std::vector<int>& ctx, int m, int from, int max_len, std::vector<Node>* nodes,
                      std::vector<float>* val, std::vector<int>* chain) {
        lk_m_ = m;
        const int len = std::min(max_len, (int)ctx.size() - from);
        double reach = 1;
        for (int k = 1, par = 0; k <= len; k++) {
            reach *= rates_.rate(m, k);
            const int tok = ctx[from + k - 1];
            int c = -1;
            for (size_t j = 1; j < nodes->size() && c < 0; j++)
                if ((*nodes)[j].parent == par && (*nodes)[j].tok == tok) c = (int)j;
            if (c < 0) {
                nodes->push_back({tok, par, k, -INFINITY, -1, false});
                val->push_back(-INFINITY);
                c = (int)nodes->size() - 1;
            }
            (*val)[c] = std::max((*val)[c], (float)std::log(reach));
            chain->push_back(c);
            par = c;
        }
    }
};

std::unique_ptr<Drafter> make_beagle_drafter(const DraftWeights& w, const DraftFrozen& fz, Session& s,
                                             const BeagleDraftParams& p, std::shared_ptr<RoundPolicy> policy, bool owner) {
    check_draft_params(p);
    BEAGLE_CHECK(p.threads >= -1 && p.threads <= 256, "--draft-threads must be in -1..256, got %d", p.threads);
    BEAGLE_CHECK(p.concat || w.cfg.arch == ARCH_BEAGLE,
                 "--no-concat is a Beagle draft's mode: an %s draft's self-attention always sees its own predictions",
                 w.cfg.arch == ARCH_EAGLE ? "EAGLE" : "MoA");
    policy = policy_or_own(p, std::move(policy), &owner);
    return std::unique_ptr<Drafter>(new BeagleDrafter(w, fz, s, p, std::move(policy), owner));
}

void check_draft_params(const BeagleDraftParams& p) {
    BEAGLE_CHECK(p.depth >= 1, "--depth must be >= 1, got %d", p.depth);
    BEAGLE_CHECK(p.topk >= 1, "--topk must be >= 1, got %d", p.topk);
    BEAGLE_CHECK(p.gamma >= 1, "--gamma must be >= 1, got %d", p.gamma);
    BEAGLE_CHECK(p.total_tokens >= 2, "--total-tokens must be >= 2, got %d", p.total_tokens);
    BEAGLE_CHECK(p.verify_cost.empty() || p.verify_cost.size() >= 3, "verify cost table needs T = 1..2 at least");
}

std::shared_ptr<RoundPolicy> policy_or_own(const BeagleDraftParams& p, std::shared_ptr<RoundPolicy> policy, bool* owner) {
    if (policy) return policy;
    RoundPolicy::Setup setup;
    setup.verify_cost = p.verify_cost;
    setup.draft_cost = p.auto_draft_cost;
    *owner = true;
    return std::make_shared<RoundPolicy>(setup);
}

}  // namespace beagle
