// medusa_drafter.cpp: the Medusa drafter (medusa_drafter.h). Head k, run on the last committed state f_p, gives
// the distribution of t_{p+2+k}: the root is t_{p+1} (the target's own token), so depth d of the tree comes
// from head d - 1. Sampled runs draw the chain's tokens from the warped heads (q on the nodes: the residual
// rule of accept.h is then lossless); a sampled tree keeps the heads' top-k as chosen candidates (q null:
// point masses, also lossless).
#include "medusa_drafter.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "../core/common.h"
#include "../model/draft.h"
#include "../model/medusa_layers.h"
#include "verify_cost.h"

namespace beagle {

class MedusaDrafter : public Drafter {
public:
    MedusaDrafter(const DraftWeights& w, const DraftFrozen& fz, Session& s, const BeagleDraftParams& p,
                  std::shared_ptr<RoundPolicy> policy, bool owner)
        : ops_(*s.ops), p_(p), policy_(std::move(policy)), owner_(owner), m_(ops_, w, fz), al_(ops_),
          K_(w.cfg.medusa_heads), dim_(w.cfg.dim), HR_(w.cfg.head_rows()), V_(w.cfg.vocab_size) {
        BEAGLE_CHECK(w.cfg.arch == ARCH_MEDUSA, "MedusaDrafter: a %s draft", draft_arch_name(w.cfg.arch));
        const Weight& head = s.llama->lm_head_weight();
        BEAGLE_CHECK(head.rows == V_ && head.cols == dim_, "MedusaDrafter: target LM head [%lld, %lld], the draft expects [%d, %d]",
                     (long long)head.rows, (long long)head.cols, V_, dim_);
        m_.head_w = w.cfg.draft_vocab > 0 ? reduced_head_weight(ops_, head, m_.d2t, dim_, &head_bytes_, &head_view_) : head;
        const size_t KD = (size_t)K_ * dim_;
        f_ = al_.alloc(dim_);
        z_ = al_.alloc(KD);
        u_ = al_.alloc(KD);
        xn_ = al_.alloc(KD);
        rstd_ = al_.alloc(K_);
        logits_ = al_.alloc((size_t)K_ * HR_);
        ones_ = al_.alloc(KD);
        const std::vector<float> one(KD, 1.0f);
        ops_.upload(ones_, one.data(), KD);
        ScratchSizes sz;  // the heads' top-k on a device backend
        sz.rows = K_;
        sz.topk = p.topk;
        ops_.reserve(sz);
        std::vector<int> depths;  // cost-aware trees: the depth among 1, 2 and min(p.depth, K)
        const int dmax = std::min(p.depth, K_);
        if (p.tree && !policy_->cost().empty()) {
            for (int d : {1, 2})
                if (d < dmax) depths.push_back(d);
            depths.push_back(dmax);
        }
        policy_->set_draft(name(), depths, false);
    }
    const char* name() const override { return p_.tree ? "tree" : "chain"; }
    RoundPolicy* policy() const override { return policy_.get(); }

    void begin(const std::vector<int>& prompt, const float* states) override { begin_cached(prompt, 0, states); }
    // Only the last state matters: the prompt's last row (of the prompt.size() - keep given).
    void begin_cached(const std::vector<int>& prompt, int keep, const float* states) override {
        BEAGLE_CHECK(keep >= 0 && keep < (int)prompt.size(), "drafter medusa: keep %d cached positions for a prompt of %zu tokens",
                     keep, prompt.size());
        if (owner_) policy_->begin((int)prompt.size());
        shadow_.clear();
        sent_score_.clear();
        ops_.upload(f_, states + (size_t)(prompt.size() - keep - 1) * dim_, dim_);
    }

    void propose(const std::vector<int>&, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) override {
        const RoundChoice& c = owner_ ? policy_->choose() : policy_->choice();
        depth_ = std::min(c.depth > 0 ? c.depth : p_.depth, K_);
        const double t0 = now_seconds();
        medusa_forward(m_, al_, f_, z_, u_, ones_, 1);         // u_k = f_p + SiLU(W_k f_p + b_k), k < K
        head_logits(m_, u_, K_, xn_, rstd_, logits_);          // logits_k = H final_norm(u_k)
        sent_score_.assign(1, 0.0f);
        if (p_.tree) propose_tree(tree, room);
        else propose_chain(tree, room, sp, rng);
        policy_->observe_draft(now_seconds() - t0, 1);
    }

