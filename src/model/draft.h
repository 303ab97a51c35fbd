// draft.h: the draft models (docs/method.md section 3; section 4's EAGLE-style and MoA drafts): their config (the
// architecture is one of its fields), host weights, the frozen tensors they share with the target
// (embedding, final norm, LM head), the draft file format ("BEAGLEDR"), and Draft, the inference object
// the speculative-decoding engine calls (lazy-appending KV cache, concat / no-concat). The layer math
// is src/model/draft_layers.h (Beagle), eagle_layers.h (EAGLE) and moa_layers.h (MoA), shared with training so
// inference and the training forward give the same bits on the same backend.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../backend/ops.h"
#include "../io/model_file.h"
#include "../io/llama_config.h"
#include "llama.h"  // MemLine

namespace beagle {

// The draft's architecture (the draft file's "arch" key; files without it are Beagle drafts).
//   ARCH_BEAGLE: one cross-attention block (docs/method.md section 3): queries are token embeddings, keys the target's states.
//   ARCH_EAGLE:  EAGLE-1/2 (docs/method.md section 4): x_p = W_fc [E(t_p); f_{p-1}], one decoder layer (RMSNorm, causal
//                self-attention with RoPE over the draft's own sequence x, SwiGLU MLP) -> f^_p.
//   ARCH_MEDUSA: Medusa-1 heads (docs/method.md section 4b): K residual blocks on the last true state f_p,
//                u_k = f_p + SiLU(W_k f_p + b_k), head k predicting t_{p+2+k} (src/model/medusa_layers.h).
//   ARCH_MOA:    Mixture of Attentions (docs/method.md section 4, src/model/moa_layers.h): Layer Self-Attention over a
//                position's target layers, mean -> the keys; E(t) -> causal self-attention over the draft's tokens ->
//                Beagle's cross-attention block over those keys.
enum DraftArch : int { ARCH_BEAGLE = 0, ARCH_EAGLE = 1, ARCH_MEDUSA = 2, ARCH_MOA = 3 };
const char* draft_arch_name(int arch);
int parse_draft_arch(const std::string& s, const char* where);  // "beagle" | "eagle" | "medusa" | "moa", else a clear Error
std::vector<int> parse_layer_list(const std::string& s, const char* where);  // "22,27" -> {22, 27}, else a clear Error
std::string format_layer_list(const std::vector<int>& layers);              // {22, 27} -> "22,27" (its inverse)
constexpr int kMaxStateLayers = 8;   // DraftConfig::state_layers, datagen --state-layers (the shard header's room)
constexpr int kMaxMedusaHeads = 16;  // DraftConfig::medusa_heads

// The trainable tensors, in file order. Matrices are {out, in} (y = W x); norms are {dim}. An
// architecture has a subset of them (DraftConfig::has): Beagle all but fc_e/fc_f and the Medusa and MoA tensors;
// EAGLE fc_e/fc_f and the decoder layer (no norm_kv); Medusa only medusa_w and medusa_b; MoA Beagle's block (no
// w_mix) plus its self-attention and LSA.
enum DraftTensor : int {
    DT_WQ,       // {n_heads * head_dim, dim}
    DT_WK,       // {n_kv_heads * head_dim, dim}
    DT_WV,       // {n_kv_heads * head_dim, dim}
    DT_WO,       // {dim, n_heads * head_dim}
    DT_NORM_Q,   // {dim}  Beagle: RMSNorm_q on the query token's embedding; EAGLE: the layer's input RMSNorm
    DT_NORM_KV,  // {dim}  Beagle: RMSNorm_kv on the key/value states (EAGLE: none, q/k/v share norm_q)
    DT_NORM_M,   // {dim}  RMSNorm_m before the MLP
    DT_W_GATE,   // {ffn_dim, dim}
    DT_W_UP,     // {ffn_dim, dim}
    DT_W_DOWN,   // {dim, ffn_dim}
    DT_FC_E,     // {dim, dim}  EAGLE: W_fc's half applied to the token embedding
    DT_FC_F,     // {dim, dim}  EAGLE: W_fc's half applied to the feature (W_fc = [fc_e | fc_f], 2 dim -> dim, no bias)
    DT_MIX,      // {dim, E dim}  Beagle with state layers: a true key state is s = f + W_mix [h_l1; ..; h_lE]
    DT_MEDUSA_W, // {K dim, dim}  Medusa: the K heads' W_k stacked (rows k dim .. (k + 1) dim - 1 are W_k)
    DT_MEDUSA_B, // {K dim}       Medusa: the K heads' biases b_k stacked
    DT_SA_Q,     // {n_heads * head_dim, dim}     MoA: the self-attention over the draft's tokens
    DT_SA_K,     // {n_kv_heads * head_dim, dim}
    DT_SA_V,     // {n_kv_heads * head_dim, dim}
    DT_SA_O,     // {dim, n_heads * head_dim}
    DT_NORM_SA,  // {dim}  its input RMSNorm
    DT_LSA_Q,    // {n_heads * head_dim, dim}     MoA: Layer Self-Attention over a position's E + 1 layer rows
    DT_LSA_K,    // {n_kv_heads * head_dim, dim}
    DT_LSA_V,    // {n_kv_heads * head_dim, dim}
    DT_LSA_O,    // {dim, n_heads * head_dim}
    DT_NORM_LSA, // {dim}  its input RMSNorm
    DT_COUNT
};
const char* draft_tensor_name(int i);
bool draft_tensor_is_norm(int t);    // an RMSNorm gain ({dim}, initialised to 1)
bool draft_tensor_is_vector(int t);  // stored as a vector (ndim 1) and kept out of weight decay: the norms, Medusa's biases

struct DraftConfig {
    int arch = ARCH_BEAGLE;       // DraftArch
    int dim = 0;                  // = the target's dim (queries are its embeddings, keys its states)
    int n_heads = 0, n_kv_heads = 0, head_dim = 0;
    int ffn_dim = 0;
    int vocab_size = 0;           // = the target's vocabulary (frozen LM head)
    int draft_vocab = 0;          // EAGLE-3-style reduced draft vocabulary: the LM head's rows for these
                                  // many target tokens only (DraftWeights::d2t); 0 = the full vocabulary
    float norm_eps = 1e-5f;       // the draft's three RMSNorms
    float final_eps = 1e-5f;      // the target's final norm (frozen)
    float rope_theta = 10000.0f;
    bool rope_scaling = false;    // Llama-3 rope scaling, as the target
    float rope_factor = 1.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
    int rope_orig_max_pos = 8192;
    // EAGLE-3-style fused states (Beagle; empty: none): the target layers whose residual streams
    // h_l (Llama::set_state_layers) join a true key state, s = f + W_mix [h_l1; ..; h_lE]; predicted
    // states stay last-layer states (docs/paper-comparison.md "Fusing target layers (EAGLE-3)").
    // MoA: the layers its Layer Self-Attention reads at each position, besides f (E + 1 rows).
    std::vector<int> state_layers;
    int medusa_heads = 0;         // Medusa: K heads (1..kMaxMedusaHeads); 0 for the other architectures
    // which target it belongs to (checked when loading for a target)
    int target_n_layers = 0;
    uint64_t tokenizer_hash = 0;  // tokenizer_fingerprint() of the target's vocabulary (0: unknown)

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
    int head_rows() const { return draft_vocab > 0 ? draft_vocab : vocab_size; }  // width of the draft's logits
    int n_extra() const { return (int)state_layers.size(); }                      // E
    RopeParams rope() const;
    bool has(int t) const;        // is tensor t part of this architecture?
    int64_t rows(int t) const;    // shape of tensor t
    int64_t cols(int t) const;
    int64_t numel(int t) const { return has(t) ? rows(t) * cols(t) : 0; }
    void validate(const char* where) const;  // throws if inconsistent
};

// Heads, head_dim, GQA and RoPE follow the target; ffn_dim 0 = the target's.
DraftConfig draft_config_for_target(const LlamaConfig& t, const TokenizerSpec& tok, int ffn_dim = 0);
// FNV-1a 64 over the vocabulary (count, then each piece's length and bytes); 0 if no tokenizer.
uint64_t tokenizer_fingerprint(const TokenizerSpec& tok);
// Throws a clear Error if a draft with config d cannot run on this target.
void check_draft_fits_target(const DraftConfig& d, const LlamaConfig& t, const TokenizerSpec& tok,
                             const std::string& draft_path);

struct DraftWeights {
    DraftConfig cfg;
    std::vector<float> t[DT_COUNT];                             // host f32, shapes cfg.rows/cols
    std::vector<int32_t> d2t;  // reduced vocabulary: draft logit i is target token d2t[i] (increasing);
                               // empty when cfg.draft_vocab == 0
    std::vector<std::pair<std::string, std::string>> meta;      // free-form (training step, data, ...)
    // PyTorch-Linear-style init: U(-1/sqrt(in), 1/sqrt(in)); norms 1. Deterministic in seed.
    void init_random(const DraftConfig& c, uint64_t seed);
};

// File format (a container, src/io/container.h), little-endian:
//   0  "BEAGLEDR"   8  u32 version (1)   12 u32 n_tensors   16 u32 config_len   20 u32 0
//   24 u64 file_size   32 config text (config_len bytes, lines "key value\n")
//   tensor table: per tensor u32 name_len, name, u32 ndim, ndim x u64 shape, u64 offset, u64 nbytes
//   tensor data (f32, offsets 64-aligned)   last 4 bytes: u32 CRC-32 (zlib) of everything before.
// With a reduced vocabulary (config line "draft_vocab N") one more table entry, "d2t": ndim 1,
// shape {N}, int32 target token ids, strictly increasing. The config's first line "arch eagle" ("arch moa")
// marks an EAGLE (MoA) draft (its tensors: DraftConfig::has); "arch medusa" a Medusa draft, whose config has the
// line "medusa_heads K"; a Beagle draft has no arch line, so the files written
// before the key existed load as Beagle drafts and a Beagle draft saved now has the same bytes.
void save_draft(const std::string& path, const DraftWeights& w);  // atomic write
// Throws unless d2t has c.draft_vocab strictly increasing target ids in [0, vocab_size).
void check_d2t(const DraftConfig& c, const std::vector<int32_t>& d2t, const char* where);
DraftWeights load_draft(const std::string& path);                 // validates everything
// The longest sequence the draft was trained on (its file's meta.seq_len, written by beagle train; older
// files may lack it), 0 if not recorded. Error if malformed.
int draft_trained_seq_len(const DraftWeights& w);

// The target's frozen tensors as f32 (dequantized once): embedding, final norm, LM head. Training
// needs all three. Inference may leave embd (and lm_head) empty and call Draft::use_target_weights
// to use the target's stored (quantized) tensors instead: less memory and bandwidth.
struct DraftFrozen {
    int vocab = 0, dim = 0;
    std::vector<float> embd, out_norm, lm_head;  // lm_head empty when tied to embd
};
DraftFrozen frozen_from_target(const ModelFile& mf, bool tables = true);  // tables false: out_norm only

// The device buffers of an inference Draft(w, fz, ops, ctx, max_pred, max_queries) of a Beagle draft,
// by name with their bytes (`beagle generate --plan`): first its weights (the trainable tensors in f32,
// the frozen final norm, with q8 the Q8_0 copies of the matrices that use_q8_weights uploads; the
// embedding and LM head are the target's), then what the constructor allocates, whose sum it checks
// against its allocator's count.
std::vector<MemLine> draft_weight_buffers(const DraftConfig& c, bool q8);
std::vector<MemLine> draft_inference_buffers(const DraftConfig& c, int ctx, int max_pred, int max_queries);
// The nodes of the greedy tree a Draft(.., max_pred, max_queries) holds on the backend (Draft::tree_expand):
// the root, then at most max_queries rows of at most max_queries children per depth, one depth per kept
// row batch (BeagleDrafter: max_pred = 1 + topk (depth - 1), max_queries = topk: 1 + topk + topk^2 (depth - 1)).
int draft_tree_nodes(int max_pred, int max_queries);
// 64-bit words of a query's predicted-key mask row in a Draft(.., max_pred, ..): max_pred + 1 bits.
inline int draft_mask_words(int max_pred) { return (max_pred + 1 + 63) / 64; }

template <class O>
struct DraftModelT;  // backend-resident weights (src/model/draft_layers.h)

// The target LM head's rows of a reduced vocabulary (d2t), in their stored dtype: bytes and the tensor view
// over them (both kept by the caller as long as the returned weight is used), made resident on ops.
Weight reduced_head_weight(Ops& ops, const Weight& lm_head, const std::vector<int32_t>& d2t, int dim,
                           std::vector<uint8_t>* bytes, std::unique_ptr<Tensor>* view);

// Inference. Keys: the true states f_0..f_{n_true-1} (row j = position j) whose K/V are computed
// once, lazily, when a query first needs them; plus (concat mode) predicted states kept from earlier
// queries. Usage per speculative round: add_true_states(newly verified states); forward(queries);
// keep_pred(rows of that forward) to let later queries see those predictions; ...; clear_pred().
class Draft {
public:
    // ctx: most true states; max_pred: most predicted states kept at once; max_queries: most
    // queries per forward() call.
    Draft(const DraftWeights& w, const DraftFrozen& fz, Ops& ops, int ctx, int max_pred = 256, int max_queries = 64);
    ~Draft();
    Draft(const Draft&) = delete;
    Draft& operator=(const Draft&) = delete;

