// attention.cpp: the target's self-attention over the KV cache (ops.h attention: causal, tree or
// per-sequence masks, GQA). Scores 8 keys at a time (dot8_keys), softmax weights by exp8_neg, the
// weighted sum of V rows by FMA in key order: a query's result does not depend on T (batch invariance).
//
// Two loop orders compute the same bits:
//  - per query (attend_query): one query against its visible keys; any head_dim.
//  - per KV head (attend_group, head_dim 64 / 128): under a causal or tree mask the group * T queries
//    that read one KV head share its n_past cached keys (under a causal mask also the new keys up to the
//    job's first token: most of a prefill's), so each block of shared K / V rows is loaded once into L1
//    and used by every query of the job; only each query's own further keys go query by query. Under
//    per-sequence ranges (kv_start: batched decoding) the group's queries of one token share its range
//    (SmolLM2: 3 heads a KV head). Streaming the head's whole K / V from L2 per query instead (a 256-byte
//    row every 768 bytes) costs several times the FMA count per (query, key).
// Why the bits agree: a key's score is a function of (q, k) alone (dot8_keys reduces every lane in one
// tree), the maximum is exact, the exp sum runs over the query's own score array in key order either
// way, and each output element is one FMA chain over the query's keys in increasing order; the joint
// loop only pauses a chain (stores it to the output row) between key blocks.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../ops.h"
#include "cpu_ops.h"
#include "simd.h"

namespace beagle {

// o = sum_i (w[i] * inv) v_{keys[i]} for head_dim = 8 ND, kept in registers: the same FMA per element
// in the same key order as axpy_f32 (the general path), so the bits do not depend on the path taken.
// resume: the chains go on from the sums already in o (the per-KV-head order's keys past the shared ones).
template <int ND>
static inline void weighted_sum(float* o, const float* w, float inv, const float* vb, const int* keys, int nk,
                                int kv_dim, bool resume = false) {
    // (the d loops are unrolled by force: at -O2 GCC otherwise keeps acc[] in memory, a store-to-load
    // round trip in every FMA chain)
    __m256 acc[ND];
#pragma GCC unroll 16
    for (int d = 0; d < ND; d++) acc[d] = resume ? _mm256_loadu_ps(o + 8 * d) : _mm256_setzero_ps();
    for (int i = 0; i < nk; i++) {
        const float* v = vb + (int64_t)keys[i] * kv_dim;
        if (i + 32 < nk)  // rows ahead (prefetch only: the arithmetic is unchanged)
            for (int c = 0; c < 8 * ND; c += 16) _mm_prefetch((const char*)(vb + (int64_t)keys[i + 32] * kv_dim + c), _MM_HINT_T0);
        const __m256 a = _mm256_set1_ps(w[i] * inv);
#pragma GCC unroll 16
        for (int d = 0; d < ND; d++) acc[d] = _mm256_fmadd_ps(a, _mm256_loadu_ps(v + 8 * d), acc[d]);
    }
#pragma GCC unroll 16
    for (int d = 0; d < ND; d++) _mm256_storeu_ps(o + 8 * d, acc[d]);
}

// Scores of one query against the 8 key rows kp (lanes past n repeat a key): s[0 .. min(n, 8)) are
// stored, vmx returns updated (a repeated key has no effect on the max).
static inline __m256 score_block(float* s, const float* qr, const float* const* kp, int n, int head_dim,
                                 __m256 vscale, __m256 vmx) {
    const __m256 s8 = _mm256_mul_ps(head_dim == 64 ? dot8_keys<8>(qr, kp) : dot8_keys<16>(qr, kp), vscale);
    if (n >= 8) {
        _mm256_storeu_ps(s, s8);
    } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, s8);
        for (int j = 0; j < n; j++) s[j] = tmp[j];
    }
    return _mm256_max_ps(vmx, s8);
}

// Scores s[i] = (q . k_{keys[i]}) * scale of nk listed keys, 8 at a time (the tail block repeats its
// last key); returns the running maximum vmx updated with them.
static inline __m256 scores8(float* s, const float* qr, const float* kb, const int* keys, int nk, int kv_dim,
                             int head_dim, float scale, __m256 vmx) {
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int i = 0; i < nk; i += 8) {
        const float* kp[8];
        for (int j = 0; j < 8; j++) kp[j] = kb + (int64_t)keys[std::min(i + j, nk - 1)] * kv_dim;
        for (int j = i + 32; j < std::min(i + 40, nk); j++)  // four blocks ahead: rows not yet in cache
            for (int c = 0; c < head_dim; c += 16) _mm_prefetch((const char*)(kb + (int64_t)keys[j] * kv_dim + c), _MM_HINT_T0);
        vmx = score_block(s + i, qr, kp, nk - i, head_dim, vscale, vmx);
    }
    return vmx;
}

