// medusa_drafter.h: drafting with Medusa-1 heads (docs/method.md section 4b): after each round the drafter keeps
// the last committed position's true state f_p; a round runs the K heads on it once (medusa_layers.h) and
// builds a chain (each head's argmax, or a draw from its distribution) or a tree of the heads' top-k under the
// root, best-first by the summed log-probabilities of its path (the heads are independent), sized by the
// measured verify cost through the round policy as the other cost-aware trees.
#pragma once
#include <memory>
#include <vector>

#include "../model/draft.h"

#include "beagle_drafter.h"
#include "drafter.h"
#include "round_policy.h"
#include "session.h"

namespace beagle {

// w: a Medusa draft (DraftConfig::arch) that fits the session's target; fz: the target's final norm (the LM head
// is the target's stored one, or its reduced-vocabulary rows). The settings of p that apply: tree (false: a
// chain of min(gamma, K) tokens), depth (at most K), topk, total_tokens, verify_cost, auto_draft_cost. policy /
// owner: as make_beagle_drafter.
// The backend buffers of a MedusaDrafter for a Medusa draft of config c, by name with their bytes (`generate --plan`):
// the heads' weights and the final norm (f32), the last state, z, u, the final norm's output, the ones of SiLU, rstd
// and the heads' logits (a reduced vocabulary adds the target head's rows for it, in their stored dtype: not listed).
std::vector<MemLine> medusa_drafter_buffers(const DraftConfig& c);

std::unique_ptr<Drafter> make_medusa_drafter(const DraftWeights& w, const DraftFrozen& fz, Session& s,
                                             const BeagleDraftParams& p, std::shared_ptr<RoundPolicy> policy = nullptr,
                                             bool owner = true);

}  // namespace beagle
