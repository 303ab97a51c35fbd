// dtype.cpp: scalar reference dequantization of one stored row into f32 (tensor.h); quantization is in
// quantize.cpp.
// Callers: `beagle info --dump-tensor`, loaders' tests, and reference paths of the CPU backend.
// Block layouts follow GGML (dtype.h): Q8_0 x = d*q; Q4_0 x = d*(q-8); Q4_1 x = d*q + m; Q5_0
// x = d*(q-16); Q5_1 x = d*q + m; Q4_K/Q5_K x = (d*sc)*q - dmin*mn; Q6_K x = (d*sc)*(q-32). Every
// value is the float32 expression written here, in this order: the same operations as ggml's and the
// gguf package's dequantizers (products of a half and a small integer are exact in float32).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common.h"
#include "tensor.h"

namespace beagle {

void kquant_scale_min(const uint8_t* scales, int j, int* sc, int* mn) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *mn = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4;
        *mn = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
    }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
    if (n < 0) fail("dequantize_row: negative length %lld", (long long)n);
    const int be = dtype_block_elems(t);
    if (n % be != 0)
        fail("dequantize_row: %s row of %lld elements is not a multiple of the block size %d", dtype_name(t),
             (long long)n, be);
    const uint8_t* p = (const uint8_t*)src;
    switch (t) {
        case DType::F32:
            memcpy(dst, src, (size_t)n * 4);
            return;
        case DType::F16:
            for (int64_t i = 0; i < n; i++) {
                uint16_t h;
                memcpy(&h, p + 2 * i, 2);
                dst[i] = f16_to_f32(h);
            }
            return;
        case DType::BF16:
            for (int64_t i = 0; i < n; i++) {
                uint16_t h;
                memcpy(&h, p + 2 * i, 2);
                dst[i] = bf16_to_f32(h);
            }
            return;
        case DType::Q8_0:
            for (int64_t b = 0; b < n / QK; b++) {
                BlockQ8_0 blk;
                memcpy(&blk, p + b * sizeof(BlockQ8_0), sizeof blk);
                float d = f16_to_f32(blk.d);
                for (int j = 0; j < QK; j++) dst[b * QK + j] = d * (float)blk.qs[j];
            }
            return;
        case DType::Q4_0:
            for (int64_t b = 0; b < n / QK; b++) {
                BlockQ4_0 blk;
                memcpy(&blk, p + b * sizeof(BlockQ4_0), sizeof blk);
                float d = f16_to_f32(blk.d);
                for (int j = 0; j < QK / 2; j++) {
                    dst[b * QK + j] = d * (float)((int)(blk.qs[j] & 0x0F) - 8);
                    dst[b * QK + j + QK / 2] = d * (float)((int)(blk.qs[j] >> 4) - 8);
                }
            }
            return;
        case DType::Q4_1:
            for (int64_t b = 0; b < n / QK; b++) {
                BlockQ4_1 blk;
                memcpy(&blk, p + b * sizeof(BlockQ4_1), sizeof blk);
                float d = f16_to_f32(blk.d), m = f16_to_f32(blk.m);
                for (int j = 0; j < QK / 2; j++) {
                    dst[b * QK + j] = d * (float)(blk.qs[j] & 0x0F) + m;
                    dst[b * QK + j + QK / 2] = d * (float)(blk.qs[j] >> 4) + m;
                }
            }
            return;
        case DType::Q5_0:
            for (int64_t b = 0; b < n / QK; b++) {
                BlockQ5_0 blk;
                memcpy(&blk, p + b * sizeof blk, sizeof blk);
                const float d = f16_to_f32(blk.d);
                for (int e = 0; e < QK; e++) dst[b * QK + e] = d * (float)(q5_value(blk.qh, blk.qs, e) - 16);
            }
            return;
        case DType::Q5_1:
            for (int64_t b = 0; b < n / QK; b++) {
                BlockQ5_1 blk;
                memcpy(&blk, p + b * sizeof blk, sizeof blk);
                const float d = f16_to_f32(blk.d), m = f16_to_f32(blk.m);
                for (int e = 0; e < QK; e++) {
                    const float dq = d * (float)q5_value(blk.qh, blk.qs, e);  // exact: 11-bit times 5-bit
                    dst[b * QK + e] = dq + m;
                }
            }
            return;
        case DType::Q4_K:
        case DType::Q5_K:
            for (int64_t b = 0; b < n / QK_K; b++) {
                const uint8_t* blk = p + b * dtype_block_bytes(t);
                uint16_t d16, m16;
                memcpy(&d16, blk, 2);
                memcpy(&m16, blk + 2, 2);
                const float d = f16_to_f32(d16), dmin = f16_to_f32(m16);
                const uint8_t* scales = blk + 4;
                const uint8_t* qh = blk + 16;                              // Q5_K only
                const uint8_t* qs = blk + (t == DType::Q5_K ? 48 : 16);
                for (int j = 0; j < 8; j++) {
                    int sc, mn;
                    kquant_scale_min(scales, j, &sc, &mn);
                    const float a = d * (float)sc, m = dmin * (float)mn;  // both exact
                    for (int l = 0; l < 32; l++) {
                        const int e = 32 * j + l;
                        const int q = t == DType::Q5_K ? q5k_value(qh, qs, e) : q4k_value(qs, e);
                        const float aq = a * (float)q;  // exact: at most 11 + 6 + 5 significant bits
                        dst[b * QK_K + e] = aq - m;
                    }
                }
            }
            return;
        case DType::Q6_K:
            for (int64_t b = 0; b < n / QK_K; b++) {
                BlockQ6_K blk;
                memcpy(&blk, p + b * sizeof blk, sizeof blk);
                const float d = f16_to_f32(blk.d);
                for (int s = 0; s < 16; s++) {
                    const float a = d * (float)blk.scales[s];  // exact
                    for (int l = 0; l < 16; l++) {
                        const int e = 16 * s + l;
                        dst[b * QK_K + e] = a * (float)(q6k_value(blk.ql, blk.qh, e) - 32);  // one rounding
                    }
                }
            }
            return;
        case DType::I32:
            for (int64_t i = 0; i < n; i++) {
                int32_t v;
                memcpy(&v, p + 4 * i, 4);
                dst[i] = (float)v;
            }
            return;
    }
    fail("dequantize_row: unknown dtype %d", (int)t);
}

}  // namespace beagle
