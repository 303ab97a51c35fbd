// ops.h: the one op interface. Model code (src/model/) calls only these; the CPU backend
// (src/backend/cpu/) and the CUDA backend (src/backend/gpu/, kernels in cuda/) implement them.
// All float* arguments are backend-resident buffers (host memory for the CPU backend, device
// memory for CUDA); int and mask arrays are host arrays (a device backend uploads them).
//
// Op names say what differs (no synonyms):
//  - an op is named by its math (matmul, rmsnorm, rope, attention, xattn, swiglu, ...); its backward
//    is the same name + _bwd, + _x / _w when the backward is split by input;
//  - an op on a model Weight (stored dtype, possibly quantized; inference) has the plain name
//    (matmul, rmsnorm, embed); the same math on plain f32 buffers, with a backward, adds _f32
//    (matmul_f32, rmsnorm_f32 which also saves rstd). CpuOps64 (cpu/ops_f64.h) mirrors these names
//    on double buffers, so the draft's layer code is one template over both op sets;
//  - row ops say their direction: gather_rows (dst[i] = src[idx[i]]), scatter_rows (dst[idx[i]] = or
//    += src[i]), move_rows (rows moved inside one buffer: KV-cache compaction);
//  - a variant that is bit-identical to another op is a flag of that op, not a second name
//    (rope's inverse; scatter_rows without accumulate is the KV-cache append).
//
// Batch invariance (docs/method.md "Exactness is a kernel property"): every op computes each row with a
// fixed reduction order that does not depend on how many rows are computed together, so a
// position's logits are bit-identical alone, in a prefill chunk, or among verify tokens.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "../core/tensor.h"

