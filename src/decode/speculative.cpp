// speculative.cpp: draft -> verify (one target forward over the tree) -> accept -> compact KV ->
// tell the drafter the new true states. See speculative.h.
#include "speculative.h"

#include <algorithm>
#include <cstring>

#include "../core/common.h"
#include "accept.h"

namespace beagle {

std::string generate_speculative(Session& s, Drafter& d, const std::vector<int>& prompt, int n, const SamplingParams& sp,
                                 const SpecParams& spp, FILE* stream, SpecStats* st, std::vector<int>* out_ids) {
    Llama& m = *s.llama;
    const int V = m.config().vocab_size, D = m.config().dim;
    *st = SpecStats();
    st->prompt_tokens = (int)prompt.size();
    m.truncate(0);
    std::vector<float> logits(V), pstates((size_t)prompt.size() * D);
    Sampler sampler(sp, V);
    double t0 = now_seconds();
    m.prefill(prompt.data(), (int)prompt.size(), logits.data(), pstates.data());
    st->prefill_s = now_seconds() - t0;
    double t1 = now_seconds();
    d.begin(prompt, pstates.data());

    std::string text;
    std::vector<int> history(prompt);
    int prev = prompt.back();
    bool done = false;
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
    int root = sampler.sample(logits.data());
    if (!emit(root)) done = true;

    DraftTree tree;
    std::vector<uint64_t> mask;
    std::vector<int> pos;
    std::vector<float> vlogits, vstates, path_states;
    while (!done) {
        int room = std::min(spp.max_tree, m.ctx() - m.n_past());
        if (room < 1) { st->stopped_ctx = true; break; }
        double ta = now_seconds();
        tree.reset(root);
        d.propose(history, &tree, room, sp, sampler.rng());
        tree.truncate(room);
        double tb = now_seconds();
        st->draft_s += tb - ta;

        int T = tree.size(), n0 = m.n_past();
        if (T > 1) tree.mask(&mask);  // the root alone: a plain causal step
        pos.resize(T);
        for (int i = 0; i < T; i++) pos[i] = n0 + tree.depth[i];
        vlogits.resize((size_t)T * V);
        vstates.resize((size_t)T * D);
        const double tf = now_seconds();
        m.forward(tree.token.data(), pos.data(), T, T > 1 ? mask.data() : nullptr, tree.words(), vlogits.data(), T,
                  vstates.data(), T);
        if (spp.learn_cost) d.observe_verify(T, now_seconds() - tf);
        int bonus = -1;
        std::vector<int> path = accept_path(tree, vlogits.data(), V, sp, sampler.rng(), &bonus, spp.debug_break_residual);
        std::vector<int> src(path.size());
        for (size_t i = 0; i < path.size(); i++) src[i] = n0 + path[i];
        m.compact(src.data(), (int)path.size(), n0);
        st->verify_s += now_seconds() - tb;

        // statistics
        st->rounds++;
        st->target_passes++;
        st->drafted += T - 1;
        st->gen_tokens_after_root += (int)path.size();
        std::vector<std::vector<int>> kids = tree.children();
        for (size_t k = 0; k < path.size(); k++) {
            if (kids[path[k]].empty()) break;
            if (st->reached_by_depth.size() <= k) { st->reached_by_depth.resize(k + 1); st->accept_by_depth.resize(k + 1); }
            st->reached_by_depth[k]++;
            if (k + 1 < path.size()) st->accept_by_depth[k]++;
        }
        // commit: accepted candidates, then the bonus token
        history.push_back(root);
        for (size_t k = 1; k < path.size() && !done; k++) {
            history.push_back(tree.token[path[k]]);
            if (!emit(tree.token[path[k]])) done = true;
        }
        path_states.resize(path.size() * D);
        for (size_t k = 0; k < path.size(); k++)
            memcpy(&path_states[k * D], &vstates[(size_t)path[k] * D], D * sizeof(float));
        double tc = now_seconds();
        d.accept(tree, path, path_states.data());
        st->draft_s += now_seconds() - tc;
        if (done) break;
        root = bonus;
        if (!emit(root)) break;
    }
    st->decode_s = now_seconds() - t1;
    return text;
}

}  // namespace beagle
