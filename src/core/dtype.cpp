// dtype.cpp: scalar reference dequantization of one stored row into f32, and Q8_0 quantization (tensor.h).
// Callers: `beagle info --dump-tensor`, loaders' tests, and reference paths of the CPU backend.
// Block layouts follow GGML: Q8_0 x = d*q; Q4_0 x = d*(q-8); Q4_1 x = d*q + m; in Q4 blocks
// element j (j < 16) is the low nibble of qs[j] and element j+16 its high nibble.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common.h"
#include "tensor.h"

namespace beagle {

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
    if (n < 0 || n % QK != 0) fail("quantize_row_q8_0: %lld elements, expected a multiple of %d", (long long)n, QK);
    uint8_t* p = (uint8_t*)dst;
    for (int64_t b = 0; b < n / QK; b++) {
        const float* x = src + b * QK;
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        BlockQ8_0 blk;
        blk.d = f32_to_f16(d);
        for (int j = 0; j < QK; j++) blk.qs[j] = (int8_t)std::round(x[j] * id);
        memcpy(p + b * sizeof(BlockQ8_0), &blk, sizeof blk);
    }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
    if (n < 0) fail("dequantize_row: negative length %lld", (long long)n);
    if (dtype_is_quantized(t) && n % QK != 0)
        fail("dequantize_row: %s row of %lld elements is not a multiple of the block size %d", dtype_name(t),
             (long long)n, QK);
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