    const DraftConfig& config() const;
    // Use the target's embedding and LM head as stored (e.g. Q8_0) through Ops::embed and
    // Ops::matmul instead of the f32 tables. Predicted states stay bit-identical to the f32 path
    // (the embedding rows are dequantized by the same routine); logits then come from the target's
    // matmul kernel, not bit-identical to the training forward.
    void use_target_weights(const Weight& tok_embd, const Weight& lm_head);
    // Run the forward's matrices (Wq, Wk, Wv, Wo, W_gate, W_up, W_down) from a Q8_0 copy of w's f32
    // weights (quantize_row_q8_0) through Ops::matmul: a quarter of the bytes per draft forward. The
    // predictions then differ from the f32 forward by the weights' rounding (<= d/2 = max|w_block|/254
    // each); speculative decoding stays exact (the target verifies). Matrices whose columns are not a
    // multiple of 32 stay f32.
    void use_q8_weights(const DraftWeights& w);
    void set_concat(bool on) { concat_ = on; }  // default on; off: queries see true states only
    // Queries see only the last n true states (n = 0, the default: all of them). A draft trained on
    // sequences of L tokens never saw a key farther than L - 1 positions back; beyond that it attends
    // worse than with the far keys left out (docs/training.md). Predicted rows are unaffected.
    void set_true_window(int n) { true_window_ = n; }
    bool concat() const { return concat_; }