    void accept(const DraftTree& tree, const std::vector<int>& path, const float* path_states) override {
        ops_.upload(f_, path_states + (path.size() - 1) * (size_t)dim_, dim_);
        finish_round(tree, path);
    }
    void accept_rows(const DraftTree& tree, const std::vector<int>& path, Ops& ops, const float* states, int D) override {
        BEAGLE_CHECK(&ops == &ops_, "drafter medusa: the verify's states are on another backend");
        ops_.copy(f_, states + (size_t)path.back() * D, dim_);  // the row's first dim floats: f (no state layers)
        finish_round(tree, path);
    }
    // A round the heads sat out (mode auto ran lookup): they need only the new last state.
    void accept_skipped(const DraftTree&, const std::vector<int>& path, const float* path_states) override {
        ops_.upload(f_, path_states + (path.size() - 1) * (size_t)dim_, dim_);
        shadow_.clear();
        sent_score_.clear();
    }
    void observe_verify(int T, double seconds, int context) override {
        if (owner_) policy_->observe_verify(T, seconds, context);
    }

private:
    int target_token(int id) const { return m_.d2t.empty() ? id : m_.d2t[id]; }

    // Calibration of the sent candidates (cost-aware trees), then the round's report to the policy.
    void finish_round(const DraftTree& tree, const std::vector<int>& path) {
        if (p_.tree && !policy_->cost().empty() && tree.size() > 1) {
            double predicted = 0;
            for (int i = 1; i < tree.size() && i < (int)sent_score_.size(); i++) predicted += std::exp((double)sent_score_[i]);
            if (predicted > 0) policy_->observe_calibration(predicted, (double)path.size() - 1);
        }
        if (owner_) policy_->observe_round(tree.size(), (int)path.size());
    }

    // min(gamma, K) tokens, token d from head d - 1: its argmax, or (sampling) a draw from its warped distribution.
    void propose_chain(DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) {
        const int steps = std::min({p_.gamma, K_, room - tree->size()});
        if (steps <= 0) return;
        if (sp.temperature <= 0) {
            idx_.resize(steps);
            ops_.topk_rows(idx_.data(), nullptr, nullptr, logits_, steps, HR_, 1);
            for (int k = 0, node = 0; k < steps; k++) node = tree->add(node, target_token(idx_[k]), 0.0f);
            return;
        }
        host_.resize((size_t)steps * HR_);
        ops_.download(host_.data(), logits_, host_.size());
        if ((int)q_.size() < steps) q_.resize(steps);
        row_.resize(V_);
        for (int k = 0, node = 0; k < steps; k++) {
            const float* r = &host_[(size_t)k * HR_];
            if (m_.d2t.empty()) {
                warp_dense(r, V_, sp, &q_[k]);
            } else {  // over the target's vocabulary: the tokens outside the draft's have no mass
                std::fill(row_.begin(), row_.end(), -INFINITY);
                for (int j = 0; j < HR_; j++) row_[m_.d2t[j]] = r[j];
                warp_dense(row_.data(), V_, sp, &q_[k]);
            }
            const int tok = draw_dense(q_[k].data(), V_, rng.next_f32());
            node = tree->add(node, tok, 0.0f, q_[k].data());
        }
    }

