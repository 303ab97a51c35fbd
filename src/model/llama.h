// llama.h: the target model (docs/method.md section 2): Llama forward over any number of new tokens with a
// KV cache, causal or with a tree visibility mask (the verify pass of speculative decoding), and
// optional output of the true states (last layer output before the final norm).
// All compute goes through the op interface (src/backend/ops.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "../backend/ops.h"
#include "../io/model_file.h"

namespace beagle {

// One entry of a memory plan: what a buffer holds and its bytes (the model's and the trainer's buffer
// lists that `beagle generate --plan` and `beagle train --plan` print).
struct MemLine {
    std::string name;
    double bytes;
};

// The device buffers a Llama(config, ops, ctx, max_batch, n_seq) allocates besides its weights, in the
// order its constructor allocates them from this list: `count` buffers of `floats` floats each.
struct LlamaBuffer {
    const char* name;
    size_t floats;
    int count;
};
std::vector<LlamaBuffer> llama_buffers(const LlamaConfig& c, int ctx, int max_batch, int n_seq = 1);
// The one more buffer set_state_layers allocates for E fused layers: the wide state rows [f; h_l1..h_lE].
LlamaBuffer llama_state_rows_buffer(const LlamaConfig& c, int max_batch, int E);
// Error unless `layers` is a valid state-layer list: increasing, each in [0, n_layers) (n_layers 0: not
// known yet, any layer >= 0). `where` starts the message. Llama::set_state_layers and DraftConfig use it.
void check_state_layers(const std::vector<int>& layers, int n_layers, const char* where);
// Bytes of the weights as a backend holds them: every role tensor in its stored dtype, a tied LM head
// once (CudaOps::weight uploads each distinct tensor once).
double llama_weight_bytes(const LlamaWeights& w);

class Llama {
public:
    // ctx: KV cache length (<= config max_seq unless the caller overrides); max_batch: most tokens
    // per forward call (prefill is chunked to this); n_seq: independent sequences for
    // forward_multi (each has its own ctx rows of cache; the single-sequence API uses sequence 0).
    Llama(const ModelFile& mf, Ops& ops, int ctx, int max_batch = 128, int n_seq = 1);
    ~Llama();
    Llama(const Llama&) = delete;
    Llama& operator=(const Llama&) = delete;

    const LlamaConfig& config() const { return cfg_; }
    int ctx() const { return ctx_; }
    int max_batch() const { return max_batch_; }
    const Weight& tok_embd_weight() const { return tok_embd_; }  // shared with the draft (frozen)
    const Weight& lm_head_weight() const { return lm_head_; }
    int n_past() const { return seq_len_[cur_]; }  // KV cache rows in use (the current sequence)
    int n_seq() const { return (int)seq_len_.size(); }
    int seq_len(int s) const { return seq_len_[s]; }
    void reset_seq(int s) { seq_len_[s] = 0; }
    // The sequence that the single-sequence API (forward, prefill, truncate, compact, n_past) works
    // on; 0 unless set (the server gives each request a sequence of its own).
    void use_seq(int s);

