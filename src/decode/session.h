// session.h: one loaded target ready to generate: model file, tokenizer, backend, Llama with its
// KV cache. Used by `beagle generate`, `beagle bench` and the tests; plain decoding lives here,
// speculative decoding engines build on the same session.
#pragma once
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../backend/ops.h"
#include "../io/model_file.h"
#include "../model/llama.h"
#include "../tokenizer/tokenizer.h"
#include "sampling.h"

namespace beagle {

struct GenStats {
    int prompt_tokens = 0;
    int gen_tokens = 0;
    int target_passes = 0;      // target forward calls after prefill
    double prefill_s = 0, decode_s = 0;
    bool stopped_eog = false, stopped_ctx = false;
    bool interrupted = false;   // Resume::interrupt ended it
    // A device backend's runtime counters (ops.h DeviceCounters) over the rounds after the prefill
    // (run_commits); allocations counted from the end of the first round (warm-up) on.
    bool has_device = false;
    int rounds_counted = 0;
    DeviceCounters device;
    long long allocs_after_warmup = 0;
};

// A generation that continues what the target's cache holds (a chat's next turn, `beagle chat`), given to
// Session::generate_plain and generate_speculative. keep: the cache's first `keep` rows hold the K/V of the
// prompt's first `keep` ids (an earlier generation's rows: reusable_prefix), only the rest is prefilled
// (keep < the prompt's length: the last prompt token's logits are computed again). interrupt (null: none):
// read before each step, nonzero ends the generation there (GenStats::interrupted; a signal handler sets
// it). cache_ids (out, null: not wanted): the ids of the cache's rows at the end, committed tokens past a
// stop included, for the next call's reusable_prefix.
struct Resume {
    int keep = 0;
    const volatile std::sig_atomic_t* interrupt = nullptr;
    std::vector<int>* cache_ids = nullptr;
};
// How many leading ids a and b share.
int common_prefix(const std::vector<int>& a, const std::vector<int>& b);
// Resume::keep for `prompt` when the cache holds cache_ids: their common prefix, short of the whole prompt.
int reusable_prefix(const std::vector<int>& cache_ids, const std::vector<int>& prompt);

class Session {
public:
    // ctx 0: the model's context length capped at 4096. n_seq: independent sequences of ctx rows
    // each in the Llama's cache (Llama::use_seq; the server's slots).
    Session(const std::string& model_path, const std::string& tokenizer_path, int threads, int ctx, int batch,
            int n_seq = 1);
    std::unique_ptr<ModelFile> mf;
    std::unique_ptr<Tokenizer> tok;
    std::unique_ptr<Ops> ops;
    std::unique_ptr<Llama> llama;
    int threads;

    // Prompt -> ids: BOS when the tokenizer wants one (always for llama2.c vocabularies), chat
    // template when asked. Throws Error for invalid UTF-8 or a prompt that leaves no room.
    std::vector<int> encode_prompt(const std::string& prompt, bool chat, const std::string& system) const;
    // Text whose special-token text (like <|im_start|>) is encoded as those tokens, BOS as the tokenizer
    // wants: a conversation already rendered in its template (generate --parse-special). Context checked.
    std::vector<int> encode_special(const std::string& text) const;
    // Error unless `ids` (what = "prompt", "conversation") leaves the context room to generate.
    void check_fits(const std::vector<int>& ids, const char* what) const;
    // The same ids without the context check (for callers that cut the ids to length themselves).
    std::vector<int> tokenize_prompt(const std::string& prompt, bool chat, const std::string& system) const;
    // A conversation in the chat template (apply_chat_template), no context check.
    std::vector<int> tokenize_chat(const std::vector<ChatMessage>& messages) const;
    // Drop the target's cache rows from `keep` on, checked against the prompt they start (Resume::keep).
    void keep_prefix(const std::vector<int>& prompt, int keep);
    // True when generation must stop after `id`.
    bool is_stop(int id) const;
    // Plain decoding from a fresh cache (or one that keeps a prefix: Resume): prefill `prompt`, then up to
    // n tokens. Streams text to `stream` if not null. Returns the text; ids of the generated tokens in
    // *out_ids if given.
    std::string generate_plain(const std::vector<int>& prompt, int n, const SamplingParams& sp, FILE* stream,
                               GenStats* st, std::vector<int>* out_ids = nullptr, const Resume& r = Resume());

private:
    std::vector<int> encode_text(const std::string& text, bool special) const;  // BOS as the tokenizer wants
};

// The commit loop of every generation (plain, speculative, remote): emits `first`, then the tokens
// of each step() in order, until a stop token, n tokens, step() returns false (context full:
// st->stopped_ctx) or *interrupt is set before a step (st->interrupted). Text is decoded after `prev` and
// streamed to `stream` if not null; ids go to *out_ids if given; st->gen_tokens counts what was emitted;
// a device backend's counters over the steps go to st->device (GenStats).
std::string run_commits(Session& s, int prev, int first, int n, const std::function<bool(std::vector<int>*)>& step,
                        FILE* stream, GenStats* st, std::vector<int>* out_ids,
                        const volatile std::sig_atomic_t* interrupt = nullptr);

}  // namespace beagle