    // The best candidates of the heads' top-k, best-first by the summed log-probability of the path: a node at depth
    // d < depth has k children, one per entry of head d's top-k, scored parent + log q_d(token). A child never scores
    // above its parent, so the order of the pops is non-increasing and every node comes after its parent.
    void propose_tree(DraftTree* tree, int room) {
        const bool aware = !policy_->cost().empty();
        const int total = std::min(room, aware ? policy_->cost().max_tokens() : p_.total_tokens);
        if (total <= 1) return;
        shadow_.settle(*policy_, tree->token[0]);  // last round sent nothing: was its best candidate the target's?
        const double a = aware ? policy_->calibration() : 1.0;
        const float la = (float)std::log(a);
        // cost-aware: a node's children are worth a verify slot only if a q(path) can pay for one
        const float min_score = aware ? (float)std::log(policy_->cost().min_token_cost() / a) : -INFINITY;
        const int depth = std::min(depth_, total - 1), k = std::min({p_.topk, total - 1, HR_});
        idx_.resize((size_t)depth * k);
        val_.resize((size_t)depth * k);
        lse_.resize(depth);
        ops_.topk_rows(idx_.data(), val_.data(), lse_.data(), logits_, depth, HR_, k);
        auto worse = [](const Cand& x, const Cand& y) { return x.score < y.score || (x.score == y.score && x.seq > y.seq); };
        std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
        int seq = 0;
        auto push_children = [&](int parent, int d, float score) {  // children at depth d + 1 from head d
            if (d >= depth || (d > 0 && score < min_score)) return;
            for (int j = 0; j < k; j++) {
                const size_t e = (size_t)d * k + j;
                if (idx_[e] < 0) continue;
                heap.push({score + (val_[e] - lse_[d]), seq++, parent, d + 1, j});
            }
        };
        nodes_.clear();
        push_children(-1, 0, 0.0f);
        while (!heap.empty() && (int)nodes_.size() < total - 1) {
            const Cand c = heap.top();
            heap.pop();
            nodes_.push_back(c);
            push_children((int)nodes_.size() - 1, c.depth, c.score);
        }
        int keep = (int)nodes_.size();
        if (aware) {
            accept_p_.resize(nodes_.size());
            for (size_t i = 0; i < nodes_.size(); i++) accept_p_[i] = std::exp((double)(nodes_[i].score + la));
            keep = best_prefix(accept_p_.data(), (int)nodes_.size(), policy_->cost());
            if (keep == 0 && !nodes_.empty()) {
                shadow_.set(target_token(idx_[nodes_[0].j]), std::exp((double)nodes_[0].score));
            }
        }
        // node i of nodes_ is tree node i + 1 (the pops are in topological order)
        for (int i = 0; i < keep; i++) {
            const Cand& c = nodes_[i];
            const int tok = target_token(idx_[(size_t)(c.depth - 1) * k + c.j]);
            tree->add(c.parent + 1, tok, c.score + la);
            sent_score_.push_back(c.score);
        }
    }

    Ops& ops_;
    BeagleDraftParams p_;
    std::shared_ptr<RoundPolicy> policy_;
    bool owner_;
    DraftModelT<Ops> m_;
    BufAlloc<Ops> al_;
    const int K_, dim_, HR_, V_;
    int depth_ = 1;
    std::vector<uint8_t> head_bytes_;       // reduced vocabulary: the target head's rows for d2t
    std::unique_ptr<Tensor> head_view_;
    float *f_, *z_, *u_, *xn_, *rstd_, *logits_, *ones_;  // backend: the last state, the heads' activations
    struct Cand {
        float score;
        int seq, parent, depth, j;  // parent: an index into nodes_ (-1: the root); j: the entry of head depth - 1's top-k
    };
    std::vector<Cand> nodes_;    // the tree's candidates in the order of their pops
    std::vector<int> idx_;
    std::vector<float> val_, lse_, host_, row_, sent_score_;
    std::vector<double> accept_p_;
    std::vector<std::vector<float>> q_;  // sampled chain: the distribution each token was drawn from
    ShadowCandidate shadow_;             // cost-aware: the best candidate of a round that sent none
};

std::vector<MemLine> medusa_drafter_buffers(const DraftConfig& c) {
    const double KD = (double)c.medusa_heads * c.dim;
    return {{"Medusa heads W, b and the final norm (f32)", 4.0 * (KD * c.dim + KD + c.dim)},
            {"Medusa last true state f_p (dim)", 4.0 * c.dim},
            {"Medusa z, u, final_norm(u), ones (4 x K dim)", 4.0 * 4 * KD},
            {"Medusa rstd (K) and logits (K x head rows)", 4.0 * c.medusa_heads * (1.0 + c.head_rows())}};
}

std::unique_ptr<Drafter> make_medusa_drafter(const DraftWeights& w, const DraftFrozen& fz, Session& s,
                                             const BeagleDraftParams& p, std::shared_ptr<RoundPolicy> policy, bool owner) {
    check_draft_params(p);
    BEAGLE_CHECK(w.cfg.arch == ARCH_MEDUSA, "make_medusa_drafter: a %s draft", draft_arch_name(w.cfg.arch));
    policy = policy_or_own(p, std::move(policy), &owner);
    return std::unique_ptr<Drafter>(new MedusaDrafter(w, fz, s, p, std::move(policy), owner));
}

}  // namespace beagle
