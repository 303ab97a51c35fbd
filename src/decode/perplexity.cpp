// perplexity.cpp: perplexity() of perplexity.h: llama-perplexity's chunked scoring on a Session's
// target (fresh cache per chunk, BOS first, the second half of each chunk scored in double).
#include "perplexity.h"

#include <algorithm>
#include <cmath>

#include "../backend/cpu/select.h"
#include "../core/common.h"

namespace beagle {

PerplexityResult perplexity(Session& s, const std::vector<int>& tokens, int n_ctx, int max_chunks,
                            const std::function<void(int, double)>& on_chunk) {
    Llama& m = *s.llama;
    if (n_ctx < 4) fail("perplexity: the context must hold at least 4 tokens, got %d", n_ctx);
    if (n_ctx > m.ctx()) fail("perplexity: context %d exceeds the model's cache of %d tokens", n_ctx, m.ctx());
    if ((long)tokens.size() < perplexity_min_tokens(n_ctx))
        fail("perplexity: the text is %zu tokens; a context of %d needs at least %ld (two chunks, as llama-perplexity)",
             tokens.size(), n_ctx, perplexity_min_tokens(n_ctx));
    PerplexityResult r;
    r.n_ctx = n_ctx;
    const int n_chunk_max = (int)(tokens.size() / n_ctx);
    r.chunks = max_chunks > 0 ? std::min(max_chunks, n_chunk_max) : n_chunk_max;
    r.bos_per_chunk = s.tok->spec().prompt_bos() && s.tok->bos() >= 0;
    const int V = m.config().vocab_size, B = m.max_batch();
    // The model always has the first half of the chunk as context for the tokens it is scored on.
    const int first = n_ctx / 2;
    std::vector<int> chunk(n_ctx), pos(n_ctx);
    for (int p = 0; p < n_ctx; p++) pos[p] = p;
    std::vector<float> logits((size_t)std::min(B, n_ctx) * V);
    double sum = 0, sum2 = 0;
    const double t0 = now_seconds();
    for (int c = 0; c < r.chunks; c++) {
        const int* src = tokens.data() + (size_t)c * n_ctx;
        std::copy(src, src + n_ctx, chunk.begin());
        if (r.bos_per_chunk) chunk[0] = s.tok->bos();
        m.truncate(0);
        for (int j = 0; j < n_ctx; j += B) {
            const int T = std::min(B, n_ctx - j);
            const int n_out = std::clamp(j + T - first, 0, T);  // rows at positions >= first
            m.forward(chunk.data() + j, pos.data() + j, T, nullptr, 0, n_out ? logits.data() : nullptr, n_out, nullptr, 0);
            for (int k = 0; k < n_out; k++) {
                const int p = j + T - n_out + k;
                if (p + 1 >= n_ctx) break;  // the last position predicts beyond the chunk
                const float* row = logits.data() + (size_t)k * V;
                const double nll = log_sum_exp_f64(row, V) - (double)row[src[p + 1]];
                sum += nll;
                sum2 += nll * nll;
                r.scored++;
            }
        }
        if (on_chunk) on_chunk(c, std::exp(sum / (double)r.scored));
    }
    r.seconds = now_seconds() - t0;
    r.nll = sum / (double)r.scored;
    r.ppl = std::exp(r.nll);
    const double var = sum2 / (double)r.scored - r.nll * r.nll;
    r.ppl_stderr = var > 0 && r.scored > 1 ? std::sqrt(var / (double)(r.scored - 1)) * r.ppl : 0;
    return r;
}

}  // namespace beagle
