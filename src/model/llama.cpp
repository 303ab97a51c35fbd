// llama.cpp: the target forward (see llama.h). Reads like the equations of docs/method.md section 2:
// x = E[tok]; per layer: x += Wo·Attn(RoPE(Wq·n(x)), RoPE(Wk·n(x)), Wv·n(x)); x += W2·(silu(W1·n(x)) * W3·n(x));
// states = x; logits = lm_head·norm(x). Qwen2 adds its biases to the three projections before RoPE.
#include "llama.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace beagle {

std::vector<LlamaBuffer> llama_buffers(const LlamaConfig& c, int ctx, int max_batch, int n_seq) {
    const size_t kv_dim = (size_t)c.n_kv_heads * c.head_dim, q_dim = (size_t)c.n_heads * c.head_dim, B = max_batch;
    const size_t cache = (size_t)n_seq * ctx * kv_dim;
    return {{"K cache (per layer: n_seq x ctx x kv_dim)", cache, c.n_layers},
            {"V cache (per layer)", cache, c.n_layers},
            {"x (max_batch x dim)", B * c.dim, 1},
            {"xb (max_batch x dim)", B * c.dim, 1},
            {"q (max_batch x q_dim)", B * q_dim, 1},
            {"att (max_batch x q_dim)", B * q_dim, 1},
            {"xb2 (max_batch x dim)", B * c.dim, 1},
            {"hb (max_batch x ffn)", B * c.ffn_dim, 1},
            {"hb2 (max_batch x ffn)", B * c.ffn_dim, 1},
            {"logits (max_batch x vocab)", B * c.vocab_size, 1},
            {"k_new (max_batch x kv_dim)", B * kv_dim, 1},
            {"v_new (max_batch x kv_dim)", B * kv_dim, 1}};
}

LlamaBuffer llama_state_rows_buffer(const LlamaConfig& c, int max_batch, int E) {
    return {"state rows with state layers (max_batch x (1 + E) x dim)", (size_t)max_batch * (1 + E) * c.dim, 1};
}

double llama_weight_bytes(const LlamaWeights& w) {
    double bytes = (double)w.tok_embd.nbytes + w.out_norm.nbytes;
    if (w.lm_head.data != w.tok_embd.data) bytes += (double)w.lm_head.nbytes;
    for (const LayerWeights& l : w.layers)
        for (const Tensor* t : l.all()) bytes += (double)t->nbytes;
    return bytes;
}

