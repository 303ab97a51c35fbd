// draft_fixture.h: the small random draft the draft tests share: a config of ragged sizes (every kernel
// tail: dim 40, 4 heads of 10 over 2 KV heads, FFN 56, vocabulary 77) and frozen tables drawn from a
// seeded generator (embedding N(0, 1), LM head N(0, 0.3^2), final norm 1 + N(0, 0.2^2), in that order); and the
// small tree the self-attention drafts' tests run (draft_tree_child).
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "model/draft.h"

// The bytes of a file ("" if it cannot be read): the draft-file tests look into the files they write.
inline std::string slurp(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    std::string s;
    if (!f) return s;
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    fclose(f);
    return s;
}

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

// A small tree on a draft holding the first P true state rows (rows: state_width() floats each): the root
// (token tokens[P] at P), then two siblings a, b at P + 1 in one forward (both) or b alone, keep_pred of b's row,
// then b's child cc at P + 2 seeing the root and b. Returns b's f^ and the child's f^ (dim floats each): equal
// with and without the sibling when keep_pred moves the kept row right (self-attention drafts: EAGLE, MoA).
inline std::pair<std::vector<float>, std::vector<float>> draft_tree_child(const beagle::DraftWeights& dw,
                                                                           const beagle::DraftFrozen& fz, beagle::Ops& ops,
                                                                           int ctx, const float* rows, const int* tokens,
                                                                           int P, int a, int b, int cc, bool both) {
    const int dim = dw.cfg.dim;
    beagle::Draft t(dw, fz, ops, ctx, 8, 4);
    t.add_true_states(rows, P, tokens);
    int q0 = P, z = 0;
    t.forward(&tokens[q0], &q0, 1, nullptr, 1, nullptr, nullptr);
    int root = t.keep_pred(&z, 1);
    std::vector<int> toks = both ? std::vector<int>{a, b} : std::vector<int>{b};
    std::vector<int> pos(toks.size(), P + 1);
    std::vector<uint64_t> m1(toks.size(), 1ULL << root);
    std::vector<float> sib(toks.size() * dim);
    t.forward(toks.data(), pos.data(), (int)toks.size(), m1.data(), 1, sib.data(), nullptr);
    int keep = both ? 1 : 0;
    int rb = t.keep_pred(&keep, 1);
    uint64_t m2 = (1ULL << root) | (1ULL << rb);
    int q2 = P + 2;
    std::vector<float> out(dim);
    t.forward(&cc, &q2, 1, &m2, 1, out.data(), nullptr);
    return std::make_pair(std::vector<float>(sib.end() - dim, sib.end()), out);
}