// s[i] <- e^(s[i] - mx) in chunks of 8 (the last one padded, its extra lanes zeroed); their sum in 8
// lanes then hsum8 (one fixed order for a given key count); returns 1 / sum.
static inline float softmax_weights(float* s, int nk, float mx) {
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (int i = 0; i < nk; i += 8) {
        const int n = std::min(8, nk - i);
        const __m256i lanes = tail_mask8(n);
        __m256 e = exp8_neg(_mm256_sub_ps(_mm256_maskload_ps(s + i, lanes), vmx));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(lanes));
        _mm256_maskstore_ps(s + i, lanes, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    return 1.0f / hsum8(vsum);
}

// The keys from row `from` (>= n_past, or any for a causal mask) on that query t sees under a causal
// or tree mask, appended in order.
static void new_keys(std::vector<int>& keys, const AttnMask& mask, int t, int T, int from) {
    if (!mask.tree_mask) {
        for (int j = from; j <= mask.n_past + t; j++) keys.push_back(j);
    } else {
        const uint64_t* row = mask.tree_mask + (int64_t)t * mask.mask_words;
        for (int j = 0; j < T; j++)
            if (row[j / 64] >> (j % 64) & 1) keys.push_back(mask.n_past + j);
    }
}

// Visible keys of query t in increasing cache order.
static void visible_keys(std::vector<int>& keys, const AttnMask& mask, int t, int T) {
    keys.clear();
    if (mask.kv_start) {
        for (int j = 0; j < mask.kv_len[t]; j++) keys.push_back(mask.kv_start[t] + j);
        return;
    }
    for (int j = 0; j < mask.n_past; j++) keys.push_back(j);
    new_keys(keys, mask, t, T, mask.n_past);
}

// One query (row qr of head_dim floats, output o) against its keys.
static void attend_query(float* o, const float* qr, const float* kb, const float* vb, const std::vector<int>& keys,
                         float* sc, int kv_dim, int head_dim, float scale) {
    const int nk = (int)keys.size();
    float mx = -INFINITY;
    if (head_dim == 64 || head_dim == 128) {
        mx = hmax8(scores8(sc, qr, kb, keys.data(), nk, kv_dim, head_dim, scale, _mm256_set1_ps(-INFINITY)));
    } else {
        for (int i = 0; i < nk; i++) {
            sc[i] = dot_f32(qr, kb + (int64_t)keys[i] * kv_dim, head_dim) * scale;
            mx = std::max(mx, sc[i]);
        }
    }
    const float inv = softmax_weights(sc, nk, mx);
    if (head_dim == 64)
        weighted_sum<8>(o, sc, inv, vb, keys.data(), nk, kv_dim);
    else if (head_dim == 128)
        weighted_sum<16>(o, sc, inv, vb, keys.data(), nk, kv_dim);
    else {
        for (int d = 0; d < head_dim; d++) o[d] = 0.0f;
        for (int i = 0; i < nk; i++) axpy_f32(o, sc[i] * inv, vb + (int64_t)keys[i] * kv_dim, head_dim);
    }
}

// o_x[32 dc .. 32 dc + 32) += sum_{i in [i0, i1)} (w_x[i] * inv_x) v_i for NG queries x at once: 4 x NG
// accumulators in registers (NG <= 3 with the weights: 15 of AVX2's 16), each V row read from L1 by all
// NG queries. The chains are the per-query ones, resumed from and stored back to the output rows.
template <int NG>
static inline void weighted_block(float* const* o, const float* const* w, const float* inv, const float* vb, int i0,
                                  int i1, int kv_dim, int d0) {
    __m256 acc[NG][4];
#pragma GCC unroll 4
    for (int x = 0; x < NG; x++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) acc[x][c] = _mm256_loadu_ps(o[x] + d0 + 8 * c);
    for (int i = i0; i < i1; i++) {
        const float* v = vb + (int64_t)i * kv_dim + d0;
#pragma GCC unroll 4
        for (int x = 0; x < NG; x++) {
            const __m256 a = _mm256_set1_ps(w[x][i] * inv[x]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) acc[x][c] = _mm256_fmadd_ps(a, _mm256_loadu_ps(v + 8 * c), acc[x][c]);
        }
    }
#pragma GCC unroll 4
    for (int x = 0; x < NG; x++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) _mm256_storeu_ps(o[x] + d0 + 8 * c, acc[x][c]);
}

// The most queries one attend_group call takes (its per-query arrays live on the stack).
constexpr int GROUP_QUERIES_MAX = 64;

// The nq <= GROUP_QUERIES_MAX queries of one KV head listed in qs (heads) and qt (tokens, ascending),
// head_dim 64 or 128. The first ns key rows of kb / vb are visible to all of them: under a causal or tree
// mask the n_past cached ones, and under a causal mask also the new ones up to the first query's token
// (most of a prefill chunk's); each query's further keys come from the mask (new_keys). mask null: a
// per-sequence range (kv_start), the ns rows from kb / vb are all of every query's keys.
// sc: nq rows of `stride` floats for the scores.
static void attend_group(float* out, const float* q, const float* kb, const float* vb, const int* qs, const int* qt,
                         int nq, int ns, const AttnMask* mask, int T, int q_dim, int kv_dim, int head_dim, float scale,
                         float* sc, int stride, std::vector<int>& own) {
    auto own_keys = [&](int x) {  // query x's keys past the shared ones
        own.clear();
        if (mask) new_keys(own, *mask, qt[x], T, ns);
    };
    __m256 vmx[GROUP_QUERIES_MAX];
    float inv[GROUP_QUERIES_MAX];
    const float* qr[GROUP_QUERIES_MAX];
    float* o[GROUP_QUERIES_MAX];
    const float* w[GROUP_QUERIES_MAX];
    for (int x = 0; x < nq; x++) {
        qr[x] = q + (int64_t)qt[x] * q_dim + qs[x] * head_dim;
        o[x] = out + (int64_t)qt[x] * q_dim + qs[x] * head_dim;
        w[x] = sc + (int64_t)x * stride;
        vmx[x] = _mm256_set1_ps(-INFINITY);
    }
    // 1. scores against the shared keys, 8 rows (2 or 4 KB of K) at a time for all queries
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int i = 0; i < ns; i += 8) {
        const float* kp[8];
        for (int j = 0; j < 8; j++) kp[j] = kb + (int64_t)std::min(i + j, ns - 1) * kv_dim;
        for (int j = i + 16; j < std::min(i + 24, ns); j++)  // two blocks ahead (a hint: rows 768 bytes apart
            for (int c = 0; c < head_dim; c += 16)           // in 256-byte pieces defeat the hardware prefetcher)
                _mm_prefetch((const char*)(kb + (int64_t)j * kv_dim + c), _MM_HINT_T0);
        for (int x = 0; x < nq; x++)
            vmx[x] = score_block(sc + (int64_t)x * stride + i, qr[x], kp, ns - i, head_dim, vscale, vmx[x]);
    }
    // 2. each query's scores against its own further keys (at most T), then its softmax weights
    int nk[GROUP_QUERIES_MAX];
    for (int x = 0; x < nq; x++) {
        float* s = sc + (int64_t)x * stride;
        own_keys(x);
        nk[x] = ns + (int)own.size();
        vmx[x] = scores8(s + ns, qr[x], kb, own.data(), (int)own.size(), kv_dim, head_dim, scale, vmx[x]);
        inv[x] = softmax_weights(s, nk[x], hmax8(vmx[x]));
    }
    // 3. sum over the shared keys: blocks of 16 V rows (4 or 8 KB) read by all queries, 3 at a time
    for (int x = 0; x < nq; x++)
        for (int d = 0; d < head_dim; d += 8) _mm256_storeu_ps(o[x] + d, _mm256_setzero_ps());
    for (int i0 = 0; i0 < ns; i0 += 16) {
        const int i1 = std::min(i0 + 16, ns);
        for (int j = i0 + 16; j < std::min(i0 + 32, ns); j++)  // the next block (a hint, as in step 1)
            for (int c = 0; c < head_dim; c += 16) _mm_prefetch((const char*)(vb + (int64_t)j * kv_dim + c), _MM_HINT_T0);
        for (int x = 0; x < nq; x += 3) {
            const int ng = std::min(3, nq - x);
            for (int d0 = 0; d0 < head_dim; d0 += 32) {
                if (ng == 3)
                    weighted_block<3>(o + x, w + x, inv + x, vb, i0, i1, kv_dim, d0);
                else if (ng == 2)
                    weighted_block<2>(o + x, w + x, inv + x, vb, i0, i1, kv_dim, d0);
                else
                    weighted_block<1>(o + x, w + x, inv + x, vb, i0, i1, kv_dim, d0);
            }
        }
    }
    // 4. then each query's own keys, its chains resumed in registers
    for (int x = 0; x < nq; x++) {
        own_keys(x);
        if (head_dim == 64)
            weighted_sum<8>(o[x], w[x] + ns, inv[x], vb, own.data(), (int)own.size(), kv_dim, true);
        else
            weighted_sum<16>(o[x], w[x] + ns, inv[x], vb, own.data(), (int)own.size(), kv_dim, true);
    }
}