Llama::Llama(const ModelFile& mf, Ops& ops, int ctx, int max_batch, int n_seq)
    : cfg_(mf.config), ops_(ops), ctx_(ctx), max_batch_(max_batch), seq_len_(n_seq, 0) {
    BEAGLE_CHECK(n_seq >= 1, "n_seq must be >= 1, got %d", n_seq);
    BEAGLE_CHECK(ctx > 0, "context length must be positive, got %d", ctx);
    BEAGLE_CHECK(max_batch > 0, "max batch must be positive, got %d", max_batch);
    const LlamaConfig& c = cfg_;
    if (c.sliding_window > 0 && ctx > c.sliding_window)
        fail("model '%s' (%s) uses sliding-window attention over %d positions; a context of %d is longer, and Beagle "
             "attends over the whole context: use a context of at most %d (-c %d)",
             mf.path.c_str(), c.arch.c_str(), c.sliding_window, ctx, c.sliding_window, c.sliding_window);
    rope_.head_dim = c.head_dim;
    rope_.theta = c.rope_theta;
    rope_.llama3_scaling = c.rope_scaling;
    rope_.factor = c.rope_factor;
    rope_.low_freq_factor = c.rope_low_freq_factor;
    rope_.high_freq_factor = c.rope_high_freq_factor;
    rope_.orig_max_pos = c.rope_orig_max_pos;
    const LlamaWeights& w = mf.weights;
    tok_embd_ = ops.weight(w.tok_embd);
    out_norm_ = ops.weight(w.out_norm);
    lm_head_ = ops.matmul_weight(w.lm_head);
    for (const LayerWeights& l : w.layers) {
        LayerW lw;
        lw.attn_norm = ops.weight(l.attn_norm);
        lw.wq = ops.matmul_weight(l.wq);
        lw.wk = ops.matmul_weight(l.wk);
        lw.wv = ops.matmul_weight(l.wv);
        lw.wo = ops.matmul_weight(l.wo);
        lw.ffn_norm = ops.weight(l.ffn_norm);
        lw.w_gate = ops.matmul_weight(l.w_gate);
        lw.w_up = ops.matmul_weight(l.w_up);
        lw.w_down = ops.matmul_weight(l.w_down);
        if (c.qkv_bias) {
            lw.bq = ops.weight(l.bq);
            lw.bk = ops.weight(l.bk);
            lw.bv = ops.weight(l.bv);
        }
        layers_.push_back(lw);
    }
    // KV caches and activations from the list that `generate --plan` prints (llama_buffers)
    const std::vector<LlamaBuffer> b = llama_buffers(c, ctx, max_batch, n_seq);
    float** acts[] = {&x_, &xb_, &q_, &att_, &xb2_, &hb_, &hb2_, &logits_, &k_new_, &v_new_};
    BEAGLE_CHECK(b.size() == 2 + sizeof acts / sizeof acts[0], "llama_buffers: %zu buffers", b.size());
    for (int l = 0; l < c.n_layers; l++) {
        kcache_.push_back(ops.alloc(b[0].floats));
        vcache_.push_back(ops.alloc(b[1].floats));
    }
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) *acts[i] = ops.alloc(b[2 + i].floats);
    const int q_dim = c.n_heads * c.head_dim;
    // a device backend's scratch for the largest forward (max_batch tokens, a tree mask over them,
    // every key of the context) and its argmax, sized now: decoding rounds then allocate nothing
    ScratchSizes sz;
    sz.rows = max_batch;
    sz.mask_words = (max_batch + 63) / 64;
    sz.cols = std::max({c.dim, q_dim, c.ffn_dim});
    sz.topk = 1;
    sz.n_heads = c.n_heads;
    sz.head_dim = c.head_dim;
    sz.keys = ctx;
    ops.reserve(sz);
}

Llama::~Llama() {
    ops_.step_drop(this);
    for (float* p : kcache_) ops_.release(p);
    for (float* p : vcache_) ops_.release(p);
    for (float* p : {x_, xb_, q_, att_, xb2_, hb_, hb2_, logits_, k_new_, v_new_}) ops_.release(p);
    if (xw_) ops_.release(xw_);
}

void check_state_layers(const std::vector<int>& layers, int n_layers, const char* where) {
    for (size_t k = 0; k < layers.size(); k++)
        BEAGLE_CHECK(layers[k] >= 0 && (n_layers == 0 || layers[k] < n_layers) && (k == 0 || layers[k] > layers[k - 1]),
                     "%s: state layer %d at %zu: expected increasing layers of the target in [0, %d)", where, layers[k],
                     k, n_layers ? n_layers : INT_MAX);
}

void Llama::set_state_layers(const std::vector<int>& layers) {
    check_state_layers(layers, cfg_.n_layers, "state layers");
    if (xw_) ops_.release(xw_);
    xw_ = layers.empty() ? nullptr : ops_.alloc(llama_state_rows_buffer(cfg_, max_batch_, (int)layers.size()).floats);
    state_layers_ = layers;
}

