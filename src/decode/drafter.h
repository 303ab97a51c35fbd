// drafter.h: the interface between the speculative engine (speculative.cpp) and a drafter: each round
// the drafter proposes a token tree under the root, the target verifies it, and the drafter is told the
// accepted path and its true states. Drafters: lookup_drafter.cpp, beagle_drafter.cpp (made by drafters.h).
#pragma once
#include <vector>

#include "../backend/ops.h"
#include "../core/common.h"

#include "sampling.h"
#include "tree.h"

namespace beagle {

class RoundPolicy;

class Drafter {
public:
    virtual ~Drafter() = default;
    virtual const char* name() const = 0;
    // The target wrote K/V and true states for `prompt` (states: prompt.size() x dim, host).
    virtual void begin(const std::vector<int>& prompt, const float* states) = 0;
    // begin() for a text that continues an earlier one (a chat's next turn): the target kept its K/V for
    // prompt[0, keep), which this drafter saw before as committed tokens (from an earlier begin / accept), and
    // wrote K/V and true states for the rest (states: prompt.size() - keep rows, host). The drafter drops what
    // it holds past position keep and appends the rest; the same drafts as begin() on the whole prompt.
    // keep 0 is begin(); a drafter that cannot keep a prefix says so.
    virtual void begin_cached(const std::vector<int>& prompt, int keep, const float* states) {
        if (keep == 0) return begin(prompt, states);
        fail("drafter %s cannot keep a cached prefix (%d tokens); start it afresh", name(), keep);
    }
    // `tree` holds only the root (the next token, not yet run through the target); `history` is
    // every committed token before it. Add candidates. `room` is the most nodes the tree may hold.
    virtual void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) = 0;
    // After verification: tree path[0] = root, path[1..] accepted nodes; states of those nodes
    // (path.size() x dim, host), which are now true states at the next positions.
    virtual void accept(const DraftTree& tree, const std::vector<int>& path, const float* path_states) = 0;
    // The same, with the states still on the backend: rows path[k] of `states` (tree.size() x dim, an
    // ops buffer: Llama::states_backend()). A drafter that runs on the same backend takes the rows
    // there (BeagleDrafter); this default brings the path's rows to the host for accept().
    virtual void accept_rows(const DraftTree& tree, const std::vector<int>& path, Ops& ops, const float* states,
                             int dim) {
        std::vector<float> host(path.size() * (size_t)dim);
        for (size_t k = 0; k < path.size(); k++) ops.download(&host[k * dim], states + (size_t)path[k] * dim, dim);
        accept(tree, path, host.data());
    }
    // The engine's target forward of this round took `seconds` for T tokens after `context` tokens, called
    // once per verify: the drafter hands it to its round policy, the one owner of the verify cost
    // (round_policy.h).
    virtual void observe_verify(int T, double seconds, int context) {}
    // Without a target (remote drafting whose server went away): run `root`, the last committed token,
    // through the draft alone; its predicted state stands in for the target's true state at root's
    // position (kept as a key for the next call). Returns the draft's greedy next token, or -1 if this
    // drafter cannot continue alone (lookup).
    virtual int draft_alone(int root) { return -1; }
    // A round this drafter did not propose (mode auto ran the other drafter, auto_drafter.h): the root and
    // the accepted path of `tree` were committed with these true states (path.size() x dim, host). A
    // drafter that keeps per-position state appends them here so that it stays in step with the target.
    virtual void accept_skipped(const DraftTree& tree, const std::vector<int>& path, const float* path_states) {
        fail("drafter %s cannot sit out a round (it keeps no way to catch up with %zu committed tokens)", name(),
             path.size());
    }
    // The round policy this drafter's rounds follow (round_policy.h): the engine's statistics read its
    // last choice (SpecStats::rounds_by_mode, draft_threads, draft_depth); nullptr: the mode is name().
    virtual RoundPolicy* policy() const { return nullptr; }
};

}  // namespace beagle
