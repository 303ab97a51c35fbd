// draft_options.h: the drafting flags `beagle generate` and `beagle bench-sd` share (--gamma, --ngram,
// --depth, --topk, --lookup-skip, --draft-f32, --no-concat) and the drafter settings they give
// (BeagleDraftParams, for make_drafter). Each command declares the flags with its own help text.
#pragma once
#include "../decode/beagle_drafter.h"

namespace beagle {

struct DraftOptions {
    long gamma = 5, ngram = 3, depth = 5, topk = 10;
    double lookup_skip = 0.5;
    bool no_concat = false, draft_f32 = false;

    // Every mode's settings; the verify cost and a numeric --total-tokens are the caller's.
    BeagleDraftParams params() const {
        BeagleDraftParams p;
        p.gamma = (int)gamma;
        p.lookup_ngram = (int)ngram;
        p.lookup_skip = lookup_skip;
        p.depth = (int)depth;
        p.topk = (int)topk;
        p.concat = !no_concat;
        p.q8 = !draft_f32;
        return p;
    }
};

}  // namespace beagle