namespace beagle {

// A weight as the backend holds it: the host tensor plus the backend's copy (if any).
struct Weight {
    const Tensor* host = nullptr;
    const void* data = nullptr;  // backend-resident bytes in the stored dtype
    DType dtype = DType::F32;
    int64_t rows = 0, cols = 0;  // matrices: {out, in}; vectors: rows = 1
    const uint8_t* packed = nullptr;  // CPU backend only: the same matrix in row groups (cpu_pack_weight), or null
    int packed_rows = 0;              // rows per group of `packed` (8: AVX2 layout, 16: AVX-512 layout)
    std::shared_ptr<const void> keep;  // owner of `packed` (shared by copies of this Weight), or null
};

// Which keys a block of queries may see in attention (never a dense T x T tensor).
// Keys live in a cache of n_keys rows. Queries are T consecutive new rows whose keys were
// written at cache rows [n_past, n_past + T).
//  - tree_mask == nullptr: causal; query t sees keys [0, n_past + t].
//  - otherwise: query t sees keys [0, n_past) and key n_past + j where bit j of
//    tree_mask[t * mask_words + j / 64] is set (ancestors and itself).
//  - kv_start != nullptr (independent sequences in one batch, datagen): query t sees exactly the
//    cache rows [kv_start[t], kv_start[t] + kv_len[t]); n_past and tree_mask are ignored.
struct AttnMask {
    int n_past = 0;
    const uint64_t* tree_mask = nullptr;
    int mask_words = 0;
    const int* kv_start = nullptr;
    const int* kv_len = nullptr;
};

struct RopeParams {
    int head_dim = 0;
    float theta = 10000.0f;
    bool llama3_scaling = false;
    float factor = 1.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
    int orig_max_pos = 8192;
};

// ---- types of the draft's ops (cross-attention, AdamW) ---------------------------------------
// Which keys each query of the draft's cross-attention sees, given by parameters (never a dense
// T x T tensor). Keys come in two sets: set 0 = true states (training: row j = sequence position j),
// set 1 = predicted states (training: row r = the draft's own f^_r; inference: appended in order).
// The exact rule is xattn_sees() in xattn_mask.h (CPU and CUDA kernels implement it):
//  - PREFIX (inference): a query sees every set-0 row; it sees set-1 row r iff bit r of
//    set1_bits[t * set1_words + r / 64] is set (set1_bits == nullptr: no set-1 row, no-concat mode).
//    With set0_qrow (the EAGLE draft's training-time test) it sees only set-0 rows j < qrow[t].
//  - BLOCK (training): the query at sequence row q = qrow[t] lies in window [b, b + w) with b = 0 if
//    q < offset else offset + floor((q - offset) / w) * w. It sees set-0 rows j < b and set-1 rows r
//    with b <= r < min(q, b + n_pred). Stage 1: n_pred = 0. Stage-2 step s: n_pred = s - 1.
struct XAttnMask {
    enum Kind : int { PREFIX = 0, BLOCK = 1 };
    Kind kind = PREFIX;
    const uint64_t* set1_bits = nullptr;  // PREFIX: host bit rows, set1_words words per query
    int set1_words = 0;
    bool set1_on_backend = false;         // PREFIX: set1_bits is a backend buffer an op wrote (tree_expand)
    bool set0_qrow = false;               // PREFIX: set 0 only rows j < qrow[t] (qrow needed)
    int w = 1, offset = 0, n_pred = 0;    // BLOCK
};

// The two key sets of the draft's cross-attention: K (after RoPE) and V rows of kv_dim floats.
template <class R>
struct XAttnKeysT {
    const R* k0 = nullptr; const R* v0 = nullptr; int n0 = 0;  // set 0: true states
    const R* k1 = nullptr; const R* v1 = nullptr; int n1 = 0;  // set 1: predicted states (may be empty)
    int start0 = 0;  // set 0 is a window: rows [start0, start0 + n0) of a buffer at k0 - start0 rows (a device
                     // backend's captured steps read the window on the device, their pointers fixed)
};
// Gradients of the two key sets (accumulated); a null set-1 pair skips set 1.
template <class R>
struct XAttnGradsT {
    R* dk0 = nullptr; R* dv0 = nullptr;
    R* dk1 = nullptr; R* dv1 = nullptr;
};
using XAttnKeys = XAttnKeysT<float>;
using XAttnGrads = XAttnGradsT<float>;

// One AdamW update (PyTorch semantics): g' = g * grad_scale (the grad-norm clip factor);
// m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2; w *= 1 - lr * weight_decay;
// w -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps). step counts from 1.
struct AdamWParams {
    float lr = 3e-5f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f, grad_scale = 1.0f;
    int step = 1;
};

// One depth of the EAGLE-2 dynamic tree with its working tree on the backend (Ops::tree_expand; the greedy
// tree of BeagleDrafter, docs/gpu.md "The device-resident loop"). Nodes in creation order, one 16-byte record each;
// node 0 is the root (never written: its score is 0 and it is live). live = 0 marks a child of a query row
// the host's loop would not have expanded (cost-aware pruning): such nodes are dropped on the host.
struct TreeNode {
    int tok;      // draft-vocabulary id (the top-k column; -1 for a row without k numbers)
    int parent;   // node index
    float score;  // cumulative draft log-probability: score(parent) + (val - lse)
    int live;     // 1: a node of the host loop's tree; 0: a child of a pruned row
};
static_assert(sizeof(TreeNode) == 4 * sizeof(float), "TreeNode records are 4 floats of a backend buffer");
// The arguments of tree_expand. Backend buffers: nodes, rows, rows_next, mask, mask_next, ids_next.
struct TreeExpandArgs {
    TreeNode* nodes = nullptr;
    const int* rows = nullptr;       // node of each of the n query rows (null at depth 0: the root)
    const uint64_t* mask = nullptr;  // their predicted-key mask rows, words each (null at depth 0: none)
    int* rows_next = nullptr;        // the next depth's n_next query rows: node indices,
    uint64_t* mask_next = nullptr;   //   mask rows (the parent row's | bit base + parent row),
    int* ids_next = nullptr;         //   draft ids (-1 written as 0: a row to embed, never live)
    int words = 0;
    int n = 0, k = 0;                // query rows, children per row (the top-k of its logits)
    int n_nodes = 0;                 // nodes before this depth: the children go to n_nodes + i k + j
    int depth = 0;                   // 0: the root's row (always expanded); > 0: rows below min_score are pruned
    int n_next = 0;                  // the next depth's rows: the best n_next children (0: the last depth)
    int base = -1;                   // predicted-key row of query row 0 (keep_pred), -1: not kept
    float min_score = -INFINITY;     // a row scoring below it gets no live children (depth > 0)
};

// What a device backend's runtime layer has done so far (src/backend/gpu/cuda_rt.h counts it, on the
// real CUDA runtime and under the emulator alike): kernel launches; host <-> device synchronizations
// (blocking copies, stream / device syncs, frees: each one stalls the host until the GPU catches up);
// bytes copied host -> device and device -> host; device allocations and frees (cudaMalloc /
// cudaFree calls, not the caching allocator's reuses). Differences of two snapshots give per-round
// and per-step figures (generate --json, the training JSON summary).
struct DeviceCounters {
    long long launches = 0, syncs = 0, h2d_bytes = 0, d2h_bytes = 0, allocs = 0, frees = 0;
    // levels, not counts (a difference keeps the later value): device bytes held from cudaMalloc now
    // (live buffers, the allocator's cache, weights, scratch) and at most so far
    long long device_bytes = 0, peak_device_bytes = 0;
    long long graph_launches = 0;  // cudaGraphLaunch calls (each also one of `launches`)
    DeviceCounters operator-(const DeviceCounters& o) const {
        return {launches - o.launches, syncs - o.syncs, h2d_bytes - o.h2d_bytes, d2h_bytes - o.d2h_bytes,
                allocs - o.allocs, frees - o.frees, device_bytes, peak_device_bytes,
                graph_launches - o.graph_launches};
    }
};

// The largest calls a model will make (Ops::reserve): a device backend sizes the scratch behind the
// host arrays of those calls (token ids, positions, masks, row indices, top-k results, quantized
// activations, split-KV partials) for them up front, so that no round allocates after the first.
struct ScratchSizes {
    int rows = 0;        // rows of one call: tokens, positions, queries, gathered / moved rows, top-k rows
    int mask_words = 0;  // 64-bit words per row of a tree mask or of a draft's predicted-key mask
    int cols = 0;        // the widest input of a matmul
    int topk = 0;        // the largest k of topk_rows
    int n_heads = 0, head_dim = 0, keys = 0;  // causal / tree attention: heads, head size, most keys seen
};

// How a row of logits becomes a sampling distribution (Ops::warp_rows; SamplingParams in
// src/decode/sampling.h adds the seed): softmax(logits / temperature), cut to the top_k largest (0: off),
// then to the smallest set of largest entries whose mass exceeds top_p of what is left (>= 1 or <= 0: off).
struct WarpParams {
    float temperature = 0.8f;  // 0 = greedy (no distribution: the callers take the argmax instead)
    int top_k = 0;             // 0 = off
    float top_p = 0.9f;        // >= 1 or <= 0 = off
};

static_assert(sizeof(int) == sizeof(float), "backend int buffers are float allocations (Ops::alloc)");

class Ops {
public:
    virtual ~Ops() = default;
    virtual const char* name() const = 0;
    // The runtime counters of a device backend; nullptr for the CPU backend (nothing to count).
    virtual const DeviceCounters* device_counters() const { return nullptr; }
    // Size the backend's scratch for calls up to s (several calls: the largest of each); the CPU
    // backend keeps no scratch.
    virtual void reserve(const ScratchSizes& s) {}
    // The CPU backend: later ops use at most n of its pool's threads (0: all of them); the results are
    // the same bits, only the split changes. Other backends have no threads to limit.
    virtual void set_threads(int n) {}

