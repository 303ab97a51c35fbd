// speculative.h: the speculative decoding engine (SPEC sections 1, 3, 4). A Drafter proposes a
// token tree under the root (the target's last chosen token); ONE target forward verifies the whole
// tree with a tree mask over the prefix KV; the longest accepted path plus one target token is
// committed; the path's KV rows are compacted in place and the drafter is told the path's true
// states. Greedy acceptance is token-identical to plain greedy decoding (batch-invariant kernels);
// sampling uses per-node rejection with residual distributions, siblings tried in turn.
#pragma once
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sampling.h"
#include "session.h"
#include "tree.h"

namespace beagle {

// The verify cost table of a cost-aware drafter: cost(T) = time of a target forward of T tokens in
// decode steps, measured at start-up (measure_verify_cost), then corrected online from the engine's
// own forward timings (observe): t1 = mean of the plain steps (T = 1) seen, r = mean of
// (t_T / t1 - 1) / (table[T] - 1) over verify passes of T >= 2 tokens (each clamped to [1/4, 4];
// running means of the first 32, then exponential with weight 1/32; r starts at 1 and waits for 4
// plain steps), and cost(T) = 1 + r (table[T] - 1). Start-up timing repeats
// each T in place; inside generation a verify of 2-4 tokens was measured 20-40% dearer.
class VerifyCost {
public:
    VerifyCost() = default;
    explicit VerifyCost(std::vector<double> table) : table_(std::move(table)) {}
    bool empty() const { return table_.empty(); }
    int max_tokens() const { return (int)table_.size() - 1; }  // cost(T) defined for T = 1..max_tokens()
    double operator[](int T) const { return T <= 1 ? 1.0 : 1.0 + r_ * (table_[T] - 1.0); }
    double correction() const { return r_; }
    void observe(int T, double seconds);

private:
    std::vector<double> table_;
    double t1_ = 0, r_ = 1.0;
    int n1_ = 0, nr_ = 0;
};

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
    // their verify cost from it, see VerifyCost).
    virtual void observe_verify(int T, double seconds) {}
};

// Prompt lookup: the latest earlier occurrence in ctx of its last n-gram, n = ngram .. 1 (longest
// first). Returns the matched n (0: none) and sets *from: ctx[from ..] continues the match (from <
// ctx.size(), so at least one token).
int find_ngram(const std::vector<int>& ctx, int ngram, int* from);

// Acceptance rates of lookup candidates per (matched n-gram length m, depth k): the fraction of the
// times depth k was reached (its parent accepted) that its candidate was accepted; prior 1 of 2.
class LookupRates {
public:
    LookupRates(int ngram, int depth) : K_(depth + 1), reached_((size_t)(ngram + 1) * (depth + 1), 2.0),
                                        accepted_(reached_.size(), 1.0) {}
    int max_depth() const { return K_ - 1; }
    double rate(int m, int k) const { return accepted_[at(m, k)] / reached_[at(m, k)]; }
    void count(int m, int k, bool accepted) {
        reached_[at(m, k)] += 1;
        accepted_[at(m, k)] += accepted ? 1 : 0;
    }
    // One verify of a chain sent as tree nodes chain[0 ..] (depths 1, 2, ...): depth k was reached
    // iff depth k - 1 was accepted, and accepted iff the accepted path's node k is chain[k - 1].
    void count_chain(int m, const std::vector<int>& chain, const std::vector<int>& path) {
        for (size_t k = 1; k <= chain.size(); k++) {
            const bool hit = path.size() > k && path[k] == chain[k - 1];
            count(m, (int)k, hit);
            if (!hit) break;
        }
    }

private:
    int K_;
    std::vector<double> reached_, accepted_;
    size_t at(int m, int k) const { return (size_t)m * K_ + k; }
};

// Prompt lookup (n-gram) drafting: no model; the continuation of the latest earlier occurrence of
// the context's last n-gram (n = ngram .. 1) becomes a chain of up to `gamma` tokens. With a
// verify cost table (measure_verify_cost, --total-tokens auto) each round sends only the first n
// tokens of it that maximise the expected tokens per unit of cost, from the acceptance rates seen
// so far per (matched n-gram length, depth); n = 0 is a plain step.
std::unique_ptr<Drafter> make_lookup_drafter(int ngram, int gamma, std::vector<double> verify_cost = {});

