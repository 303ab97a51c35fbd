// drafter.h: the interface between the speculative engine (speculative.cpp) and a drafter: each round
// the drafter proposes a token tree under the root, the target verifies it, and the drafter is told the
// accepted path and its true states. Drafters: lookup_drafter.cpp, beagle_drafter.cpp (made by drafters.h).
#pragma once
#include <vector>

#include "../core/common.h"

#include "sampling.h"
#include "tree.h"

namespace beagle {

class Drafter {
public:
    virtual ~Drafter() = default;
    virtual const char* name() const = 0;
    // The target wrote K/V and true states for `prompt` (states: prompt.size() x dim, host).
    virtual void begin(const std::vector<int>& prompt, const float* states) = 0;
    // `tree` holds only the root (the next token, not yet run through the target); `history` is
    // every committed token before it. Add candidates. `room` is the most nodes the tree may hold.
    virtual void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) = 0;
    // After verification: tree path[0] = root, path[1..] accepted nodes; states of those nodes
    // (path.size() x dim, host), which are now true states at the next positions.
    virtual void accept(const DraftTree& tree, const std::vector<int>& path, const float* path_states) = 0;
    // The engine's target forward of this round took `seconds` for T tokens (cost-aware drafters learn
    // their verify cost from it, see VerifyCost in verify_cost.h).
    virtual void observe_verify(int T, double seconds) {}
    // A round this drafter did not propose (mode auto ran another drafter, auto_drafter.h): the root and
    // the accepted path, n tokens, were committed with these true states (n x dim, host). A drafter
    // that keeps per-position state appends them here so that it stays in step with the target.
    virtual void accept_skipped(const float* states, int n) {
        fail("drafter %s cannot sit out a round (it keeps no way to catch up with %d committed tokens)", name(), n);
    }
    // The mode that proposed the last round (statistics: SpecStats::rounds_by_mode); name() unless a
    // drafter switches modes (auto).
    virtual const char* round_mode() const { return name(); }
};

}  // namespace beagle