    void reset();                                 // forget all states
    // Keep the first n true states (n <= n_true()) and drop the rest and every predicted state: the next
    // add_true_states appends at position n (a chat's next turn, which shares only a prefix with the last
    // text). The kept keys are those a fresh draft would compute for the same states.
    void truncate_true(int n);
    // Append the next n true states (n x dim), host memory (or backend buffers if on_backend), and
    // the tokens at their positions (host; an EAGLE draft needs them: its key at position p is made of
    // t_p and f_{p-1}; a MoA draft too: its self-attention runs over them; a Beagle draft ignores them and may
    // be given nullptr).
    // A draft with state layers (config().state_layers) takes wide rows instead: [f; h_l1; ..; h_lE],
    // state_width() floats each (the target's Llama::set_state_layers rows).
    void add_true_states(const float* states, int n, const int* tokens = nullptr, bool on_backend = false);
    // Append rows rows[0..n) of `src` (a backend buffer of state rows, e.g. the target's states of a
    // verify, Llama::states_backend()) as the next n true states: gathered on the backend (tokens as above).
    void add_true_state_rows(const float* src, const int* rows, int n, const int* tokens = nullptr);
    int state_width() const;  // floats of a true-state row: dim, (1 + E) dim with state layers
    int n_true() const { return n_true_cached_ + n_true_pending_; }
    int64_t forwards() const { return forwards_; }  // forward / forward_ids / forward_tree calls so far
    // Truncate back to the true states (after verification).
    void clear_pred();
    int n_pred() const { return n_pred_cached_ + n_pred_pending_; }

