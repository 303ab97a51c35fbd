// session.h: one loaded target ready to generate: model file, tokenizer, backend, Llama with its
// KV cache. Used by `beagle generate`, `beagle bench` and the tests; plain decoding lives here,
// speculative decoding engines build on the same session.
#pragma once
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
    // A device backend's runtime counters (ops.h DeviceCounters) over the rounds after the prefill
    // (run_commits); allocations counted from the end of the first round (warm-up) on.
    bool has_device = false;
    int rounds_counted = 0;
    DeviceCounters device;
    long long allocs_after_warmup = 0;
};

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
    // The same ids without the context check (for callers that cut the ids to length themselves).
    std::vector<int> tokenize_prompt(const std::string& prompt, bool chat, const std::string& system) const;
    // A conversation in the chat template (apply_chat_template), no context check.
    std::vector<int> tokenize_chat(const std::vector<ChatMessage>& messages) const;
    // True when generation must stop after `id`.
    bool is_stop(int id) const;
    // Plain decoding from a fresh cache: prefill `prompt`, then up to n tokens. Streams text to
    // `stream` if not null. Returns the text; ids of the generated tokens in *out_ids if given.
    std::string generate_plain(const std::vector<int>& prompt, int n, const SamplingParams& sp, FILE* stream,
                               GenStats* st, std::vector<int>* out_ids = nullptr);

private:
    std::vector<int> encode_text(const std::string& text, bool special) const;  // BOS as the tokenizer wants
};

// The commit loop of every generation (plain, speculative, remote): emits `first`, then the tokens
// of each step() in order, until a stop token, n tokens, or step() returns false (context full:
// st->stopped_ctx). Text is decoded after `prev` and streamed to `stream` if not null; ids go to
// *out_ids if given; st->gen_tokens counts what was emitted; a device backend's counters over the
// steps go to st->device (GenStats).
std::string run_commits(Session& s, int prev, int first, int n, const std::function<bool(std::vector<int>*)>& step,
                        FILE* stream, GenStats* st, std::vector<int>* out_ids);

}  // namespace beagle