    // A fixed-shape step as one unit the backend may capture once and replay (the CUDA backend: a CUDA
    // graph of a target forward, a plain decode step or a verify pass; docs/gpu.md).
    // step_begin(owner, variant, max_past, max_staged) == true: the op calls up to step_end() are that step;
    // the first time for (owner, variant) they are captured, later they must be the same calls with the same
    // buffers (only staged host arrays of the same sizes and AttnMask::n_past may differ, n_past <= max_past)
    // and the captured graph runs instead of their launches. max_staged: the largest host array the step
    // stages, in bytes. false (every other backend, graphs off, or arrays too large to stage through the
    // backend's fixed mirrors): run the ops as usual, no step_end. step_drop(owner): its buffers are gone.
    virtual bool step_begin(const void* owner, int variant, int max_past, size_t max_staged) { return false; }
    virtual void step_end() {}
    virtual void step_drop(const void* owner) {}

    // ---- memory (element counts are floats)
    virtual float* alloc(size_t n) = 0;           // zero-initialised (a backend int buffer: n floats, cast)
    virtual void release(float* p) = 0;
    virtual void upload(float* dst, const float* src, size_t n) = 0;    // host -> backend
    virtual void download(float* dst, const float* src, size_t n) = 0;  // backend -> host
    // backend -> host without waiting: dst holds the values once wait_downloads() (or any download)
    // has returned, not before. A device backend queues the copy behind the work that writes src, so the
    // host goes on launching (the training loop computes the next step's target states this way). The
    // host backends copy at once.
    virtual void download_async(float* dst, const float* src, size_t n) { download(dst, src, n); }
    virtual void wait_downloads() {}  // a device backend: a sync if a download_async is still queued
    virtual void copy(float* dst, const float* src, size_t n) = 0;      // backend -> backend
    virtual void zero(float* p, size_t n) = 0;
    virtual Weight weight(const Tensor& t) = 0;   // make t resident (CPU: a view, no copy)
    // A weight used only as the W of matmul: the backend may keep it in a faster layout (CPU with
    // quantized matrices packed in row groups of the current ISA, see cpu_pack_weight; kept once per tensor).
    virtual Weight matmul_weight(const Tensor& t) { return weight(t); }

