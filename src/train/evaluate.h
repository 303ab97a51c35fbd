// evaluate.h: a trained draft's acceptance on held-out prompts, measured with the speculative
// decoding engine itself (greedy; chain and EAGLE-2 tree): tau and the per-depth acceptance. Called by
// run_train at the end of training (train_loop.cpp) and by the tests.
#pragma once
#include <vector>

#include "../decode/beagle_drafter.h"
#include "../decode/speculative.h"
#include "../model/draft.h"

namespace beagle {

// Acceptance on held-out prompts, pooled over the prompts.
struct AcceptEval {
    double tau = 0;                        // tokens committed per verify pass (after the root)
    int rounds = 0, tokens = 0, prompts = 0;
    std::vector<double> accept_by_depth;   // depth d+1: accepted / reached (conditional rate)
    std::vector<int> reached_by_depth;
    double seconds = 0;
};

// Greedy speculative generation of n tokens after each prompt (token ids, BOS included) with the
// draft; statistics pooled.
AcceptEval eval_acceptance(Session& s, const DraftWeights& dw, const std::vector<std::vector<int>>& prompts, int n,
                           const BeagleDraftParams& p);

// run_train's evaluation: the first o.eval_n prompts of o.eval_prompts (in the chat template if the
// tokenizer has one, as beagle datagen, unless o.eval_no_chat), o.eval_tokens tokens each, with a chain
// (o.gamma) and a tree (o.depth, o.topk, o.total_tokens). Prints a summary unless o.quiet.
struct TrainEval {
    AcceptEval chain, tree;
    bool chat = false;      // prompts went through the chat template
    double seconds = 0;     // wall time, target load included
};
struct TrainLoopOptions;
TrainEval evaluate_trained(const TrainLoopOptions& o, const DraftWeights& w, int threads);

}  // namespace beagle
