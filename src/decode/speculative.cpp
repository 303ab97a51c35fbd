// speculative.cpp: draft -> verify (one target forward over the tree) -> accept -> compact KV ->
// tell the drafter the new true states. See speculative.h.
#include "speculative.h"

#include <algorithm>
#include <cstring>

#include "../core/common.h"
#include "round_policy.h"

namespace beagle {

SpecDecoder::SpecDecoder(Session& s, Drafter& d, const SamplingParams& sp, const SpecParams& spp, SpecStats* st,
                         const Acceptance& acc)
    : s_(s), d_(d), sp_(sp), spp_(spp), acc_(acc), st_(st), sampler_(sp, s.llama->config().vocab_size) {}

int SpecDecoder::begin(const std::vector<int>& prompt, int keep) {
    Llama& m = *s_.llama;
    const int V = m.config().vocab_size, D = m.state_width();  // a state row (wide with state layers)
    s_.keep_prefix(prompt, keep);
    const int n = (int)prompt.size() - keep;
    std::vector<float> logits(V), pstates((size_t)n * D);
    double t0 = now_seconds();
    m.prefill(prompt.data() + keep, n, logits.data(), pstates.data());
    return begin_prefilled(prompt, logits.data(), pstates.data(), now_seconds() - t0, keep);
}

int SpecDecoder::begin_prefilled(const std::vector<int>& prompt, const float* logits, const float* pstates, double prefill_s,
                                 int keep) {
    *st_ = SpecStats();
    st_->prompt_tokens = (int)prompt.size();
    st_->prefill_s = prefill_s;
    t1_ = now_seconds();
    d_.begin_cached(prompt, keep, pstates);
    history_ = prompt;
    root_ = sampler_.sample(logits);
    return root_;
}

bool SpecDecoder::step(std::vector<int>* out) {
    if (!draft()) return false;
    Llama& m = *s_.llama;
    const int T = tree_.size(), V = m.config().vocab_size;
    // The verify's logits and states stay on the backend: greedy takes the target's argmax of each node
    // there (T ids come down); a chain drawn on the backend is accepted there but for the host's coins
    // (accept_backend_chain: two copies); other sampled trees bring down only the logits rows their walk reads
    // (accept_path: the root's, then each accepted child's, one copy each); the drafter takes the path's
    // states there. An observer (Acceptance) has every row brought down.
    const bool rows = acc_.observer != nullptr;
    if (rows) vlogits_.resize((size_t)T * V);
    const AcceptRule rule = acc_.rule ? acc_.rule : accept_path;
    const double tf = now_seconds();
    m.forward(tree_.token.data(), pos_.data(), T, mask(), tree_.words(), rows ? vlogits_.data() : nullptr, rows ? T : 0,
              nullptr, 0);
    int bonus = -1;
    std::vector<int> path;
    if (sp_.temperature <= 0) {
        vargmax_.resize(T);
        m.argmax_last(vargmax_.data(), T);
        verified(tf);
        path = accept_greedy(tree_, vargmax_.data(), &bonus);
    } else if (tree_.backend_q.rows && T > 1 && !rows && !acc_.rule) {
        path = accept_backend_chain(tf, &bonus);
    } else {
        host_q();
        const float* logits = rows ? nullptr : m.logits_last(T);  // backend, T x V
        vrow_.resize(V);
        int have = -1;  // the node whose row vrow_ holds
        auto row = [&](int i) -> const float* {
            if (rows) return &vlogits_[(size_t)i * V];
            if (i != have) s_.ops->download(vrow_.data(), logits + (size_t)i * V, V);
            have = i;
            return vrow_.data();
        };
        row(0);  // the walk starts at the root: its copy waits for the forward, which is timed up to here
        verified(tf);
        path = rule(tree_, row, V, sp_, sampler_.rng(), &bonus);
    }
    finish(path, bonus, rows ? vlogits_.data() : nullptr, m.states_backend(), true, out);
    return true;
}

// The verify's results have reached the host (ids or the root's row): its time goes to the drafter's round policy.
void SpecDecoder::verified(double tf) {
    const double fs = now_seconds() - tf;
    if (spp_.learn_cost) d_.observe_verify(tree_.size(), fs, n0_);
}

bool SpecDecoder::draft(bool propose) {
    Llama& m = *s_.llama;
    int room = std::min(spp_.max_tree, m.ctx() - m.n_past());
    if (room < 1) return false;
    double ta = now_seconds();
    DraftTree& tree = tree_;
    tree.reset(root_);
    skipped_ = !propose;
    if (propose) d_.propose(history_, &tree, room, sp_, sampler_.rng());
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

// A chain drawn on the backend (DraftTree::backend_q; BeagleDrafter's sampled chain): the verify's rows are
// warped there (Ops::warp_rows, the same warp as the host's), p_k(x_{k+1}) and q(x_{k+1}) of the chain come
// down in one copy, and the rows where the walk ends (node k's p, and after a rejection child k + 1's q) in
// one more (accept_chain). With the draft's copy of its ids: three syncs a round, whatever the chain's length.
std::vector<int> SpecDecoder::accept_backend_chain(double tf, int* bonus) {
    Ops& ops = *s_.ops;
    Llama& m = *s_.llama;
    const DraftTree::BackendQ& bq = tree_.backend_q;
    const int T = tree_.size(), n = T - 1, V = m.config().vocab_size, C = bq.cols;
    BEAGLE_CHECK((int)bq.col.size() == n, "sampled chain on the backend: %zu draws for %d drafted tokens", bq.col.size(), n);
    if (!bufs_) bufs_.reset(new BufAlloc<Ops>(ops));
    if (pw_n_ < (size_t)T * V) {  // grown to the longest chain (the first round's, in practice)
        bufs_->release(pw_);
        bufs_->release(pq_);
        pw_n_ = (size_t)T * V;
        pw_ = bufs_->alloc(pw_n_);
        pq_ = bufs_->alloc(2 * (size_t)T);
    }
    if (ends_n_ < (size_t)V + C) {
        bufs_->release(ends_);
        ends_n_ = (size_t)V + C;
        ends_ = bufs_->alloc(ends_n_);
    }
    ops.warp_rows(pw_, nullptr, nullptr, m.logits_last(T), T, V, sp_);
    std::vector<int> ip(n), iq(n);
    for (int k = 0; k < n; k++) {
        ip[k] = k * V + tree_.token[k + 1];
        iq[k] = k * C + bq.col[k];
    }
    ops.gather_rows(pq_, pw_, ip.data(), n, 1);
    ops.gather_rows(pq_ + n, bq.rows, iq.data(), n, 1);
    pq_host_.resize(2 * (size_t)n);
    ops.download(pq_host_.data(), pq_, 2 * (size_t)n);  // waits for the forward, which is timed up to here
    verified(tf);
    auto fetch = [&](int k, std::vector<float>* p, std::vector<float>* q) {
        ops.copy(ends_, pw_ + (size_t)k * V, V);
        if (q) ops.copy(ends_ + V, bq.rows + (size_t)k * C, C);
        ends_host_.resize((size_t)V + (q ? C : 0));
        ops.download(ends_host_.data(), ends_, ends_host_.size());
        p->assign(ends_host_.begin(), ends_host_.begin() + V);
        if (q) bq.to_target(ends_host_.data() + V, V, q);
    };
    return accept_chain(tree_, pq_host_.data(), pq_host_.data() + n, fetch, sampler_.rng(), bonus);
}

// A walk over host rows (commit(), an observer's rows, a given rule) of a chain drawn on the backend: its q rows, over
// the target's vocabulary, brought to the host as the nodes' q (a copy each).
void SpecDecoder::host_q() {
    const DraftTree::BackendQ& bq = tree_.backend_q;
    if (!bq.rows) return;
    const int n = tree_.size() - 1, V = s_.llama->config().vocab_size, C = bq.cols;
    std::vector<float> row(C);
    q_host_.resize(n);
    for (int k = 0; k < n; k++) {
        s_.ops->download(row.data(), bq.rows + (size_t)k * C, C);
        bq.to_target(row.data(), V, &q_host_[k]);
        tree_.q[k + 1] = q_host_[k].data();
    }
}

void SpecDecoder::commit(const float* vlogits, const float* vstates, double forward_s, std::vector<int>* out) {
    const int V = s_.llama->config().vocab_size;
    const DraftTree& tree = tree_;
    const int T = tree.size();
    if (spp_.learn_cost && !skipped_) d_.observe_verify(T, forward_s, n0_);
    int bonus = -1;
    host_q();
    auto row = [&](int i) { return vlogits + (size_t)i * V; };
    std::vector<int> path = (acc_.rule ? acc_.rule : accept_path)(tree, row, V, sp_, sampler_.rng(), &bonus);
    finish(path, bonus, vlogits, vstates, false, out);
}

void SpecDecoder::finish(const std::vector<int>& path, int bonus, const float* vlogits, const float* states,
                         bool on_backend, std::vector<int>* out) {
    Llama& m = *s_.llama;
    const int D = m.state_width();
    const DraftTree& tree = tree_;
    const int T = tree.size(), n0 = n0_;
    std::vector<int> src(path.size());
    for (size_t i = 0; i < path.size(); i++) src[i] = n0 + path[i];
    m.compact(src.data(), (int)path.size(), n0);
    if (acc_.observer && vlogits) acc_.observer->verified(tree, path, vlogits, m.config().vocab_size);
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
    double tc = now_seconds();
    BEAGLE_CHECK(!skipped_ || !on_backend, "a round without the drafter's tree is committed from host rows (commit())");
    if (on_backend) {
        d_.accept_rows(tree, path, *s_.ops, states, D);
    } else {
        path_states_.resize(path.size() * D);
        for (size_t k = 0; k < path.size(); k++)
            memcpy(&path_states_[k * D], &states[(size_t)path[k] * D], D * sizeof(float));
        if (skipped_) d_.accept_skipped(tree, path, path_states_.data());
        else d_.accept(tree, path, path_states_.data());
    }
    st_->draft_s += now_seconds() - tc;
    if (skipped_) {
        st_->rounds_by_mode["plain"]++;
    } else if (const RoundPolicy* p = d_.policy()) {  // the round policy's last choice
        st_->rounds_by_mode[p->round_mode()]++;
        if (const char* t = p->round_threads()) st_->draft_threads[t]++;
        if (const int depth = p->round_depth()) st_->draft_depth[std::to_string(depth)]++;
    } else {
        st_->rounds_by_mode[d_.name()]++;
    }
    root_ = bonus;
    out->push_back(bonus);
}

std::string generate_speculative(Session& s, Drafter& d, const std::vector<int>& prompt, int n, const SamplingParams& sp,
                                 const SpecParams& spp, FILE* stream, SpecStats* st, std::vector<int>* out_ids,
                                 const Acceptance& acc, const Resume& r) {
    SpecDecoder dec(s, d, sp, spp, st, acc);
    int root = dec.begin(prompt, r.keep);
    std::string text = run_commits(s, prompt.back(), root, n, [&](std::vector<int>* out) { return dec.step(out); },
                                   stream, st, out_ids, r.interrupt);
    if (n > 0) st->decode_s = now_seconds() - dec.decode_start();
    if (r.cache_ids) *r.cache_ids = dec.cache_ids();
    return text;
}

}  // namespace beagle
