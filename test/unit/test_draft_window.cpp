// test_draft_window.cpp: Draft::set_true_window (the draft's queries see the last n true states only;
// `--draft-context`), for a Beagle and an EAGLE draft:
//  1. a window of n reads nothing before the last n true states: a draft whose earlier states (and tokens)
//     are replaced by other random values gives the same f^ and logits, bit for bit (memcmp), for a root
//     query and for a child that also sees a predicted row; without the window they differ (so the states
//     do matter, and the check can fail);
//  2. a window as large as the states, or 0, is the draft without one (memcmp);
//  3. draft_trained_seq_len: the file's meta.seq_len, 0 when absent, Error when malformed.
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/common.h"
#include "core/rng.h"
#include "model/draft.h"
#include "draft_fixture.h"
#include "testlib.h"

using namespace beagle;

struct Out {
    std::vector<float> fh, logits;  // root query, then its child
    bool operator==(const Out& o) const {
        return fh.size() == o.fh.size() && !memcmp(fh.data(), o.fh.data(), fh.size() * 4) &&
               logits.size() == o.logits.size() && !memcmp(logits.data(), o.logits.data(), logits.size() * 4);
    }
};

// N true states, then a root query at position N and its child at N + 1 (which sees the root's prediction).
static Out run(const DraftWeights& dw, const DraftFrozen& fz, Ops& ops, const std::vector<float>& states,
               const std::vector<int>& tokens, int N, int window) {
    const DraftConfig& c = dw.cfg;
    Draft d(dw, fz, ops, N + 4, 8, 4);
    d.set_true_window(window);
    d.add_true_states(states.data(), N, tokens.data());
    Out o;
    o.fh.resize(2 * (size_t)c.dim);
    o.logits.resize(2 * (size_t)c.head_rows());
    int p0 = N, p1 = N + 1, r0 = 0;
    d.forward(&tokens[p0], &p0, 1, nullptr, 1, o.fh.data(), o.logits.data());
    const uint64_t bits = 1ULL << d.keep_pred(&r0, 1);
    d.forward(&tokens[p1], &p1, 1, &bits, 1, o.fh.data() + c.dim, o.logits.data() + c.head_rows());
    return o;
}

static void check_arch(int arch, Ops& ops) {
    const char* name = draft_arch_name(arch);
    const DraftConfig c = ragged_draft_config(arch);
    DraftWeights dw;
    dw.init_random(c, 7);
    TrainRng rng(13);
    const DraftFrozen fz = random_frozen(c, rng);
    const int N = 20, W = 7;
    std::vector<int> tokens(N + 2);
    std::vector<float> states((size_t)N * c.dim);
    for (int& t : tokens) t = rng.below(c.vocab_size);
    for (float& x : states) x = (float)rng.normal();
    // the same sequence with every state and token a window of W cannot reach replaced: the last W true
    // keys are made of states N - W .. N - 1 (Beagle) or of states N - W - 1 .. N - 2 with tokens N - W ..
    // N - 1 (EAGLE: key p = fc(E(t_p), f_{p-1})), so rows before N - W - 1 are outside either
    std::vector<int> tokens2 = tokens;
    std::vector<float> states2 = states;
    for (int p = 0; p < N - W - 1; p++) {
        tokens2[p] = rng.below(c.vocab_size);
        for (int j = 0; j < c.dim; j++) states2[(size_t)p * c.dim + j] = (float)rng.normal();
    }
    const Out a = run(dw, fz, ops, states, tokens, N, W), b = run(dw, fz, ops, states2, tokens2, N, W);
    CHECK(a == b, "%s: a window of %d read a state or token before the last %d", name, W, W);
    const Out a0 = run(dw, fz, ops, states, tokens, N, 0), b0 = run(dw, fz, ops, states2, tokens2, N, 0);
    CHECK(!(a0 == b0), "%s: without a window the early states changed nothing (the check above cannot fail)", name);
    CHECK(!(a == a0), "%s: a window of %d of %d states changed nothing", name, W, N);
    CHECK(run(dw, fz, ops, states, tokens, N, N) == a0, "%s: a window of all %d states != no window", name, N);
    CHECK(run(dw, fz, ops, states, tokens, N, N + 5) == a0, "%s: a window past the states != no window", name);
}

int main() {
    CpuOps ops(2);
    check_arch(ARCH_BEAGLE, ops);
    check_arch(ARCH_EAGLE, ops);

    DraftWeights w;
    CHECK(draft_trained_seq_len(w) == 0, "no meta.seq_len: 0 (all true states)");
    w.meta = {{"steps", "10"}, {"seq_len", "512"}};
    CHECK(draft_trained_seq_len(w) == 512, "meta.seq_len 512: got %d", draft_trained_seq_len(w));
    for (const char* bad : {"", "x", "512x", "1", "-3", "99999999999"}) {
        w.meta = {{"seq_len", bad}};
        CHECK_THROWS(draft_trained_seq_len(w), "draft meta key 'seq_len': expected an integer in [2, 16777216]");
    }
    return test_summary("test_draft_window");
}
