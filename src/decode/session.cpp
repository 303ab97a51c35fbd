// session.cpp: Session (session.h): one loaded target (model file, tokenizer, backend, Llama) with
// prompt encoding and plain decoding; run_commits, the commit loop of every generation.
#include "session.h"

#include <algorithm>
#include <cstring>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../core/threadpool.h"

namespace beagle {

Session::Session(const std::string& model_path, const std::string& tokenizer_path, int n_threads, int ctx, int batch,
                 int n_seq)
    : threads(n_threads) {
    mf = load_model(model_path);
    TokenizerSpec spec = tokenizer_path.empty() ? mf->tokenizer : load_tokenizer_file(tokenizer_path);
    if (spec.kind == TokenizerSpec::NONE)
        fail("model '%s' carries no tokenizer: pass one with -z (tokenizer.bin, tokenizer.model or tokenizer.json)",
             model_path.c_str());
    tok = Tokenizer::create(spec);
    if (tok->vocab_size() != mf->config.vocab_size)
        fail("tokenizer '%s' does not fit model '%s': tokenizer has %d tokens, model vocabulary is %d",
             tokenizer_path.empty() ? model_path.c_str() : tokenizer_path.c_str(), model_path.c_str(),
             tok->vocab_size(), mf->config.vocab_size);
    if (ctx <= 0) ctx = std::min(mf->config.max_seq > 0 ? mf->config.max_seq : 4096, 4096);
    ops = make_ops("", n_threads);  // the selected backend (--backend), see src/backend/backend.h
    llama.reset(new Llama(*mf, *ops, ctx, batch, n_seq));
}

std::vector<int> Session::encode_prompt(const std::string& prompt, bool chat, const std::string& system) const {
    std::vector<int> ids = tokenize_prompt(prompt, chat, system);
    check_fits(ids, "prompt");
    return ids;
}

std::vector<int> Session::encode_special(const std::string& text) const {
    size_t bad;
    if (!utf8_valid(text, &bad)) fail("prompt is not valid UTF-8 (bad byte at offset %zu)", bad);
    std::vector<int> ids = encode_text(text, true);
    check_fits(ids, "prompt");
    return ids;
}

void Session::check_fits(const std::vector<int>& ids, const char* what) const {
    if ((int)ids.size() >= llama->ctx())
        fail("%s is %zu tokens but the context holds %d (leave room to generate; raise -c)", what, ids.size(), llama->ctx());
}

std::vector<int> Session::tokenize_prompt(const std::string& prompt, bool chat, const std::string& system) const {
    size_t bad;
    if (!utf8_valid(prompt, &bad)) fail("prompt is not valid UTF-8 (bad byte at offset %zu)", bad);
    return chat ? encode_text(apply_chat_template(*tok, prompt, system), true) : encode_text(prompt, false);
}

std::vector<int> Session::tokenize_chat(const std::vector<ChatMessage>& messages) const {
    size_t bad;
    for (size_t i = 0; i < messages.size(); i++)
        if (!utf8_valid(messages[i].content, &bad))
            fail("message %zu is not valid UTF-8 (bad byte at offset %zu)", i, bad);
    return encode_text(apply_chat_template(*tok, messages), true);
}

std::vector<int> Session::encode_text(const std::string& text, bool special) const {
    std::vector<int> ids = tok->encode(text, tok->spec().prompt_bos(), special);
    if (ids.empty()) {
        if (tok->bos() < 0) fail("empty prompt and the tokenizer has no BOS token to start from");
        ids.push_back(tok->bos());
    }
    return ids;
}

bool Session::is_stop(int id) const {
    if (tok->is_eog(id)) return true;
    // llama2.c's run.c stops when the model emits BOS
    return tok->spec().llama2c_spaces && id == tok->bos();
}

int common_prefix(const std::vector<int>& a, const std::vector<int>& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) n++;
    return (int)n;
}

int reusable_prefix(const std::vector<int>& cache_ids, const std::vector<int>& prompt) {
    return std::min(common_prefix(cache_ids, prompt), std::max((int)prompt.size() - 1, 0));
}

void Session::keep_prefix(const std::vector<int>& prompt, int keep) {
    BEAGLE_CHECK(keep >= 0 && keep < (int)prompt.size() && keep <= llama->n_past(),
                 "keep %d cached rows of %d for a prompt of %zu tokens", keep, llama->n_past(), prompt.size());
    llama->truncate(keep);
}

std::string Session::generate_plain(const std::vector<int>& prompt, int n, const SamplingParams& sp, FILE* stream,
                                    GenStats* st, std::vector<int>* out_ids, const Resume& r) {
    const int V = mf->config.vocab_size;
    std::vector<float> logits(V);
    Sampler sampler(sp, V);
    keep_prefix(prompt, r.keep);
    *st = GenStats();
    st->prompt_tokens = (int)prompt.size();
    double t0 = now_seconds();
    llama->prefill(prompt.data() + r.keep, (int)prompt.size() - r.keep, logits.data());
    double t1 = now_seconds();
    st->prefill_s = t1 - t0;
    int next = sampler.sample(logits.data());
    if (r.cache_ids) r.cache_ids->assign(prompt.begin(), prompt.end());
    std::string text = run_commits(*this, prompt.back(), next, n, [&](std::vector<int>* out) {
        if (llama->n_past() >= llama->ctx()) return false;  // context full
        int pos = llama->n_past();
        if (r.cache_ids) r.cache_ids->push_back(next);
        if (sp.temperature <= 0) {  // greedy: the argmax is chosen on the backend, one id comes back
            llama->forward(&next, &pos, 1, nullptr, 0, nullptr, 0, nullptr, 0);
            llama->argmax_last(&next, 1);
        } else {
            llama->forward(&next, &pos, 1, nullptr, 0, logits.data(), 1, nullptr, 0);
            next = sampler.sample(logits.data());
        }
        st->target_passes++;
        out->push_back(next);
        return true;
    }, stream, st, out_ids, r.interrupt);
    st->decode_s = now_seconds() - t1;
    return text;
}

std::string run_commits(Session& s, int prev, int first, int n, const std::function<bool(std::vector<int>*)>& step,
                        FILE* stream, GenStats* st, std::vector<int>* out_ids, const volatile std::sig_atomic_t* interrupt) {
    std::string text;
    auto emit = [&](int tok) {  // returns false when generation must stop before `tok`
        if (s.is_stop(tok)) { st->stopped_eog = true; return false; }
        std::string piece = s.tok->decode_token(prev, tok);
        text += piece;
        if (stream) { fwrite(piece.data(), 1, piece.size(), stream); fflush(stream); }
        if (out_ids) out_ids->push_back(tok);
        st->gen_tokens++;
        prev = tok;
        return st->gen_tokens < n;
    };
    if (n <= 0) return text;
    const DeviceCounters* dev = s.ops->device_counters();
    const DeviceCounters c0 = dev ? *dev : DeviceCounters();
    DeviceCounters c1 = c0;  // after the first step
    int steps = 0;
    bool done = !emit(first);
    std::vector<int> committed;
    while (!done) {
        committed.clear();
        if (interrupt && *interrupt) { st->interrupted = true; break; }
        if (!step(&committed)) { st->stopped_ctx = true; break; }
        if (dev && ++steps == 1) c1 = *dev;
        for (int tok : committed)
            if (!emit(tok)) { done = true; break; }
    }
    if (dev) {
        st->has_device = true;
        st->rounds_counted = steps;
        st->device = *dev - c0;
        st->allocs_after_warmup = dev->allocs - c1.allocs;
    }
    return text;
}

}  // namespace beagle