    // ---- ops. Gradient convention (llm.c): parameter gradients accumulate (+=); activation
    // gradients are assigned unless the comment says "accumulates". Each output element has one
    // fixed reduction order whatever the number of rows or threads (batch invariance: the draft's
    // inference and training forward give the same bits).
    // y[t, o] = sum_i W[o, i] * x[t, i] for t < T. x rows are W.cols long, y rows W.rows long.
    virtual void matmul(float* y, const float* x, const Weight& W, int T) = 0;
    // ys[i] = x Ws[i]^T for i < n (all Ws[i] with the same cols): the same bits as n matmul calls, but a
    // backend may share x's preparation and its thread split (CPU: one barrier for Q/K/V, one for gate/up).
    virtual void matmul_n(int n, float* const* ys, const float* x, const Weight* const* Ws, int T) {
        for (int i = 0; i < n; i++) matmul(ys[i], x, *Ws[i], T);
    }
    // y[t, o] = sum_i W[o, i] x[t, i];  W: n_out x n_in, dense f32
    virtual void matmul_f32(float* y, const float* x, const float* W, int T, int n_in, int n_out) = 0;
    // dx[t, i] = sum_o dy[t, o] W[o, i]  (accumulate: dx += ...)
    virtual void matmul_f32_bwd_x(float* dx, const float* dy, const float* W, int T, int n_in, int n_out,
                                  bool accumulate) = 0;
    // dW[o, i] += sum_t dy[t, o] x[t, i]
    virtual void matmul_f32_bwd_w(float* dW, const float* dy, const float* x, int T, int n_in, int n_out) = 0;

    // y[t, :] = x[t, :] / rms(x[t, :]) * w
    virtual void rmsnorm(float* y, const float* x, const Weight& w, int T, int dim, float eps) = 0;
    // y[t, :] = x[t, :] * rstd[t] * w, rstd[t] = 1 / sqrt(mean(x[t, :]^2) + eps) (rstd saved)
    virtual void rmsnorm_f32(float* y, float* rstd, const float* x, const float* w, int T, int dim, float eps) = 0;
    // The residual add and the next norm in one op: x[t, :] += dx[t, :], then y[t, :] = rmsnorm(x[t, :]) * w.
    // The same floats as add then rmsnorm (a device backend does both in one pass over x).
    virtual void add_rmsnorm(float* y, float* x, const float* dx, const Weight& w, int T, int dim, float eps) {
        add(x, dx, (size_t)T * dim);
        rmsnorm(y, x, w, T, dim, eps);
    }
    // backward of rmsnorm_f32: dx accumulates (nullptr: skip), dw accumulates (nullptr: frozen)
    virtual void rmsnorm_f32_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w,
                                 const float* rstd, int T, int dim) = 0;

    // in place: rotate the adjacent pairs of each of n_heads heads of row t (n_heads * head_dim) by
    // pos[t] * freq_i (inverse: by -pos[t] * freq_i, which is RoPE's backward)
    virtual void rope(float* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) = 0;

    // rope of q (n_heads heads per row) and k (n_kv_heads) at the same positions, forward: the same bits
    // as two rope calls (a device backend does both in one launch)
    virtual void rope_qk(float* q, float* k, const int* pos, int T, int n_heads, int n_kv_heads, const RopeParams& rp) {
        rope(q, pos, T, n_heads, rp, false);
        rope(k, pos, T, n_kv_heads, rp, false);
    }

