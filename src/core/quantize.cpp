// quantize.cpp: ggml's reference weight quantizers (quantize.h), block by block. The k-quants fit
// each sub-block's scale (and min) by a small search; the comments give the math of each step.
#include "quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common.h"
#include "tensor.h"

namespace beagle {

namespace {

// Round to the nearest integer, ties to even (|v| < 2^22): ggml's nearest_int, whose float trick
// rounds the same way.
inline int nearest(float v) { return (int)std::nearbyint(v); }

// The element of largest magnitude (the first, on ties), with its sign: the legacy types and Q6_K
// scale so that this element maps to the most negative level.
inline float signed_absmax(const float* x, int n) {
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < n; i++)
        if (amax < std::fabs(x[i])) {
            amax = std::fabs(x[i]);
            m = x[i];
        }
    return m;
}

void q8_0_block(const float* x, BlockQ8_0* b) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = f32_to_f16(d);
    for (int j = 0; j < QK; j++) b->qs[j] = (int8_t)std::round(x[j] * id);
}

// Q4_0 (levels 16, offset 8) and Q5_0 (32, 16): x ~ d (q - offset), d = m / -offset. q of element j
// goes to the low nibble of byte j (j < 16) or the high nibble of byte j - 16; Q5_0's fifth bits to qh.
template <int BITS>
void q_0_quants(const float* x, float* d_out, uint8_t* q) {
    constexpr int offset = 1 << (BITS - 1), top = (1 << BITS) - 1;
    const float d = signed_absmax(x, QK) / -(float)offset;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = d;
    for (int j = 0; j < QK; j++) q[j] = (uint8_t)std::min(top, (int)(int8_t)(x[j] * id + ((float)offset + 0.5f)));
}

// Q4_1 and Q5_1: x ~ d q + m over [min, max].
template <int BITS>
void q_1_quants(const float* x, float* d_out, float* m_out, uint8_t* q) {
    constexpr int top = (1 << BITS) - 1;
    float lo = x[0], hi = x[0];
    for (int j = 1; j < QK; j++) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
    }
    const float d = (hi - lo) / (float)top, id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = d;
    *m_out = lo;
    for (int j = 0; j < QK; j++) {
        const float v = (x[j] - lo) * id + 0.5f;
        q[j] = BITS == 4 ? (uint8_t)std::min(top, (int)(int8_t)v) : (uint8_t)v;
    }
}

void pack_nibbles_32(const uint8_t* q, uint8_t* qs) {
    for (int j = 0; j < QK / 2; j++) qs[j] = (uint8_t)((q[j] & 15) | (q[j + QK / 2] & 15) << 4);
}

uint32_t fifth_bits_32(const uint8_t* q) {
    uint32_t h = 0;
    for (int j = 0; j < QK; j++) h |= (uint32_t)((q[j] >> 4) & 1) << j;
    return h;
}

// One legacy block (Q4_0 / Q5_0: BITS 4 / 5, no min; Q4_1 / Q5_1: with the min): scales in f16, the low
// four bits of q packed in nibbles, Q5's fifth bits in qh.
template <class Block, int BITS, bool WITH_MIN>
void legacy_block(const float* x, uint8_t* o) {
    Block k;
    uint8_t q[QK];
    float d, m = 0;
    if constexpr (WITH_MIN) q_1_quants<BITS>(x, &d, &m, q);
    else q_0_quants<BITS>(x, &d, q);
    k.d = f32_to_f16(d);
    if constexpr (WITH_MIN) k.m = f32_to_f16(m);
    if constexpr (BITS == 5) {
        const uint32_t h = fifth_bits_32(q);
        memcpy(k.qh, &h, 4);
    }
    pack_nibbles_32(q, k.qs);
    memcpy(o, &k, sizeof k);
}