void CpuOps::attention(float* out, const float* q, const float* kcache, const float* vcache, int T, int n_heads,
                       int n_kv_heads, int head_dim, const AttnMask& mask) {
    const int kv_dim = n_kv_heads * head_dim, q_dim = n_heads * head_dim, group = n_heads / n_kv_heads;
    int n_keys_max = mask.n_past + T;
    if (mask.kv_start)
        for (int t = 0; t < T; t++) n_keys_max = std::max(n_keys_max, mask.kv_len[t]);
    const float scale = 1.0f / sqrtf((float)head_dim);
    const bool joint = (head_dim == 64 || head_dim == 128) && !attention_per_query_;
    if (joint && (!mask.kv_start || group <= GROUP_QUERIES_MAX)) {
        // jobs, each a KV head and queries that share its first ns keys:
        //  - causal / tree mask: (KV head, chunk of its T * group queries), about two chunks per thread in all;
        //  - per-sequence ranges (Llama::forward_multi: datagen's batched decoding): (token, KV head), the
        //    group's queries sharing the token's key range (read once for all of them, not once per head).
        const bool ranges = mask.kv_start != nullptr;
        const int nq = T * group, threads = pool_.limit();
        const int chunks = std::min(nq, std::max(1, (2 * threads + n_kv_heads - 1) / n_kv_heads));
        const int per = ranges ? group : std::min(GROUP_QUERIES_MAX, (nq + chunks - 1) / chunks);
        const int n_chunks = ranges ? T : (nq + per - 1) / per;
        const int stride = (n_keys_max + 7) / 8 * 8;
        pool_.parallel_for((int64_t)n_kv_heads * n_chunks, [&](int64_t b, int64_t e, int th) {
            std::vector<float>& sc = scratch_[th];
            if (sc.size() < (size_t)per * stride) sc.resize((size_t)per * stride);
            std::vector<int> own;
            own.reserve(T);
            int qs[GROUP_QUERIES_MAX], qt[GROUP_QUERIES_MAX];
            for (int64_t job = b; job < e; job++) {
                const int kvh = (int)(job / n_chunks), r0 = (int)(job % n_chunks) * per, r1 = std::min(nq, r0 + per);
                for (int r = r0; r < r1; r++) {  // query r of the KV head: token r / group, head of the group r % group
                    qt[r - r0] = r / group;
                    qs[r - r0] = kvh * group + r % group;
                }
                // ranges: the chunk is one token's group, its keys the rows of its range alone
                const int64_t row0 = (ranges ? (int64_t)mask.kv_start[qt[0]] * kv_dim : 0) + kvh * head_dim;
                const int ns = ranges ? mask.kv_len[qt[0]] : mask.tree_mask ? mask.n_past : mask.n_past + qt[0] + 1;
                attend_group(out, q, kcache + row0, vcache + row0, qs, qt, r1 - r0, ns, ranges ? nullptr : &mask, T,
                             q_dim, kv_dim, head_dim, scale, sc.data(), stride, own);
            }
        }, (int64_t)4 * per * n_keys_max * head_dim);
        return;
    }
    pool_.parallel_for((int64_t)T * n_heads, [&](int64_t b, int64_t e, int th) {
        std::vector<float>& sc = scratch_[th];
        if ((int)sc.size() < n_keys_max) sc.resize(n_keys_max);
        std::vector<int> keys;
        keys.reserve(n_keys_max);
        for (int64_t job = b; job < e; job++) {
            const int t = (int)(job / n_heads), h = (int)(job % n_heads), kvh = h / group;
            visible_keys(keys, mask, t, T);
            attend_query(out + (int64_t)t * q_dim + h * head_dim, q + (int64_t)t * q_dim + h * head_dim,
                         kcache + kvh * head_dim, vcache + kvh * head_dim, keys, sc.data(), kv_dim, head_dim, scale);
        }
    }, (int64_t)4 * n_keys_max * head_dim);
}

}  // namespace beagle
