// speculative.h: the speculative decoding engine (SPEC sections 1, 3, 4). A Drafter proposes a
// token tree under the root (the target's last chosen token); ONE target forward verifies the whole
// tree with a tree mask over the prefix KV; the longest accepted path plus one target token is
// committed; the path's KV rows are compacted in place and the drafter is told the path's true
// states. Greedy acceptance is token-identical to plain greedy decoding (batch-invariant kernels);
// sampling uses per-node rejection with residual distributions, siblings tried in turn (accept.h).
// Drafters (drafter.h) come from make_drafter (drafters.h).
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "drafter.h"
#include "sampling.h"
#include "session.h"

namespace beagle {

struct SpecStats : GenStats {
    int rounds = 0;                      // verify passes
    int drafted = 0;                     // candidate nodes sent to verification
    std::vector<int> reached_by_depth;   // rounds in which depth d had at least one candidate
    std::vector<int> accept_by_depth;    // rounds in which a depth-d candidate was accepted
    double draft_s = 0, verify_s = 0;
    double tau() const { return rounds ? (double)gen_tokens_after_root / rounds : 1.0; }
    int gen_tokens_after_root = 0;       // tokens committed by verify rounds
};

struct SpecParams {
    int max_tree = 64;                   // most nodes per verify (root included)
    bool debug_break_residual = false;   // TESTS ONLY: wrong rejection rule, to show the test catches it (accept.h)
    bool learn_cost = true;              // pass forward timings to Drafter::observe_verify (tests with a
                                         // fixed cost model turn it off to stay deterministic)
};

// Speculative generation from a fresh cache (see Session::generate_plain for the contract).
std::string generate_speculative(Session& s, Drafter& d, const std::vector<int>& prompt, int n, const SamplingParams& sp,
                                 const SpecParams& spp, FILE* stream, SpecStats* st, std::vector<int>* out_ids = nullptr);

}  // namespace beagle
