// attention.cpp: the target's self-attention over the KV cache (ops.h attention: causal, tree or
// per-sequence masks, GQA). Scores 8 keys at a time (dot8_keys), softmax weights by exp8_neg, the
// weighted sum of V rows in registers: a query's result does not depend on T (batch invariance).
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
template <int ND>
static inline void weighted_sum(float* o, const float* w, float inv, const float* vb, const int* keys, int nk,
                                int kv_dim) {
    // (the d loops are unrolled by force: at -O2 GCC otherwise keeps acc[] in memory, a store-to-load
    // round trip in every FMA chain)
    __m256 acc[ND];
#pragma GCC unroll 16
    for (int d = 0; d < ND; d++) acc[d] = _mm256_setzero_ps();
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

void CpuOps::attention(float* out, const float* q, const float* kcache, const float* vcache, int T, int n_heads,
                       int n_kv_heads, int head_dim, const AttnMask& mask) {
    int kv_dim = n_kv_heads * head_dim, q_dim = n_heads * head_dim, group = n_heads / n_kv_heads;
    int n_keys_max = mask.n_past + T;
    if (mask.kv_start)
        for (int t = 0; t < T; t++) n_keys_max = std::max(n_keys_max, mask.kv_len[t]);
    float scale = 1.0f / sqrtf((float)head_dim);
    pool_.parallel_for((int64_t)T * n_heads, [&](int64_t b, int64_t e, int th) {
        std::vector<float>& sc = scratch_[th];
        if ((int)sc.size() < n_keys_max) sc.resize(n_keys_max);
        std::vector<int> keys;
        keys.reserve(n_keys_max);
        for (int64_t job = b; job < e; job++) {
            int t = (int)(job / n_heads), h = (int)(job % n_heads), kvh = h / group;
            const float* qr = q + (int64_t)t * q_dim + h * head_dim;
            float* o = out + (int64_t)t * q_dim + h * head_dim;
            // visible keys in increasing cache order
            keys.clear();
            if (mask.kv_start) {
                for (int j = 0; j < mask.kv_len[t]; j++) keys.push_back(mask.kv_start[t] + j);
            } else {
                for (int j = 0; j < mask.n_past; j++) keys.push_back(j);
                if (!mask.tree_mask) {
                    for (int j = 0; j <= t; j++) keys.push_back(mask.n_past + j);
                } else {
                    const uint64_t* row = mask.tree_mask + (int64_t)t * mask.mask_words;
                    for (int j = 0; j < T; j++)
                        if (row[j / 64] >> (j % 64) & 1) keys.push_back(mask.n_past + j);
                }
            }
            int nk = (int)keys.size();
            float mx = -INFINITY;
            const float* kb = kcache + kvh * head_dim;
            if (head_dim == 64 || head_dim == 128) {  // 8 keys at a time (dot8_keys); the tail repeats the last key
                const __m256 vscale = _mm256_set1_ps(scale);
                __m256 vmx = _mm256_set1_ps(-INFINITY);
                for (int i = 0; i < nk; i += 8) {
                    const float* kp[8];
                    for (int j = 0; j < 8; j++) kp[j] = kb + (int64_t)keys[std::min(i + j, nk - 1)] * kv_dim;
                    for (int j = i + 32; j < std::min(i + 40, nk); j++)  // four blocks ahead: rows not yet in cache
                        for (int c = 0; c < head_dim; c += 16) _mm_prefetch((const char*)(kb + (int64_t)keys[j] * kv_dim + c), _MM_HINT_T0);
                    __m256 s8 = _mm256_mul_ps(head_dim == 64 ? dot8_keys<8>(qr, kp) : dot8_keys<16>(qr, kp), vscale);
                    vmx = _mm256_max_ps(vmx, s8);  // repeated last key: no effect on the max
                    if (i + 8 <= nk) {
                        _mm256_storeu_ps(sc.data() + i, s8);
                    } else {
                        alignas(32) float tmp[8];
                        _mm256_store_ps(tmp, s8);
                        for (int j = 0; i + j < nk; j++) sc[i + j] = tmp[j];
                    }
                }
                alignas(32) float m8[8];
                _mm256_store_ps(m8, vmx);
                for (int j = 0; j < 8; j++) mx = std::max(mx, m8[j]);
            } else {
                for (int i = 0; i < nk; i++) {
                    float s = dot_f32(qr, kb + (int64_t)keys[i] * kv_dim, head_dim) * scale;
                    sc[i] = s;
                    if (s > mx) mx = s;
                }
            }
            // weights e^(s - max) in chunks of 8 (the last one padded, its extra lanes zeroed); their sum
            // in 8 lanes then hsum8: one fixed order for a given key count
            const __m256 vmx = _mm256_set1_ps(mx);
            __m256 vsum = _mm256_setzero_ps();
            for (int i = 0; i < nk; i += 8) {
                const int n = std::min(8, nk - i);
                const __m256i lanes = tail_mask8(n);
                __m256 e = exp8_neg(_mm256_sub_ps(_mm256_maskload_ps(sc.data() + i, lanes), vmx));
                e = _mm256_and_ps(e, _mm256_castsi256_ps(lanes));
                _mm256_maskstore_ps(sc.data() + i, lanes, e);
                vsum = _mm256_add_ps(vsum, e);
            }
            const float inv = 1.0f / hsum8(vsum);
            const float* vb = vcache + kvh * head_dim;
            if (head_dim == 64)
                weighted_sum<8>(o, sc.data(), inv, vb, keys.data(), nk, kv_dim);
            else if (head_dim == 128)
                weighted_sum<16>(o, sc.data(), inv, vb, keys.data(), nk, kv_dim);
            else {
                for (int d = 0; d < head_dim; d++) o[d] = 0.0f;
                for (int i = 0; i < nk; i++) axpy_f32(o, sc[i] * inv, vb + (int64_t)keys[i] * kv_dim, head_dim);
            }
        }
    }, (int64_t)4 * n_keys_max * head_dim);
}

}  // namespace beagle
