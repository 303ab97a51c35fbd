// drafters.h: make_drafter, the one set-up of a speculative mode's drafter, used by `beagle generate`,
// `beagle bench-sd`, the trainer's acceptance evaluation and the tests: the draft model checked against
// the target, the target's frozen tensors, then the drafter the mode names.
#pragma once
#include <memory>
#include <string>

#include "../model/draft.h"
#include "auto_drafter.h"
#include "beagle_drafter.h"
#include "drafter.h"
#include "lookup_drafter.h"
#include "medusa_drafter.h"
#include "model_drafter.h"
#include "session.h"

namespace beagle {

// load_draft(path), checked against the session's target (check_draft_fits_target): a draft that cannot
// run here fails before anything else is set up.
DraftWeights load_draft_for(const Session& s, const std::string& path);

// mode "lookup": prompt lookup (make_lookup_drafter) with n-gram p.lookup_ngram, p.gamma and
// p.verify_cost; no draft model (w may be null).
// mode "chain", "tree" or "hybrid": the Beagle draft w (draft_name names it in errors), checked against
// the session's target (check_draft_fits_target), drafting with the target's frozen tensors
// (frozen_from_target) and p; the mode sets p.tree, hybrid keeps p.lookup_ngram (>= 1), chain and tree
// clear it, and chain clears p.verify_cost (it always drafts p.gamma tokens). A Medusa draft (DraftConfig::arch)
// gets make_medusa_drafter: chain, or its heads' tree for tree and hybrid (no lookup candidates merged in).
// mode "auto" (make_auto_drafter): hybrid and cost-aware lookup under one round policy (round_policy.h),
// per round the one that pays here; needs the draft w and p.verify_cost. Every drafter made here has
// its round policy (Drafter::policy). Throws Error for an unknown mode, a missing draft, or a draft that does not fit.
std::unique_ptr<Drafter> make_drafter(Session& s, const std::string& mode, BeagleDraftParams p,
                                      const DraftWeights* w = nullptr, const std::string& draft_name = "");

// An independent draft model (-md): load_model(path), checked to share the session's vocabulary
// (check_draft_vocab). One loaded file serves every drafter made from it (the server's slots).
std::shared_ptr<const ModelFile> load_draft_model_for(const Session& s, const std::string& path);
// The modes with an independent draft model instead of a Beagle draft (make_model_drafter): "chain",
// "tree" (p.tree set by the mode), and "auto": the draft model's cost-aware tree and cost-aware lookup under
// one round policy, as mode auto with a Beagle draft (needs p.verify_cost). Throws Error for another mode.
std::unique_ptr<Drafter> make_drafter(Session& s, const std::string& mode, BeagleDraftParams p,
                                      std::shared_ptr<const ModelFile> draft_model);

}  // namespace beagle