// Fit x ~ scale * L - mn over one sub-block (L in 0..nmax, mn >= 0) minimising sum_i w_i (scale L_i -
// mn - x_i)^2: first L from the range [min(x, 0), max x]; then for each trial level count nmax + rmin +
// rdelta * s (s = 0..nstep) the levels are re-rounded and (scale, -mn) solved in closed form by
// weighted least squares (mn clamped to 0 when the fit wants a positive offset), keeping the trial with
// the least error. Returns scale; *mn_out = mn; L holds the levels of the best trial.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* mn_out, float rmin,
                    float rdelta, int nstep) {
    float lo = x[0], hi = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *mn_out = -lo;
        return 0.0f;
    }
    float iscale = (float)nmax / (hi - lo);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * L[i] + lo - x[i];
        best_error += w[i] * (diff * diff);
    }
    uint8_t trial[32];
    for (int s = 0; s <= nstep; s++) {
        iscale = (rmin + rdelta * (float)s + (float)nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax);
            trial[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_lo = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_lo > 0) {
            this_lo = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * trial[i] + this_lo - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best_error) {
            memcpy(L, trial, (size_t)n);
            best_error = err;
            scale = this_scale;
            lo = this_lo;
        }
    }
    *mn_out = -lo;
    return scale;
}

// Q4_K (BITS 4: 20 trials from nmax - 1) and Q5_K (5: 15 trials from nmax - 0.5), one super-block.
// Sub-block j's (scale_j, mn_j) become 6-bit sc_j = round(63 scale_j / max scale), mn_j likewise, with
// d = max scale / 63 and dmin = max mn / 63 in f16; the levels are then re-rounded against d sc_j and
// dmin mn_j as stored, so the error is that of the stored scales.
template <int BITS>
void kquant_levels(const float* x, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales, uint8_t* L) {
    constexpr int nmax = (1 << BITS) - 1;
    const float rmin = BITS == 4 ? -1.0f : -0.5f;
    const int nstep = BITS == 4 ? 20 : 15;
    float scale[8], mn[8], w[32];
    float max_scale = 0, max_mn = 0;
    for (int j = 0; j < 8; j++) {
        const float* xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + std::fabs(xs[l]);
        scale[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mn[j], rmin, 0.1f, nstep);
        if (scale[j] > max_scale) max_scale = scale[j];
        if (mn[j] > max_mn) max_mn = mn[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_mn = max_mn > 0 ? 63.f / max_mn : 0.f;
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        // the 6-bit codes; ggml stores nearest() through a uint8_t before capping at 63
        const uint8_t ls = std::min<uint8_t>(63, (uint8_t)nearest(inv_scale * scale[j]));
        const uint8_t lm = std::min<uint8_t>(63, (uint8_t)nearest(inv_mn * mn[j]));
        if (j < 4) {
            scales[j] = ls;
            scales[j + 4] = lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = f32_to_f16(max_scale / 63.f);
    *dmin_out = f32_to_f16(max_mn / 63.f);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        kquant_scale_min(scales, j, &sc, &m);
        const float d = f16_to_f32(*d_out) * (float)sc;
        if (d == 0.0f) continue;  // the fit's levels stay
        const float dm = f16_to_f32(*dmin_out) * (float)m;
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)std::clamp(nearest((x[32 * j + i] + dm) / d), 0, nmax);
    }
}

// Levels of one Q6_K sub-block (16 values, nmax 32): x ~ scale (L - 32) with the x^2-weighted error
// least over the trial level counts 32 + 0.1 s (s = -9..9); the first trial is -32 at the element of
// largest magnitude. Returns scale (0 for an all-zero sub-block).
float q6k_fit(const float* x, int8_t* L) {
    constexpr int n = 16, nmax = 32;
    const float m = signed_absmax(x, n);
    if (std::fabs(m) < 1e-15f) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    auto sums = [&](float iscale, float* sumlx, float* suml2, bool store) {
        *sumlx = *suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
            if (store) L[i] = (int8_t)(l + nmax);
            const float w = x[i] * x[i];
            *sumlx += w * x[i] * (float)l;
            *suml2 += w * (float)l * (float)l;
        }
    };
    float sumlx, suml2;
    sums(-(float)nmax / m, &sumlx, &suml2, true);
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int s = -9; s <= 9; s++) {
        if (s == 0) continue;
        const float iscale = -((float)nmax + 0.1f * (float)s) / m;
        sums(iscale, &sumlx, &suml2, false);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            sums(iscale, &sumlx, &suml2, true);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// One Q6_K super-block: sc_j = round(-128 scale_j / s*) in int8 with s* the scale of largest magnitude,
// d = -s* / 128 in f16, the levels re-rounded against d sc_j.
void q6k_block(const float* x, BlockQ6_K* b) {
    int8_t L[QK_K];
    float scale[16];
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        scale[j] = q6k_fit(x + 16 * j, L + 16 * j);
        if (std::fabs(scale[j]) > max_abs) {
            max_abs = std::fabs(scale[j]);
            max_scale = scale[j];
        }
    }
    memset(b, 0, sizeof *b);
    if (max_abs < 1e-15f) return;  // d = 0: every element decodes to 0
    const float iscale = -128.f / max_scale;
    b->d = f32_to_f16(1 / iscale);
    for (int j = 0; j < 16; j++) b->scales[j] = (int8_t)std::min(127, nearest(iscale * scale[j]));
    for (int j = 0; j < 16; j++) {
        const float d = f16_to_f32(b->d) * (float)b->scales[j];
        if (d == 0.0f) continue;
        for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(std::clamp(nearest(x[16 * j + i] / d), -32, 31) + 32);
    }
    // each half of 128: ql byte l holds elements l (low nibble) and l + 64 (high), byte l + 32 holds l + 32
    // and l + 96; qh byte l holds the top two bits of l, l + 32, l + 64, l + 96
    for (int h = 0; h < 2; h++) {
        const int8_t* q = L + 128 * h;
        uint8_t* ql = b->ql + 64 * h;
        uint8_t* qh = b->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((q[l] & 15) | (q[l + 64] & 15) << 4);
            ql[l + 32] = (uint8_t)((q[l + 32] & 15) | (q[l + 96] & 15) << 4);
            qh[l] = (uint8_t)((q[l] >> 4) | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
        }
    }
}

}  // namespace

