// auto_drafter.h: mode auto, the default of `beagle generate -d`: each round either runs the Beagle
// draft (mode hybrid: the cost-aware tree with prompt-lookup candidates) or the cost-aware prompt lookup
// alone, which sends nothing (a plain decode step) when no match is worth its verify cost. The round
// policy (round_policy.h) chooses by what each kind of round has bought on this machine.
#pragma once
#include <memory>

#include "drafter.h"
#include "round_policy.h"

namespace beagle {

// A switch between two drafters that share `policy` (with its lookup arm on): per round the policy's
// choice runs one of them; the one that sits the round out is told its tokens and true states
// (Drafter::accept_skipped), so the draft's keys always cover the whole committed sequence and greedy
// output is unchanged. The switch owns the round: it asks the policy to choose, passes it every verify
// timing, and reports the round's outcome.
std::unique_ptr<Drafter> make_auto_drafter(std::unique_ptr<Drafter> draft, std::unique_ptr<Drafter> lookup,
                                           std::shared_ptr<RoundPolicy> policy);

}  // namespace beagle