void Llama::forward(const int* tokens, const int* pos, int T, const uint64_t* tree_mask, int mask_words,
                    float* logits, int n_logits, float* states, int n_states) {
    int& n_past = seq_len_[cur_];
    BEAGLE_CHECK(T >= 1 && T <= max_batch_, "forward: %d tokens, expected 1..%d", T, max_batch_);
    BEAGLE_CHECK(n_past + T <= ctx_, "context full: %d cached + %d new tokens > context length %d", n_past, T, ctx_);
    if (!logits) n_logits = 0;
    if (!states) n_states = 0;
    BEAGLE_CHECK(n_logits >= 0 && n_logits <= T && n_states >= 0 && n_states <= T,
                 "forward: output rows (%d logits, %d states) not in [0, %d]", n_logits, n_states, T);
    AttnMask mask;
    mask.n_past = n_past;
    mask.tree_mask = tree_mask;
    mask.mask_words = mask_words;
    // A plain step or a verify pass of up to kGraphTokens tokens the backend replays as one graph per
    // (sequence, T, mask width): every launch argument the same at each pass, so the new K/V rows go to the
    // cache through staged row indices, not a pointer into it, and attention reads n_past from the device
    const int words = tree_mask ? mask_words : 0;
    const size_t staged = std::max((size_t)T * sizeof(int), (size_t)T * words * sizeof(uint64_t));
    if (T <= kGraphTokens && words <= kGraphMaskWords && cur_ < kGraphSeqs && state_layers_.empty() &&
        ops_.step_begin(this, (cur_ * (kGraphTokens + 1) + T) * (kGraphMaskWords + 1) + words, ctx_ - T, staged)) {
        std::vector<int>& rows = graph_rows_;
        rows.resize(T);
        for (int t = 0; t < T; t++) rows[t] = cur_ * ctx_ + n_past + t;
        run(tokens, pos, T, {{0, T, mask, (size_t)cur_ * ctx_}}, rows.data(), n_past);
        ops_.step_end();
    } else {
        run(tokens, pos, T, {{0, T, mask, (size_t)cur_ * ctx_}}, nullptr, n_past);
    }
    n_past += T;
    outputs(T, logits, n_logits, states, n_states);
}

void Llama::forward_multi(const int* tokens, const int* seq, int T, float* logits, float* states) {
    BEAGLE_CHECK(T >= 1 && T <= max_batch_, "forward_multi: %d tokens, expected 1..%d", T, max_batch_);
    std::vector<int> pos(T), rows(T), start(T), len(T), next(seq_len_);
    for (int t = 0; t < T; t++) {
        int s = seq[t];
        BEAGLE_CHECK(s >= 0 && s < n_seq(), "forward_multi: sequence %d out of range [0, %d)", s, n_seq());
        BEAGLE_CHECK(next[s] < ctx_, "context full in sequence %d (%d tokens)", s, ctx_);
        pos[t] = next[s]++;
        rows[t] = s * ctx_ + pos[t];
        start[t] = s * ctx_;
        len[t] = pos[t] + 1;
    }
    AttnMask mask;
    mask.kv_start = start.data();
    mask.kv_len = len.data();
    run(tokens, pos.data(), T, {{0, T, mask, 0}}, rows.data(), 0);
    seq_len_ = next;
    outputs(T, logits, logits ? T : 0, states, states ? T : 0);
}

void Llama::forward_segments(const int* tokens, const int* pos, const std::vector<Segment>& segs, float* logits,
                             float* states) {
    std::vector<AttnPart> parts;
    std::vector<int> rows, next(seq_len_);
    int T = 0;
    for (const Segment& g : segs) {
        BEAGLE_CHECK(g.seq >= 0 && g.seq < n_seq() && g.T >= 1, "forward_segments: segment of %d tokens in sequence %d",
                     g.T, g.seq);
        BEAGLE_CHECK(next[g.seq] == seq_len_[g.seq], "forward_segments: sequence %d in two segments", g.seq);
        BEAGLE_CHECK(next[g.seq] + g.T <= ctx_, "context full in sequence %d: %d cached + %d new > %d", g.seq, next[g.seq],
                     g.T, ctx_);
        AttnMask mask;
        mask.n_past = next[g.seq];
        mask.tree_mask = g.tree_mask;
        mask.mask_words = g.mask_words;
        parts.push_back({T, g.T, mask, (size_t)g.seq * ctx_});
        for (int t = 0; t < g.T; t++) rows.push_back(g.seq * ctx_ + next[g.seq] + t);
        next[g.seq] += g.T;
        T += g.T;
    }
    BEAGLE_CHECK(T >= 1 && T <= max_batch_, "forward_segments: %d tokens, expected 1..%d", T, max_batch_);
    run(tokens, pos, T, parts, rows.data(), 0);
    for (const Segment& g : segs) seq_len_[g.seq] += g.T;
    outputs(T, logits, logits ? T : 0, states, states ? T : 0);
}

