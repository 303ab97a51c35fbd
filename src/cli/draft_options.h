// draft_options.h: the drafting flags `beagle generate` and `beagle bench-sd` share (--gamma, --ngram,
// --depth, --topk, --lookup-skip, --draft-context, --draft-f32; generate adds --no-concat) and the drafter settings they
// give (BeagleDraftParams, for make_drafter).
#pragma once
#include "../decode/beagle_drafter.h"
#include "../io/json_write.h"
#include "args.h"

namespace beagle {

struct DraftOptions {
    long gamma = 5, ngram = 3, depth = 5, topk = 10, draft_threads = -1, draft_context = -1;
    double lookup_skip = 0.5;
    bool no_concat = false, draft_f32 = false;

    void declare(Args& a) {
        a.integer("--gamma", &gamma, "chain and lookup: tokens drafted per round");
        a.integer("--depth", &depth, "tree: draft depth (cost-aware trees: 1, 2 or this, whichever measures faster while generating)");
        a.integer("--topk", &topk, "tree: children per expanded node and nodes expanded per depth");
        a.integer("--ngram", &ngram, "lookup and hybrid: longest n-gram matched in the context");
        a.number("--lookup-skip", &lookup_skip, "hybrid: send a lookup match alone (no draft forward) when its first token's learnt\n"
                 "acceptance rate is at least this (> 1: never)");
        a.integer("--draft-context", &draft_context, "the draft attends to the last N true states only; -1 (default): its training\n"
                  "sequence length (the draft file's meta.seq_len; all if not recorded), 0: all");
        a.flag("--draft-f32", &draft_f32, "draft matrices in f32 as trained (default: a Q8_0 copy, 4x fewer bytes per step)");
        a.integer("--draft-threads", &draft_threads, "CPU threads of the draft model's forwards: N its own pool, 0 the target's -t;\n"
                  "-1 (default): the target's pool on 1 thread or all, whichever measures faster while generating");
    }

    // The flags' ranges, checked where the subcommand checks its own (cmd names it in the messages).
    void check(const char* cmd) const {
        if (gamma < 1 || gamma > 63) fail("%s: --gamma must be in 1..63, got %ld", cmd, gamma);
        if (depth < 1 || depth > 32) fail("%s: --depth must be in 1..32, got %ld", cmd, depth);
        if (topk < 1 || topk > 64) fail("%s: --topk must be in 1..64, got %ld", cmd, topk);
        if (ngram < 1) fail("%s: --ngram must be >= 1, got %ld", cmd, ngram);
        if (draft_context < -1 || draft_context > (1 << 24))
            fail("%s: --draft-context: expected -1, 0 or a number of states up to 2^24, found %ld", cmd, draft_context);
    }

    // The flags as given (bench-sd's report and the identity of a run it resumes).
    Json json() const {
        Json j;
        j["gamma"] = gamma, j["ngram"] = ngram, j["depth"] = depth, j["topk"] = topk, j["lookup_skip"] = lookup_skip;
        j["draft_context"] = draft_context, j["draft_threads"] = draft_threads;
        j["draft_f32"] = draft_f32, j["no_concat"] = no_concat;
        return j;
    }

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
        p.true_window = (int)draft_context;
        p.threads = (int)draft_threads;
        return p;
    }
};

}  // namespace beagle