void quantize_row_q8_0(const float* src, void* dst, int64_t n) { quantize_row(DType::Q8_0, src, dst, n); }

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
    const int64_t be = dtype_block_elems(t);
    if (n < 0 || n % be != 0)
        fail("quantize_row: %lld elements, expected a multiple of %lld for %s", (long long)n, (long long)be, dtype_name(t));
    uint8_t* out = (uint8_t*)dst;
    const int64_t nb = n / be;
    const size_t bb = dtype_block_bytes(t);
    for (int64_t b = 0; b < nb; b++) {
        const float* x = src + b * be;
        uint8_t* o = out + (size_t)b * bb;
        uint8_t q[QK_K];
        switch (t) {
            case DType::F32: memcpy(o, x, 4); break;
            case DType::F16: { uint16_t h = f32_to_f16(*x); memcpy(o, &h, 2); break; }
            case DType::BF16: { uint16_t h = f32_to_bf16(*x); memcpy(o, &h, 2); break; }
            case DType::Q8_0: { BlockQ8_0 k; q8_0_block(x, &k); memcpy(o, &k, sizeof k); break; }
            case DType::Q4_0: legacy_block<BlockQ4_0, 4, false>(x, o); break;
            case DType::Q5_0: legacy_block<BlockQ5_0, 5, false>(x, o); break;
            case DType::Q4_1: legacy_block<BlockQ4_1, 4, true>(x, o); break;
            case DType::Q5_1: legacy_block<BlockQ5_1, 5, true>(x, o); break;
            case DType::Q4_K: {
                BlockQ4_K k;
                kquant_levels<4>(x, &k.d, &k.dmin, k.scales, q);
                // each 64 elements: byte l of its 32 holds element l (low nibble) and l + 32 (high)
                for (int c = 0; c < 4; c++)
                    for (int l = 0; l < 32; l++) k.qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + l + 32] << 4);
                memcpy(o, &k, sizeof k);
                break;
            }
            case DType::Q5_K: {
                BlockQ5_K k;
                kquant_levels<5>(x, &k.d, &k.dmin, k.scales, q);
                // as Q4_K for the low four bits; bit 2c (2c + 1) of qh[l] is the fifth bit of element
                // 64c + l (64c + 32 + l)
                memset(k.qh, 0, sizeof k.qh);
                for (int c = 0; c < 4; c++)
                    for (int l = 0; l < 32; l++) {
                        const int lo = q[64 * c + l], hi = q[64 * c + l + 32];
                        k.qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
                        k.qs[32 * c + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                    }
                memcpy(o, &k, sizeof k);
                break;
            }
            case DType::Q6_K: { BlockQ6_K k; q6k_block(x, &k); memcpy(o, &k, sizeof k); break; }
            default: fail("quantize_row: cannot quantize to %s", dtype_name(t));
        }
    }
}

}  // namespace beagle