void Llama::run(const int* tokens, const int* pos, int T, const std::vector<AttnPart>& parts, const int* kv_rows,
                int first_row) {
    const LlamaConfig& c = cfg_;
    int dim = c.dim, kv_dim = c.n_kv_heads * c.head_dim, q_dim = c.n_heads * c.head_dim;
    ops_.embed(x_, tok_embd_, tokens, T);
    // each layer's residual adds are fused with the norm that follows them (add_rmsnorm): the attention
    // norm of layer l > 0 comes with layer l - 1's MLP residual
    ops_.rmsnorm(xb_, x_, layers_[0].attn_norm, T, dim, c.rms_eps);
    for (int l = 0; l < c.n_layers; l++) {
        const LayerW& w = layers_[l];
        // new K/V rows: straight into the cache when contiguous, else staged and scattered
        float* k = kv_rows ? k_new_ : kcache_[l] + (parts[0].row0 + first_row) * kv_dim;
        float* v = kv_rows ? v_new_ : vcache_[l] + (parts[0].row0 + first_row) * kv_dim;
        // attention block (xb_ = attention norm of x_)
        float* qkv[3] = {q_, k, v};
        const Weight* wqkv[3] = {&w.wq, &w.wk, &w.wv};
        ops_.matmul_n(3, qkv, xb_, wqkv, T);
        if (c.qkv_bias) {  // F32 vectors (the loaders convert them), added to every row
            ops_.add(q_, (const float*)w.bq.data, (size_t)T * q_dim, q_dim);
            ops_.add(k, (const float*)w.bk.data, (size_t)T * kv_dim, kv_dim);
            ops_.add(v, (const float*)w.bv.data, (size_t)T * kv_dim, kv_dim);
        }
        ops_.rope_qk(q_, k, pos, T, c.n_heads, c.n_kv_heads, rope_);
        if (kv_rows) {
            ops_.scatter_rows(kcache_[l], k, kv_rows, T, kv_dim, false);
            ops_.scatter_rows(vcache_[l], v, kv_rows, T, kv_dim, false);
        }
        for (const AttnPart& a : parts)
            ops_.attention(att_ + (size_t)a.row * q_dim, q_ + (size_t)a.row * q_dim, kcache_[l] + a.row0 * kv_dim,
                           vcache_[l] + a.row0 * kv_dim, a.T, c.n_heads, c.n_kv_heads, c.head_dim, a.mask);
        ops_.matmul(xb2_, att_, w.wo, T);
        // SwiGLU MLP block
        ops_.add_rmsnorm(xb_, x_, xb2_, w.ffn_norm, T, dim, c.rms_eps);
        float* gate_up[2] = {hb_, hb2_};
        const Weight* wgu[2] = {&w.w_gate, &w.w_up};
        ops_.matmul_n(2, gate_up, xb_, wgu, T);
        ops_.swiglu_matmul(xb2_, hb_, hb_, hb2_, w.w_down, T);  // h = silu(gate) * up, then h W_down^T
        if (l + 1 < c.n_layers)
            ops_.add_rmsnorm(xb_, x_, xb2_, layers_[l + 1].attn_norm, T, dim, c.rms_eps);
        else
            ops_.add(x_, xb2_, (size_t)T * dim);
        keep_state_layer(l, T);
    }
}

// x_ holds the residual stream after layer l. Wide state rows (state layers set): if l is state layer k,
// its rows go to block 1 + k of xw_'s rows (xw_ viewed as rows of dim: row t (1 + E) + block); after the
// last layer x_ itself goes to block 0.
void Llama::keep_state_layer(int l, int T) {
    const int E = (int)state_layers_.size();
    auto keep = [&](int block) {
        state_idx_.resize(T);
        for (int t = 0; t < T; t++) state_idx_[t] = t * (1 + E) + block;
        ops_.scatter_rows(xw_, x_, state_idx_.data(), T, cfg_.dim, false);
    };
    for (int k = 0; k < E; k++)
        if (state_layers_[k] == l) keep(1 + k);
    if (E > 0 && l == cfg_.n_layers - 1) keep(0);
}