    // x[t, :] = E[tokens[t], :] (dequantized). on_backend: tokens is a backend int buffer that an op wrote
    // (topk_rows with on_backend: the greedy draft's argmax of the step before), read through map (a
    // backend int table, a reduced draft vocabulary's d2t: row map[tokens[t]]) when map is not null; the
    // host never sees these ids (their range is the writer's: argmax ids < the head's rows, d2t checked at
    // load). Without on_backend, tokens is a host array (checked against E.rows) and map must be null.
    virtual void embed(float* x, const Weight& E, const int* tokens, int T, bool on_backend = false,
                       const int* map = nullptr) = 0;
    // dst[i, :] = src[idx[i], :] for i < n (rows of `width`; idx host)
    virtual void gather_rows(float* dst, const float* src, const int* idx, int n, int width) = 0;
    // dst[idx[i], :] = src[i, :] (accumulate: +=), i = 0..n-1 in order
    virtual void scatter_rows(float* dst, const float* src, const int* idx, int n, int width, bool accumulate) = 0;
    // in place (KV-cache compaction): for i < n in order, row dst[i] of buf <- row src[i] (src[i] >= dst[i])
    virtual void move_rows(float* buf, const int* src, const int* dst, int n, int width) = 0;

    // out[t, h*hd..] = softmax(q_t,h . K^T * scale | mask) V over cache rows; GQA: head h uses kv head h / (n_heads / n_kv_heads)
    virtual void attention(float* out, const float* q, const float* kcache, const float* vcache, int T,
                           int n_heads, int n_kv_heads, int head_dim, const AttnMask& mask) = 0;
    // Cross-attention of n_q queries over the visible keys of both sets (XAttnMask); qrow[t] is
    // query t's sequence row (BLOCK masks; may be null for PREFIX). Visible keys in order: set 0
    // ascending, then set 1 ascending. out: n_q x n_heads*head_dim; lse: n_q x n_heads logsumexp
    // of the scaled scores (-inf and out = 0 for a query that sees no key). GQA: head h uses kv
    // head h / (n_heads / n_kv_heads). Scale 1/sqrt(head_dim).
    virtual void xattn(float* out, float* lse, const float* q, const int* qrow, int n_q, const XAttnKeys& keys,
                       int n_heads, int n_kv_heads, int head_dim, const XAttnMask& mask) = 0;
    // Flash-style backward from the saved lse: dq assigned; dk/dv of both sets accumulate.
    virtual void xattn_bwd(float* dq, const XAttnGrads& dkeys, const float* dout, const float* out, const float* lse,
                           const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads,
                           int n_kv_heads, int head_dim, const XAttnMask& mask) = 0;

