// cpu_ops.h: the CPU backend's class implementing the op interface (src/backend/ops.h). One file per
// op holds its forward and backward (and CpuOps64's double versions, ops_f64.h): matmul.cpp (model
// Weights), matmul_f32.cpp, norm.cpp, rope.cpp, rows.cpp, attention.cpp, xattn.cpp, swiglu.cpp,
// loss.cpp, adamw.cpp; memory and the class glue in cpu_ops.cpp.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "../../core/threadpool.h"
#include "../ops.h"

namespace beagle {

// out[i] = silu(gate[i]) * up[i] for i < n (swiglu.cpp): CpuOps::swiglu, and the input of the fused
// swiglu_matmul (matmul.cpp). Each element's arithmetic is the same wherever it sits, so any split of
// [0, n) gives the same bits.
void cpu_swiglu(float* out, const float* gate, const float* up, size_t n);

class CpuOps : public Ops {
public:
    // BEAGLE_ATTN=per-query in the environment starts it with the per-query attention loop order.
    explicit CpuOps(int n_threads);
    const char* name() const override { return "cpu"; }
    ThreadPool& pool() { return pool_; }
    void set_threads(int n) override { pool_.set_limit(n); }
    // attention's loop order (attention.cpp): per KV head (default) or per query; the same bits either way
    void set_attention_per_query(bool on) { attention_per_query_ = on; }

    float* alloc(size_t n) override;
    void release(float* p) override;
    void upload(float* dst, const float* src, size_t n) override;
    void download(float* dst, const float* src, size_t n) override;
    void copy(float* dst, const float* src, size_t n) override;
    Weight weight(const Tensor& t) override;
    Weight matmul_weight(const Tensor& t) override;

    void matmul(float* y, const float* x, const Weight& W, int T) override;
    void matmul_n(int n, float* const* ys, const float* x, const Weight* const* Ws, int T) override;
    void embed(float* x, const Weight& E, const int* tokens, int T, bool on_backend = false,
               const int* map = nullptr) override;
    void rmsnorm(float* y, const float* x, const Weight& w, int T, int dim, float eps) override;
    void add_rmsnorm(float* y, float* x, const float* dx, const Weight& w, int T, int dim, float eps) override;
    void attention(float* out, const float* q, const float* kcache, const float* vcache, int T, int n_heads,
                   int n_kv_heads, int head_dim, const AttnMask& mask) override;
    void swiglu(float* out, const float* gate, const float* up, size_t n) override;
    void swiglu_matmul(float* y, float* h, const float* gate, const float* up, const Weight& W, int T) override;
    void add(float* y, const float* x, size_t n, size_t period = 0) override;
    void move_rows(float* buf, const int* src, const int* dst, int n, int width) override;

    void zero(float* p, size_t n) override;
    void gather_rows(float* dst, const float* src, const int* idx, int n, int width) override;
    void scatter_rows(float* dst, const float* src, const int* idx, int n, int width, bool accumulate) override;
    void matmul_f32(float* y, const float* x, const float* W, int T, int n_in, int n_out) override;
    void matmul_f32_bwd_x(float* dx, const float* dy, const float* W, int T, int n_in, int n_out, bool accumulate) override;
    void matmul_f32_bwd_w(float* dW, const float* dy, const float* x, int T, int n_in, int n_out) override;
    void rmsnorm_f32(float* y, float* rstd, const float* x, const float* w, int T, int dim, float eps) override;
    void rmsnorm_f32_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int T,
                         int dim) override;
    void rope(float* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) override;
    void xattn(float* out, float* lse, const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads,
               int n_kv_heads, int head_dim, const XAttnMask& mask) override;
    void xattn_bwd(float* dq, const XAttnGrads& dkeys, const float* dout, const float* out, const float* lse,
                   const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads, int n_kv_heads,
                   int head_dim, const XAttnMask& mask) override;
    void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) override;
    void lse_update(float* m, float* s, const float* z, int n, int C) override;
    void ce_soft_chunk(float* dz, float* loss, const float* zt, const float* zd, const float* m_t, const float* s_t,
                       const float* m_d, const float* s_d, int n, int C, float scale) override;
    void ce_hard_chunk(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d, const int* labels,
                       int v0, int n, int C, float scale) override;
    void smoothl1(float* dx, float* loss, const float* x, const float* target, int n, int dim, float beta,
                  float scale) override;
    double sumsq(const float* x, size_t n) override;
    void tree_expand(const float* logits, int n_cols, const TreeExpandArgs& a) override;  // select.cpp
    void warp_rows(float* p, int* ids, const float* coins, const float* x, int rows, int n_cols,
                   const WarpParams& wp) override;  // select.cpp
    void topk_rows(int* idx, float* val, float* lse, const float* x, int rows, int n_cols, int k,
                   bool on_backend = false) override;  // select.cpp
    void adamw(float* w, float* m, float* v, const float* g, size_t n, const AdamWParams& p) override;

    // RoPE inverse frequencies (head_dim / 2 of them), with Llama-3 scaling when configured.
    static void rope_freqs(const RopeParams& rp, float* freq);

private:
    ThreadPool pool_;
    std::vector<std::vector<float>> scratch_;  // per-thread attention scores
    bool attention_per_query_ = false;
    struct RopeAngles {  // rope: cos / sin of the last call's positions (pos.size() x head_dim floats)
        RopeParams rp;
        std::vector<int> pos;
        std::vector<float> cs;
    } rope_angles_;
    // matmul_weight: row-group copies (the current ISA's rows per group), found by the matrix's bytes
    // (data pointer, size, dtype, shape, group rows) and alive while some Weight holds them: a tensor
    // freed and another allocated at the same address never gets the old copy (its Weights died with
    // it, so the entry expired). The copies are laid end to end in chunks of alloc_large memory (2 MiB
    // pages where the kernel gives them: a decode streams them all once a token); a chunk is freed when
    // the last copy in it is.
    struct PackChunk {
        uint8_t* base = nullptr;
        uint64_t cap = 0, used = 0;
        ~PackChunk();
    };
    struct Packed {  // one copy: what a Weight's `keep` holds
        std::shared_ptr<PackChunk> chunk;
        const uint8_t* bytes;
    };
    struct Pack {
        const void* data;
        uint64_t nbytes;
        DType dtype;
        int64_t rows, cols;
        int group_rows;
        std::weak_ptr<const Packed> copy;
    };
    std::vector<Pack> packs_;
    std::shared_ptr<PackChunk> chunk_;  // where the next copy goes
};

}  // namespace beagle