// The true states (last layer output, before the final norm) and logits of the last rows.
void Llama::outputs(int T, float* logits, int n_logits, float* states, int n_states) {
    const LlamaConfig& c = cfg_;
    last_T_ = T;
    const size_t W = state_width();
    if (n_states) {
        const float* rows = states_backend() + (size_t)(T - n_states) * W;
        if (async_states_) ops_.download_async(states, rows, (size_t)n_states * W);
        else ops_.download(states, rows, (size_t)n_states * W);
    }
    if (n_logits) {
        head(T, n_logits);
        ops_.download(logits, logits_, (size_t)n_logits * c.vocab_size);
    }
}

void Llama::head(int T, int n) {
    const LlamaConfig& c = cfg_;
    ops_.rmsnorm(xb_, x_ + (size_t)(T - n) * c.dim, out_norm_, n, c.dim, c.rms_eps);
    ops_.matmul(logits_, xb_, lm_head_, n);
}

void Llama::argmax_last(int* ids, int n) {
    ops_.topk_rows(ids, nullptr, nullptr, logits_last(n), n, cfg_.vocab_size, 1);
}

const float* Llama::logits_last(int n) {
    BEAGLE_CHECK(n >= 1 && n <= last_T_, "logits of the last %d rows: the last forward ran %d", n, last_T_);
    head(last_T_, n);
    return logits_;
}

void Llama::prefill(const int* tokens, int n, float* last_logits, float* all_states) {
    BEAGLE_CHECK(n >= 1, "prefill needs at least one token");
    BEAGLE_CHECK(n_past() + n <= ctx_, "prompt of %d tokens does not fit: %d cached, context length %d", n, n_past(), ctx_);
    std::vector<int> pos(max_batch_);
    for (int done = 0; done < n;) {
        int T = std::min(max_batch_, n - done);
        for (int t = 0; t < T; t++) pos[t] = n_past() + t;
        bool last = done + T == n;
        forward(tokens + done, pos.data(), T, nullptr, 0, last ? last_logits : nullptr, 1,
                all_states ? all_states + (size_t)done * state_width() : nullptr, T);
        done += T;
    }
}

void Llama::truncate(int n) {
    BEAGLE_CHECK(n >= 0 && n <= n_past(), "truncate to %d: cache holds %d", n, n_past());
    seq_len_[cur_] = n;
}

void Llama::use_seq(int s) {
    BEAGLE_CHECK(s >= 0 && s < n_seq(), "use_seq: sequence %d out of range [0, %d)", s, n_seq());
    cur_ = s;
}

void Llama::compact(const int* src, int n, int dst_start) {
    int kv_dim = cfg_.n_kv_heads * cfg_.head_dim;
    std::vector<int> dst(n);
    for (int i = 0; i < n; i++) {
        dst[i] = dst_start + i;
        BEAGLE_CHECK(src[i] >= dst[i] && src[i] < n_past() && (i == 0 || src[i] > src[i - 1]),
                     "compact: bad source row %d at %d", src[i], i);
    }
    bool moved = false;  // an accepted chain, or the root alone, is already in place
    for (int i = 0; i < n; i++) moved = moved || src[i] != dst[i];
    const size_t row0 = (size_t)cur_ * ctx_ * kv_dim;
    // a device backend replays the moves of every layer as one graph per (sequence, rows kept): the row
    // lists are staged, the launches' arguments the same at each round
    const bool graph = moved && n <= kGraphTokens && cur_ < kGraphSeqs &&
                       ops_.step_begin(this, -1 - (cur_ * (kGraphTokens + 1) + n), ctx_ - 1, (size_t)n * sizeof(int));
    for (int l = 0; l < cfg_.n_layers && moved; l++) {
        ops_.move_rows(kcache_[l] + row0, src, dst.data(), n, kv_dim);
        ops_.move_rows(vcache_[l] + row0, src, dst.data(), n, kv_dim);
    }
    if (graph) ops_.step_end();
    seq_len_[cur_] = dst_start + n;
}

}  // namespace beagle