    // Run T new tokens (T <= max_batch) at positions pos[t]; their K/V go to cache rows
    // [n_past, n_past + T) and n_past advances by T. tree_mask == nullptr means causal; otherwise
    // row t (mask_words words) holds the bits of the new tokens that token t may see (itself
    // included), see AttnMask. logits (host, n_logits x vocab) get the last n_logits rows, states
    // (host, n_states x state_width()) the last n_states rows (null or 0: not computed / not copied).
    void forward(const int* tokens, const int* pos, int T, const uint64_t* tree_mask, int mask_words,
                 float* logits, int n_logits, float* states, int n_states);
    // Causal prefill of n tokens at positions n_past.., in chunks of max_batch: logits of the last
    // token; all_states (n x state_width()) gets every position's true state if not null.
    void prefill(const int* tokens, int n, float* last_logits, float* all_states = nullptr);
    // Independent sequences in one batch (datagen: decode of one sequence is memory-bound, a batch
    // costs little more). Token t goes to sequence seq[t] at that sequence's next position (tokens of
    // one sequence in order); it attends causally within its own sequence only. logits (T x vocab)
    // and states (T x state_width()) for every row if not null. Same bits per row as forward().
    void forward_multi(const int* tokens, const int* seq, int T, float* logits, float* states);
    // Several sequences in one forward (the server's batched round): segment i is the next
    // segs[i].T tokens of sequence segs[i].seq (tokens and pos laid out segment after segment), causal
    // or with that segment's tree mask, exactly as forward() on that sequence alone would run them:
    // every op but attention runs over all rows at once, attention once per segment. Advances each
    // sequence by its T. logits (sum T x vocab) and states (sum T x state_width()) for every row if not null.
    struct Segment {
        int seq = 0, T = 0;
        const uint64_t* tree_mask = nullptr;  // null: causal
        int mask_words = 0;
    };
    void forward_segments(const int* tokens, const int* pos, const std::vector<Segment>& segs, float* logits,
                          float* states);
    // After a forward: the greedy token (argmax of the logits, lowest id on ties) of each of its last n
    // rows, chosen on the backend, so only n ids leave a device. The same ids as argmax() of the logits
    // forward() would have returned.
    void argmax_last(int* ids, int n);
    // After a forward: the logits of its last n rows, computed on the backend (the final norm and the LM
    // head), in a backend buffer of n x vocab valid until the next forward or head: a caller that reads only
    // some rows brings down just those (Ops::download of a row; sampled acceptance, SpecDecoder::step). The
    // same bits as the rows forward() would have returned.
    const float* logits_last(int n);
    // The true states of the last forward's rows (its T x state_width(), a backend buffer valid until the
    // next forward): the draft takes the accepted rows from here without a trip through the host.
    const float* states_backend() const { return xw_ ? xw_ : x_; }
    // State layers (EAGLE-3's fused features; docs/paper-comparison.md "Fusing target layers (EAGLE-3)"):
    // from now on every forward also keeps the residual stream after each of these layers
    // (increasing, in [0, n_layers)), and a state row is [f; h_{layers[0]}; ..; h_{layers[E-1]}]:
    // state_width() = (1 + E) dim floats wherever this class returns states (forward, prefill,
    // forward_multi, forward_segments, states_backend).
    void set_state_layers(const std::vector<int>& layers);
    const std::vector<int>& state_layers() const { return state_layers_; }
    int state_width() const { return cfg_.dim * (1 + (int)state_layers_.size()); }
    // From now on the host states of forward / prefill come down with Ops::download_async: they hold the
    // values once ops.wait_downloads() has returned, so the host can queue more work meanwhile.
    void set_async_states(bool on) { async_states_ = on; }
    // Drop cache rows >= n.
    void truncate(int n);
    // Keep n rows of the cache: for i < n, row src[i] moves to row dst_start + i (src increasing,
    // src[i] >= dst_start + i); then n_past = dst_start + n.
    void compact(const int* src, int n, int dst_start);

private:
    const LlamaConfig cfg_;
    Ops& ops_;
    int ctx_, max_batch_;
    std::vector<int> seq_len_;  // cache rows in use per sequence
    int cur_ = 0;               // sequence of the single-sequence API (use_seq)
    RopeParams rope_;
    struct LayerW { Weight attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down, bq, bk, bv; };
    std::vector<LayerW> layers_;
    Weight tok_embd_, out_norm_, lm_head_;
    std::vector<float*> kcache_, vcache_;  // per layer: ctx x kv_dim
    // activations, max_batch rows each
    float *x_, *xb_, *q_, *att_, *xb2_, *hb_, *hb2_, *logits_, *k_new_, *v_new_;
    // Attention of rows [row, row + T) as `mask` over the cache rows from row0 on (the first row of a
    // sequence; 0 for forward_multi, whose mask holds absolute rows).
    struct AttnPart {
        int row, T;
        AttnMask mask;
        size_t row0;
    };
    // One forward over T rows; K/V rows go to cache rows kv_rows[t] (absolute) or parts[0].row0 +
    // first_row + t; attention part by part.
    void run(const int* tokens, const int* pos, int T, const std::vector<AttnPart>& parts, const int* kv_rows,
             int first_row);
    void outputs(int T, float* logits, int n_logits, float* states, int n_states);
    void keep_state_layer(int l, int T);  // after layer l: its residual stream into xw_ if it is a state layer
    std::vector<int> state_idx_;
    // Forwards a device backend may replay as graphs (forward): up to kGraphTokens rows (a verify's tree
    // of 64 nodes), a tree mask of up to kGraphMaskWords words a row, sequences below kGraphSeqs; one
    // graph per (sequence, T, mask width) (variants >= 0; compact's graphs < 0). graph_rows_: the K/V
    // cache rows such a forward writes.
    static constexpr int kGraphTokens = 64, kGraphMaskWords = 2, kGraphSeqs = 1024;
    std::vector<int> graph_rows_;
    void head(int T, int n);  // logits_ = lm_head(norm(x_ rows [T - n, T)))
    std::vector<int> state_layers_;  // set_state_layers
    float* xw_ = nullptr;            // max_batch x (1 + E) dim: the wide state rows (block 0 f, block 1 + k layer k)
    int last_T_ = 0;          // rows of the last forward
    bool async_states_ = false;  // set_async_states
    std::vector<float> host_tmp_;
};

}  // namespace beagle
