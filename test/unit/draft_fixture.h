// draft_fixture.h: the small random draft the draft tests share: a config of ragged sizes (every kernel
// tail: dim 40, 4 heads of 10 over 2 KV heads, FFN 56, vocabulary 77) and frozen tables drawn from a
// seeded generator (embedding N(0, 1), LM head N(0, 0.3^2), final norm 1 + N(0, 0.2^2), in that order).
#pragma once
#include "core/rng.h"
#include "model/draft.h"

inline beagle::DraftConfig ragged_draft_config(int arch) {
    beagle::DraftConfig c;
    c.arch = arch;
    c.dim = 40;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 10;
    c.ffn_dim = 56;
    c.vocab_size = 77;
    c.rope_theta = 10000.0f;
    return c;
}

inline beagle::DraftFrozen random_frozen(const beagle::DraftConfig& c, beagle::TrainRng& rng) {
    beagle::DraftFrozen fz;
    fz.vocab = c.vocab_size;
    fz.dim = c.dim;
    fz.embd.resize((size_t)c.vocab_size * c.dim);
    fz.lm_head.resize(fz.embd.size());
    fz.out_norm.resize(c.dim);
    for (float& x : fz.embd) x = (float)rng.normal();
    for (float& x : fz.lm_head) x = (float)(0.3 * rng.normal());
    for (float& x : fz.out_norm) x = (float)(1 + 0.2 * rng.normal());
    return fz;
}