// Drafting with a Beagle draft model (beagle_drafter.cpp).
struct BeagleDraftParams {
    bool tree = true;        // false: chain
    int gamma = 5;           // chain length
    int depth = 5, topk = 10, total_tokens = 60;  // EAGLE-2 dynamic tree
    bool concat = true;      // draft keys: true states + own predictions (false: true states only)
    int lookup_ngram = 0;    // tree only, > 0 (hybrid): the prompt-lookup continuation of the context's last
                             // n-gram (n <= lookup_ngram) joins the candidates, valued by its learnt rates
    double lookup_skip = 0.5;  // hybrid: a match whose first token's learnt acceptance rate is at least this
                               // is sent alone, without running the draft (> 1: always run the draft)
    bool q8 = true;          // draft matrices from a Q8_0 copy (Draft::use_q8_weights); false: the f32 weights
    // Non-empty (--total-tokens auto): verify_cost[T] = cost of verifying T tokens in decode steps
    // (measure_verify_cost). Each round then keeps the best-ranked n candidates that maximise the
    // expected tokens per unit of cost, (1 + a sum_{i<n} exp(score_i)) / verify_cost[n + 1], with
    // a the draft's calibration (accepted / predicted, learnt online); n = 0 is a plain decode
    // step. Depths whose frontier cannot pay for a node are not expanded. total_tokens is ignored.
    std::vector<double> verify_cost;
};
struct DraftWeights;
struct DraftFrozen;
std::unique_ptr<Drafter> make_beagle_drafter(const DraftWeights& w, const DraftFrozen& fz, Session& s,
                                             const BeagleDraftParams& p);

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
    bool debug_break_residual = false;   // TESTS ONLY: wrong rejection rule, to show the test catches it
    bool learn_cost = true;              // pass forward timings to Drafter::observe_verify (tests with a
                                         // fixed cost model turn it off to stay deterministic)
};

// One request's speculative decoding a round at a time, on the Llama's current sequence
// (Llama::use_seq): generate_speculative runs it to the end; the server interleaves requests.
// begin() prefills and samples the first token; each step() drafts under the last committed token,
// verifies, accepts and appends the committed tokens (accepted path, then the target's bonus token)
// to *out. The caller stops wherever it likes (stop token, length); the drafter was told the whole path.
class SpecDecoder {
public:
    SpecDecoder(Session& s, Drafter& d, const SamplingParams& sp, const SpecParams& spp, SpecStats* st);
    int begin(const std::vector<int>& prompt);  // fresh cache; returns the first token; st->prefill_s
    bool step(std::vector<int>* out);           // false: the context is full (nothing appended)
    double decode_start() const { return t1_; } // clock after the prefill
    // step() in parts, for a caller that verifies several requests' trees in one target forward
    // (Llama::forward_segments): draft() builds the tree (false: the context is full); the caller runs
    // tree().token at positions() with mask() (null: the root alone, causal) on this request's
    // sequence, then commit() takes that forward's logits and states (tree().size() rows each).
    bool draft();
    const DraftTree& tree() const { return tree_; }
    const std::vector<int>& positions() const { return pos_; }
    const uint64_t* mask() const { return tree_.size() > 1 ? mask_.data() : nullptr; }
    void commit(const float* logits, const float* states, double forward_s, std::vector<int>* out);

private:
    Session& s_;
    Drafter& d_;
    SamplingParams sp_;
    SpecParams spp_;
    SpecStats* st_;
    Sampler sampler_;
    std::vector<int> history_;  // committed tokens before root_
    int root_ = -1, n0_ = 0;
    double t1_ = 0, tb_ = 0;
    DraftTree tree_;
    std::vector<uint64_t> mask_;
    std::vector<int> pos_;
    std::vector<float> vlogits_, vstates_, path_states_;
};

// The commit loop of a generation: emits `first`, then the tokens of each step() in order, until a
// stop token, n tokens, or step() returns false (context full: st->stopped_ctx). Text is decoded
// after `prev` and streamed to `stream` if not null; ids go to *out_ids if given.
std::string run_commits(Session& s, int prev, int first, int n, const std::function<bool(std::vector<int>*)>& step,
                        FILE* stream, GenStats* st, std::vector<int>* out_ids);

// Speculative generation from a fresh cache (see Session::generate_plain for the contract).
std::string generate_speculative(Session& s, Drafter& d, const std::vector<int>& prompt, int n, const SamplingParams& sp,
                                 const SpecParams& spp, FILE* stream, SpecStats* st, std::vector<int>* out_ids = nullptr);

// Seconds of one verify pass of T tokens (tokens[0..T) as a chain, with its tree mask) after the
// model's current n_past, best of `reps`; the cache is truncated back after each. T <= max_batch.
double time_verify(Llama& m, const int* tokens, int T, int reps);

// --total-tokens auto: times target forwards of T tokens after a context of up to 160 tokens on this
// machine (T on a grid up to max_nodes; 5 interleaved sweeps, the median per T; interpolated linearly,
// made non-decreasing) and returns cost[T] = time(T) / time(1) for T = 0..cap (cost[0] unused). The
// grid stops at the first T costing max_commit decode steps or more (a round commits at most
// max_commit tokens: depth + 1, gamma + 1). Leaves the cache empty.
std::vector<double> measure_verify_cost(Session& s, int max_nodes, int max_commit);

// JSON stats object (one line) for --json, plain or speculative.
std::string spec_stats_json(const char* mode, const SpecStats& st, int threads);

}  // namespace beagle
