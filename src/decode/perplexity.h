// perplexity.h: the perplexity of a target over a token stream, by llama.cpp's llama-perplexity method
// (chunks of n_ctx tokens, each from a fresh KV cache, BOS first when the vocabulary wants one, only the
// second half of each chunk scored). `beagle perplexity` runs it; the oracle test checks it in float64.
#pragma once
#include <functional>
#include <vector>

#include "session.h"

namespace beagle {

struct PerplexityResult {
    int n_ctx = 0, chunks = 0;
    long scored = 0;           // tokens scored: chunks x (n_ctx - 1 - n_ctx / 2)
    bool bos_per_chunk = false;  // each chunk's first token was replaced by BOS
    double nll = 0;            // mean negative log-likelihood (natural log) of the scored tokens
    double ppl = 0;            // exp(nll)
    double ppl_stderr = 0;     // llama-perplexity's: ppl sqrt((mean nll^2 - nll^2) / (scored - 1)); 0 if not defined
    double seconds = 0;        // forwards and scoring, all chunks
};

// The tokens a perplexity run of n_ctx needs: two chunks' worth, as llama-perplexity requires.
inline long perplexity_min_tokens(int n_ctx) { return 2L * n_ctx; }

// Perplexity of s's target over `tokens` (the whole text, tokenized with BOS as the tokenizer wants):
// chunk c is tokens [c n_ctx, (c + 1) n_ctx), its first token replaced by BOS when the tokenizer
// prepends one (Tokenizer spec prompt_bos), run from an empty cache in forwards of s.llama->max_batch()
// tokens; the logits at positions first = n_ctx / 2 .. n_ctx - 2 score the next token, -log softmax in
// double. Chunks: all whole ones, or the first max_chunks if > 0. on_chunk(c, running ppl) after each.
// Throws Error if tokens has fewer than perplexity_min_tokens(n_ctx) or n_ctx exceeds the cache.
PerplexityResult perplexity(Session& s, const std::vector<int>& tokens, int n_ctx, int max_chunks,
                            const std::function<void(int, double)>& on_chunk = nullptr);

}  // namespace beagle