    // out[i] = silu(gate[i]) * up[i]
    virtual void swiglu(float* out, const float* gate, const float* up, size_t n) = 0;
    // The SwiGLU MLP's down projection with its input: h = silu(gate) * up (as swiglu; h may be gate), then
    // y = h W^T (as matmul, W.cols wide rows). The same bits as those two calls (the CPU backend computes,
    // quantizes and multiplies h in one parallel region: a barrier instead of a serial pass between two).
    virtual void swiglu_matmul(float* y, float* h, const float* gate, const float* up, const Weight& W, int T) {
        swiglu(h, gate, up, (size_t)T * W.cols);
        matmul(y, h, W, T);
    }
    // backward of swiglu: dgate, dup assigned
    virtual void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) = 0;
    // y[i] += x[i] (the residual; its backward is the identity). period > 0: y[i] += x[i % period], x one
    // row of period floats added to every row of y (a bias: Qwen2's q, k, v); 0: x is n floats.
    virtual void add(float* y, const float* x, size_t n, size_t period = 0) = 0;

    // Online logsumexp over vocabulary chunks: per row r < n of z (n x C), m[r] = running max,
    // s[r] = running sum of exp(z - m). Start with m = -inf, s = 0; lse = m + log(s).
    virtual void lse_update(float* m, float* s, const float* z, int n, int C) = 0;
    // Soft-label cross-entropy chunk: p = exp(zt - lse_t) (target), q = exp(zd - lse_d) (draft);
    // loss[r] += -scale * sum_c p * (zd - lse_d); dz = scale * (q - p)  (n x C, assigned)
    virtual void ce_soft_chunk(float* dz, float* loss, const float* zt, const float* zd, const float* m_t,
                               const float* s_t, const float* m_d, const float* s_d, int n, int C, float scale) = 0;
    // Token-label cross-entropy chunk (vocab ids v0..v0+C-1; labels host):
    // loss[r] += scale * (lse_d - zd[label]) if the label is in the chunk; dz = scale * (q - onehot)
    virtual void ce_hard_chunk(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d,
                               const int* labels, int v0, int n, int C, float scale) = 0;
    // SmoothL1 (PyTorch, beta) of x - target, mean over dim per row:
    // loss[r] += scale * mean_d l(d); dx += scale * l'(d) / dim  (both accumulate)
    virtual void smoothl1(float* dx, float* loss, const float* x, const float* target, int n, int dim, float beta,
                          float scale) = 0;
    // sum of squares in double (fixed blocks, fixed order), returned to the host
    virtual double sumsq(const float* x, size_t n) = 0;
    // sum_i sumsq(xs[i], ns[i]), added in i order (the global gradient norm of AdamW): the same double
    // as the loop, with one device -> host copy for all buffers on a device backend.
    virtual double sumsq_all(const float* const* xs, const size_t* ns, int count) {
        double s = 0;
        for (int i = 0; i < count; i++) s += sumsq(xs[i], ns[i]);
        return s;
    }

    // ---- selection (the host sees ids and a few values, never the rows: drafting and greedy acceptance)
    // Per row r < rows of x (rows x n_cols): idx[r * k + j] = the j-th largest entry's column (descending;
    // ties: lower column first; NaN never chosen; -1 past the row's length), val (if not null) its
    // value, lse[r] (if not null) log sum_c exp(x[r, c]). k = 1 is argmax (the CPU's argmax(): a row
    // without a number gives 0). idx, val, lse are host arrays; on_backend: idx is a backend int buffer
    // (val, lse null) and nothing comes to the host (embed with on_backend reads the ids: the greedy chain).
    virtual void topk_rows(int* idx, float* val, float* lse, const float* x, int rows, int n_cols, int k,
                           bool on_backend = false) = 0;
    // One depth of the EAGLE-2 dynamic tree on the backend (TreeExpandArgs), from the logits of the n query
    // rows (n x n_cols): per row i the top k (ids, values; ties: lower column first) and the logsumexp lse_i
    // as topk_rows; child c = n_nodes + i k + j gets tok = id_ij, parent = rows[i], score = score(parent) +
    // (val_ij - lse_i) (float, in that order: the host loop's bits), live = live(parent) and (depth == 0 or
    // not score(parent) < min_score). Then the next queries: the n_next best children by (live ? score :
    // -inf), NaN as -inf, ties to the lower index (the host's stable sort over creation order), their node
    // indices, ids and mask rows. Nothing comes to the host.
    virtual void tree_expand(const float* logits, int n_cols, const TreeExpandArgs& a) = 0;
    // ---- sampling on the backend (the sampled draft chain and its acceptance: docs/gpu.md "The device-resident loop")
    // Per row r < rows of x (rows x n_cols logits): p[r] (a backend buffer, rows x n_cols, not x) = the row
    // warped by wp (WarpParams), normalised to sum 1, zeros outside the kept entries. coins (a host array of
    // rows floats in [0, 1), or null): ids[r] (a backend int buffer) = the first column whose running sum of
    // p[r] exceeds coins[r] (none, by rounding: the last nonzero column). The CPU backend computes the host's
    // warp_dense (run.c's sorted walk, select.h) and that draw exactly; the CUDA kernel (cuda/sample.cu) the
    // same distribution but for exact ties at the top-p / top-k cut and the order of its float sums. Nothing
    // comes to the host.
    virtual void warp_rows(float* p, int* ids, const float* coins, const float* x, int rows, int n_cols,
                           const WarpParams& wp) = 0;
    // one AdamW step over n elements (see AdamWParams)
    virtual void adamw(float* w, float* m, float* v, const float* g, size_t n, const AdamWParams& p) = 0;
};

// Backends.
std::unique_ptr<Ops> make_cpu_ops(int n_threads);

}  // namespace beagle