    // n queries: token tokens[i] at position pos[i]. Each sees every true state and, in concat mode,
    // the predicted rows whose bit is set in row i of pred_mask (mask_words words per row; nullptr:
    // none). Writes the predicted states f^ (n x dim) and logits (n x vocab) to host buffers if not
    // null; both also stay on the backend (states_backend(), logits_backend()) until the next call.
    // EAGLE: the query at pos[i] == n_true() takes the last true state as its feature f_{p-1}; any other
    // query takes the predicted row of its mask whose position is pos[i] - 1 (its parent), and each
    // query also sees its own key (causal self-attention). Predicted rows are always seen (concat).
    // MoA: the queries' self-attention sees the true tokens, the mask's rows and its own; their cross-attention
    // sees every true position's LSA keys (no predicted keys).
    // (tokens null: the queries' embeddings are already in place; forward_ids only.)
    void forward(const int* tokens, const int* pos, int n, const uint64_t* pred_mask, int mask_words,
                 float* states_out, float* logits_out);
    // The greedy chain without the host (the method's token loop, one sync for all its steps): argmax_ids(s)
    // writes the argmax of each of the last forward's n rows (draft-vocabulary ids) to slots s..s+n-1 of
    // an id buffer on the backend (Ops::topk_rows on_backend); forward_ids(s, ...) runs n queries whose
    // tokens are the ids of slots s..s+n-1, embedded on the backend (Ops::embed on_backend, through the
    // d2t table on the backend for a reduced vocabulary); download_ids brings the first n slots to the
    // host in one copy. max_pred + 1 slots. forward_ids: drafts using the target's embedding (Beagle: the
    // query's input; EAGLE: the token embedding before fc, the feature found from pos and the mask as forward's;
    // MoA: the token embedding before its self-attention).
    void argmax_ids(int slot);
    void forward_ids(int slot, const int* pos, int n, const uint64_t* pred_mask, int mask_words);
    void download_ids(int* out, int n);
    bool can_forward_ids() const;
    bool can_forward_tree() const;  // tree_expand / forward_tree: Beagle drafts using the target's embedding
    // Drafting steps as one graph of a device backend (Ops::step_begin): begin_steps(variant) .. end_steps()
    // bracket calls that are the same at every round of this variant and count of new true states (a chain's
    // or a device tree's steps, the new true keys first: the keys' window is read on the device, positions,
    // masks and coins are staged); the backend captures them once and replays them. false: run them as usual (other backends; drafts other than Beagle's, whose
    // calls change with the keys' count).
    // wp: the sampled chain's warp (temperature, top-k, top-p are launch arguments: graphs captured with
    // other values are dropped first).
    bool begin_steps(int variant, const WarpParams* wp = nullptr);
    void end_steps();
    // The sampled chain without the host (BeagleDrafter, temperature > 0): sample_ids(slot, wp, coin) warps the
    // last forward's one row of logits into row `slot` of a q buffer on the backend (Ops::warp_rows; the buffer,
    // max_pred + 1 rows of head_rows() floats, is allocated at the first call: sampled runs only) and draws
    // its id into id slot `slot` with the host's coin, for forward_ids and download_ids as argmax_ids's.
    // q_rows(): that buffer (null before the first call); row s is the distribution slot s was drawn from.
    void sample_ids(int slot, const WarpParams& wp, float coin);
    const float* q_rows() const;
    // The greedy EAGLE-2 tree without the host between depths (BeagleDrafter; Ops::tree_expand): the
    // working tree lives on the backend, draft_tree_nodes() TreeNode records in creation order (node 0
    // the root, never written). tree_expand(depth, ...) expands the last forward's n rows (at depth 0 the
    // root's, at depth d > 0 those of forward_tree(d)) into k children each at nodes n_nodes.. and picks
    // the next depth's n_next query rows (their nodes, ids and mask rows: the parent row's bits | bit
    // base + row, base = keep_pred's first row or -1); forward_tree(d, pos, n) runs them (their ids
    // embedded on the backend through d2t, their masks read there: XAttnMask::set1_on_backend);
    // download_tree brings nodes [first, first + n) to the host in one copy. Beagle drafts using the
    // target's embedding only (can_forward_tree).
    void tree_expand(int depth, int k, int n_nodes, int n_next, int base, float min_score);
    void forward_tree(int depth, const int* pos, int n);
    void download_tree(TreeNode* out, int first, int n);
    // Keep rows[0..n) of the last forward's predicted states as predicted keys (their K/V are
    // computed when next needed). Returns the pred row index of the first one.
    int keep_pred(const int* rows, int n);
    const float* states_backend() const;
    const float* logits_backend() const;
    // Of each of the last forward's n rows of logits: the k best entries (ids into the head's rows,
    // values) and the row's logsumexp (lse may be null), chosen on the backend (Ops::topk_rows).
    void top_k(int k, int* idx, float* val, float* lse);

private:
    void ensure_kv();
    void key_rows(int n);
    void forward_impl(const int* tokens, const int* pos, int n, const uint64_t* pred_mask, int mask_words,
                      bool mask_on_backend, float* states_out, float* logits_out);
    void eagle_forward(const int* tokens, const int* pos, int n, const uint64_t* pred_mask, int mask_words);
    void moa_forward(const int* tokens, const int* pos, int n, const uint64_t* pred_mask, int mask_words);
    // EAGLE and MoA: set-1 mask rows of n queries over np kept rows: each query's ancestors (pred_mask) and itself
    std::vector<uint64_t> self_rows_mask(int n, int np, const uint64_t* pred_mask, int mask_words, int* words) const;
    Ops& ops_;
    std::unique_ptr<DraftModelT<Ops>> m_;
    int ctx_, max_pred_, max_q_;
    std::vector<uint8_t> head_rows_;        // reduced vocabulary: the target head's rows for d2t, stored
    std::unique_ptr<Tensor> head_sub_;      //   dtype (use_target_weights), and their tensor view
    std::vector<uint8_t> q8_bytes_[DT_COUNT];  // use_q8_weights: Q8_0 copies and their tensor views
    std::unique_ptr<Tensor> q8_t_[DT_COUNT];
    bool concat_ = true;
    int true_window_ = 0;                 // set_true_window
    WarpParams steps_wp_;                 // begin_steps: the warp its sampled graphs were captured with
    bool steps_wp_set_ = false;
    int64_t forwards_ = 0;
    float *kt_, *vt_, *kp_, *vp_;            // K/V caches: true (ctx rows), predicted (max_pred rows)
    float *ks_ = nullptr, *vs_ = nullptr;    // MoA: its self-attention's K/V of the true tokens (ctx rows); kp_, vp_
                                             // then hold those of the kept tree rows and of the queries run
    float* stage_x_ = nullptr;               // state layers: the pending true states' layer rows (ctx x E dim)
    void add_wide_rows(const float* src, const int* rows, int n);  // state layers: split rows into stage_t_ / stage_x_
    float *stage_t_, *stage_p_;              // pending states (K/V not yet computed). EAGLE: stage_t_ row p holds
                                             // f_p for every true position (the features of later keys and queries),
                                             // stage_p_ row r the predicted state of predicted row r
    std::vector<int> true_tok_;              // EAGLE, MoA: the token at each true position
    int n_true_cached_ = 0, n_true_pending_ = 0, n_pred_cached_ = 0, n_pred_pending_ = 0;
    std::vector<int> pred_pos_;              // position of each predicted row
    std::vector<int> last_pos_;
    struct Acts;
    std::unique_ptr<Acts> a_;
};

}  // namespace beagle
