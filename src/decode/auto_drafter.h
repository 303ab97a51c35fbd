// auto_drafter.h: mode auto, the default of `beagle generate -d`: each round either runs the Beagle
// draft (mode hybrid: the cost-aware tree with prompt-lookup candidates) or the cost-aware prompt lookup
// alone, which sends nothing (a plain decode step) when no match is worth its verify cost. The choice
// follows what each round of the draft actually bought on this machine, so a draft that does not pay
// for itself here costs almost nothing.
#pragma once
#include <memory>
#include <vector>

#include "drafter.h"

namespace beagle {

// Rule. A round's cost in decode steps is cost[T] (the verify cost table, corrected online like the
// drafters' own, verify_cost.h) plus, for a draft round, its drafting time over the time of a decode
// step (t1, estimated from every verify pass as seconds / cost[T]). Draft rounds keep decayed sums
// (weight 1/16 per round) of tokens committed and of cost; their ratio g is the draft's tokens per
// step. Lookup rounds (plain steps included) keep the same sums, ratio g_L. The draft runs when
// g > b = max(1, g_L) (it beats both plain decoding, 1 token per step, and lookup alone; g_L counts
// from the 4th lookup round on, b = 1 before), during its first 4 rounds, and as a probe after `gap`
// rounds without it: a probe is 4 draft rounds in a row (a probe of one round moved g by 1/16 of its
// worth, so a draft turned off by a bad stretch stayed off for the rest of the text); gap 4, doubled
// after each probe that leaves g <= b, up to 64; back to 4 once g > b. Every other round is the lookup
// drafter's.
// The drafter that sits a round out is told its tokens and true states (Drafter::accept_skipped), so
// the draft's keys always cover the whole committed sequence and greedy output is unchanged.
// draft_cost >= 0: a draft round costs this many decode steps instead of its measured time (tests:
// reproducible choices without timings).
std::unique_ptr<Drafter> make_auto_drafter(std::unique_ptr<Drafter> draft, std::unique_ptr<Drafter> lookup,
                                           std::vector<double> verify_cost, double draft_cost = -1);

}  // namespace beagle
