// drafters.cpp: make_drafter (drafters.h): mode name -> drafter, with the draft checked against the
// target; load_draft_for, load_draft_model_for. Called by generate, bench-sd, serve, the trainer's evaluation and tests.
#include "drafters.h"

#include "../core/common.h"
#include "../model/draft.h"

namespace beagle {

DraftWeights load_draft_for(const Session& s, const std::string& path) {
    DraftWeights w = load_draft(path);
    check_draft_fits_target(w.cfg, s.mf->config, s.tok->spec(), path);
    return w;
}

static std::unique_ptr<Drafter> make_draft(Session& s, const std::string& mode, BeagleDraftParams p,
                                           const DraftWeights* w, const std::string& draft_name,
                                           std::shared_ptr<RoundPolicy> policy);

// Mode auto: the draft side `draft(policy)` and cost-aware lookup under one round policy with a lookup arm.
template <class MakeDraft>
static std::unique_ptr<Drafter> make_auto(const BeagleDraftParams& p, MakeDraft draft) {
    if (p.verify_cost.empty()) fail("mode auto needs the measured verify cost (--total-tokens auto)");
    RoundPolicy::Setup setup;
    setup.verify_cost = p.verify_cost;
    setup.draft_cost = p.auto_draft_cost;
    setup.lookup_arm = true;
    auto policy = std::make_shared<RoundPolicy>(setup);
    return make_auto_drafter(draft(policy), make_lookup_drafter(p.lookup_ngram, p.gamma, policy, false), policy);
}

std::unique_ptr<Drafter> make_drafter(Session& s, const std::string& mode, BeagleDraftParams p, const DraftWeights* w,
                                      const std::string& draft_name) {
    if (mode == "lookup") return make_lookup_drafter(p.lookup_ngram, p.gamma, p.verify_cost);
    if (mode == "auto")  // the hybrid draft
        return make_auto(p, [&](std::shared_ptr<RoundPolicy> policy) { return make_draft(s, "hybrid", p, w, draft_name, policy); });
    return make_draft(s, mode, p, w, draft_name, nullptr);
}

std::shared_ptr<const ModelFile> load_draft_model_for(const Session& s, const std::string& path) {
    std::shared_ptr<const ModelFile> mf = load_model(path);
    check_draft_vocab(*mf, *s.tok, s.mf->path);
    return mf;
}

std::unique_ptr<Drafter> make_drafter(Session& s, const std::string& mode, BeagleDraftParams p,
                                      std::shared_ptr<const ModelFile> draft_model) {
    if (mode != "chain" && mode != "tree" && mode != "auto")
        fail("mode %s does not take a draft model (-md): expected chain, tree or auto", mode.c_str());
    p.tree = mode != "chain";
    if (!p.tree) p.verify_cost.clear();  // a chain drafts gamma tokens, whatever they cost
    if (mode == "auto")  // the draft model's cost-aware tree
        return make_auto(p, [&](std::shared_ptr<RoundPolicy> policy) { return make_model_drafter(draft_model, s, p, policy, false); });
    return make_model_drafter(draft_model, s, p);
}

// The Beagle drafter of mode chain, tree or hybrid (policy: shared with mode auto's switch, or null).
static std::unique_ptr<Drafter> make_draft(Session& s, const std::string& mode, BeagleDraftParams p,
                                           const DraftWeights* w, const std::string& draft_name,
                                           std::shared_ptr<RoundPolicy> policy) {
    if (mode != "chain" && mode != "tree" && mode != "hybrid")
        fail("unknown speculative mode '%s' (expected lookup, chain, tree, hybrid or auto)", mode.c_str());
    if (!w) fail("mode %s needs a draft model (-d)", mode.c_str());
    check_draft_fits_target(w->cfg, s.mf->config, s.tok->spec(), draft_name);
    p.tree = mode != "chain";
    if (!p.tree) p.verify_cost.clear();  // a chain drafts gamma tokens, whatever they cost
    if (mode == "hybrid") BEAGLE_CHECK(p.lookup_ngram >= 1, "--ngram must be >= 1, got %d", p.lookup_ngram);
    else p.lookup_ngram = 0;
    const DraftFrozen fz = frozen_from_target(*s.mf, false);  // out_norm only: the drafter uses the target's
                                                              // stored embedding and LM head
    if (w->cfg.arch == ARCH_MEDUSA) {  // its heads: a chain, or their tree (hybrid: the tree without lookup's chain)
        p.tree = mode != "chain";
        return make_medusa_drafter(*w, fz, s, p, policy, !policy);
    }
    return make_beagle_drafter(*w, fz, s, p, policy, !policy);
}

}  // namespace beagle
