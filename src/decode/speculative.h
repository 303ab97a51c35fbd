// speculative.h: the speculative decoding engine (docs/method.md). A Drafter proposes a token tree
// under the root (the target's last chosen token); ONE target forward verifies the whole tree with a
// tree mask over the prefix KV; the longest accepted path plus one target token is committed; the
// path's KV rows are compacted in place and the drafter is told the path's true states. Greedy
// acceptance is token-identical to plain greedy decoding (batch-invariant kernels); sampling uses
// per-node rejection with residual distributions, siblings tried in turn (accept.h). Drafters
// (drafter.h) come from make_drafter (drafters.h).
#pragma once
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../backend/buf_alloc.h"
#include "accept.h"
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
    // the drafter's round policy's choice of each round (RoundPolicy::round_mode, round_threads, round_depth)
    std::map<std::string, int> rounds_by_mode;  // the mode of each round (auto switches)
    std::map<std::string, int> draft_threads;   // the thread arm of the rounds that drafted ("1", "all")
    std::map<std::string, int> draft_depth;     // the chosen depth of the rounds that drafted (cost-aware trees)
};

struct SpecParams {
    int max_tree = 64;                   // most nodes per verify (root included)
    bool learn_cost = true;              // pass forward timings to Drafter::observe_verify, its round policy's
                                         // (tests with a fixed cost model turn it off to stay deterministic)
};

// Sees each verify's result on the host: its tree, the committed path (node indices, root first) and
// the verify's logits (tree.size() rows of V floats; row k: the target's distribution after node k).
class VerifyObserver {
public:
    virtual ~VerifyObserver() = default;
    virtual void verified(const DraftTree& tree, const std::vector<int>& path, const float* logits, int V) = 0;
};

// The engine's acceptance, apart from SpecParams. rule: the walk of a sampled tree (null: accept_path;
// a chain drawn on the backend is then accepted there, by accept_chain, the same walk); a rule given
// walks every sampled tree over its rows. observer (null: none): with one, every verify's logits come
// to the host (otherwise they stay on the backend) and it sees each verify before the drafter does.
// test_spec_sampling passes a wrong rule and test_spec_exact an observer of the rows.
struct Acceptance {
    AcceptRule rule = nullptr;
    VerifyObserver* observer = nullptr;
};

// One request's speculative decoding a round at a time, on the Llama's current sequence
// (Llama::use_seq): generate_speculative runs it to the end; the server interleaves requests.
// begin() prefills and samples the first token; each step() drafts under the last committed token,
// verifies, accepts and appends the committed tokens (accepted path, then the target's bonus token)
// to *out. The caller stops wherever it likes (stop token, length); the drafter was told the whole path.
class SpecDecoder {
public:
    SpecDecoder(Session& s, Drafter& d, const SamplingParams& sp, const SpecParams& spp, SpecStats* st,
                const Acceptance& acc = Acceptance());
    // Fresh cache, or (keep > 0, Resume::keep) one whose first `keep` rows hold prompt[0, keep) from the
    // last text this decoder's drafter saw: only the rest is prefilled, the drafter keeps that prefix
    // (Drafter::begin_cached). Returns the first token; st->prefill_s.
    int begin(const std::vector<int>& prompt, int keep = 0);
    // begin() for a caller that prefilled `prompt` itself on this sequence (the server, in pieces between
    // other requests' rounds): the last row's logits, the states of rows keep.. (prompt.size() - keep of
    // them), the seconds it took.
    int begin_prefilled(const std::vector<int>& prompt, const float* last_logits, const float* states, double prefill_s,
                        int keep = 0);
    // The tokens whose K/V the target's cache holds: the prompt, then each round's root and accepted path.
    const std::vector<int>& cache_ids() const { return history_; }
    bool step(std::vector<int>* out);           // false: the context is full (nothing appended)
    double decode_start() const { return t1_; } // clock after the prefill
    // step() in parts, for a caller that verifies several requests' trees in one target forward
    // (Llama::forward_segments): draft() builds the tree (false: the context is full); the caller runs
    // tree().token at positions() with mask() (null: the root alone, causal) on this request's
    // sequence, then commit() takes that forward's logits and states (tree().size() rows each).
    // propose false: the root alone, the drafter not asked (a server batch's plain round); at commit
    // it is told the committed token and true state as a round it sat out (Drafter::accept_skipped).
    bool draft(bool propose = true);
    const DraftTree& tree() const { return tree_; }
    const std::vector<int>& positions() const { return pos_; }
    const uint64_t* mask() const { return tree_.size() > 1 ? mask_.data() : nullptr; }
    void commit(const float* logits, const float* states, double forward_s, std::vector<int>* out);

private:
    // After acceptance: compact the target's KV to the path, statistics, commit the tokens, hand the
    // path's states to the drafter (host rows of `states`, or on_backend: the backend buffer's rows).
    // vlogits: the verify's logits on the host (nullptr: they stayed on the backend), for the observer
    void finish(const std::vector<int>& path, int bonus, const float* vlogits, const float* states, bool on_backend,
                std::vector<int>* out);
    void verified(double forward_start);
    std::vector<int> accept_backend_chain(double forward_start, int* bonus);
    void host_q();

private:
    Session& s_;
    Drafter& d_;
    SamplingParams sp_;
    SpecParams spp_;
    Acceptance acc_;
    SpecStats* st_;
    Sampler sampler_;
    std::vector<int> history_;  // committed tokens before root_
    int root_ = -1, n0_ = 0;
    bool skipped_ = false;  // this round's tree was not the drafter's (draft(false))
    double t1_ = 0, tb_ = 0;
    DraftTree tree_;
    std::vector<uint64_t> mask_;
    std::vector<int> pos_;
    std::vector<float> vlogits_, vrow_, path_states_;  // vrow_: the logits row a sampled walk read last
    std::vector<int> vargmax_;  // greedy: the target's token after each tree node
    // a chain drawn on the backend (accept_backend_chain): the verify's warped rows, the chain's p(x) and q(x)
    // side by side, the rows where the walk ends (backend buffers, grown to the largest tree), their host copies
    std::unique_ptr<BufAlloc<Ops>> bufs_;
    float *pw_ = nullptr, *pq_ = nullptr, *ends_ = nullptr;
    size_t pw_n_ = 0, ends_n_ = 0;
    std::vector<float> pq_host_, ends_host_;
    std::vector<std::vector<float>> q_host_;  // host_q(): the chain's q rows over the target's vocabulary
};

// Speculative generation from a fresh cache or one that keeps a prefix (see Session::generate_plain for the
// contract; with r.keep > 0 the drafter must have seen that prefix, as in the last text it drafted for).
std::string generate_speculative(Session& s, Drafter& d, const std::vector<int>& prompt, int n, const SamplingParams& sp,
                                 const SpecParams& spp, FILE* stream, SpecStats* st, std::vector<int>* out_ids = nullptr,
                                 const Acceptance& acc = Acceptance(), const Resume& r = Resume());

}  // namespace beagle
