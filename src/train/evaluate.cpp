// evaluate.cpp: a trained draft's acceptance on held-out prompts (evaluate.h), measured with the
// speculative decoding engine itself; called at the end of `beagle train` and by the tests.
#include "evaluate.h"

#include <algorithm>
#include <memory>

#include "../core/common.h"
#include "../data/prompts.h"
#include "../decode/drafters.h"
#include "../decode/session.h"
#include "train_loop.h"

namespace beagle {

AcceptEval eval_acceptance(Session& s, const DraftWeights& dw, const std::vector<std::vector<int>>& prompts, int n,
                           const BeagleDraftParams& p) {
    std::unique_ptr<Drafter> d = make_drafter(s, p.tree ? "tree" : "chain", p, &dw, "(the trained draft)");
    SamplingParams sp;
    sp.temperature = 0;
    SpecParams spp;
    spp.max_tree = std::max(64, p.tree ? p.total_tokens : p.gamma + 1);
    AcceptEval r;
    std::vector<int> acc;
    double t0 = now_seconds();
    for (const std::vector<int>& pr : prompts) {
        int room = s.llama->ctx() - (int)pr.size() - spp.max_tree - 1;
        int m = std::min(n, room);
        if (m < 1) continue;
        SpecStats st;
        generate_speculative(s, *d, pr, m, sp, spp, nullptr, &st);
        r.prompts++;
        r.rounds += st.rounds;
        r.tokens += st.gen_tokens_after_root;
        if (r.reached_by_depth.size() < st.reached_by_depth.size()) {
            r.reached_by_depth.resize(st.reached_by_depth.size());
            acc.resize(st.reached_by_depth.size());
        }
        for (size_t k = 0; k < st.reached_by_depth.size(); k++) {
            r.reached_by_depth[k] += st.reached_by_depth[k];
            acc[k] += st.accept_by_depth[k];
        }
    }
    r.seconds = now_seconds() - t0;
    r.tau = r.rounds ? (double)r.tokens / r.rounds : 1.0;
    for (size_t k = 0; k < acc.size(); k++)
        r.accept_by_depth.push_back(r.reached_by_depth[k] ? (double)acc[k] / r.reached_by_depth[k] : 0.0);
    return r;
}

static std::string rates(const std::vector<double>& v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); i++) o += strfmt("%s%.4f", i ? ", " : "", v[i]);
    return o + "]";
}

TrainEval evaluate_trained(const TrainLoopOptions& o, const DraftWeights& w, int threads) {
    double t0 = now_seconds();
    TrainEval e;
    Session s(o.model, o.tokenizer, threads, 0, 64);
    std::vector<Prompt> ps = load_prompts(o.eval_prompts);
    std::vector<std::vector<int>> prompts;
    e.chat = !o.eval_no_chat && !s.tok->spec().chat_template.empty();  // as beagle datagen does
    for (size_t i = 0; i < ps.size() && (int)prompts.size() < o.eval_n; i++)
        prompts.push_back(s.encode_prompt(ps[i].text, e.chat, ""));
    BEAGLE_CHECK(!prompts.empty(), "no evaluation prompts in '%s'", o.eval_prompts.c_str());
    BeagleDraftParams chain, tree;
    chain.tree = false;
    chain.gamma = o.gamma;
    tree.tree = true;
    tree.depth = o.depth;
    tree.topk = o.topk;
    tree.total_tokens = o.total_tokens;
    chain.concat = tree.concat = !o.eval_no_concat;
    e.chain = eval_acceptance(s, w, prompts, o.eval_tokens, chain);
    e.tree = eval_acceptance(s, w, prompts, o.eval_tokens, tree);
    e.seconds = now_seconds() - t0;
    if (!o.quiet)
        fprintf(stderr, "eval: %d prompts x %d tokens: tau chain %.3f (accept by depth %s), tree %.3f (%s)\n",
                e.tree.prompts, o.eval_tokens, e.chain.tau, rates(e.chain.accept_by_depth).c_str(), e.tree.tau,
                rates(e.tree.accept_by_depth).c_str());
    return e;
}

}  // namespace beagle
