// tensor.h: a named, typed view of stored weights (host memory: mmapped file or owned buffer).
// Shapes are row-major, outermost first: a weight matrix W with y = W x has shape {out, in}.
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dtype.h"

namespace beagle {

struct Tensor {
    std::string name;
    DType dtype = DType::F32;
    int ndim = 0;
    int64_t shape[4] = {1, 1, 1, 1};
    const void* data = nullptr;  // host pointer, lives as long as the owning ModelFile
    uint64_t nbytes = 0;

    int64_t numel() const {
        int64_t n = 1;
        for (int i = 0; i < ndim; i++) n *= shape[i];
        return n;
    }
    int64_t rows() const { return ndim <= 1 ? 1 : numel() / shape[ndim - 1]; }
    int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }
    uint64_t row_bytes() const { return dtype_row_bytes(dtype, (uint64_t)cols()); }
    const uint8_t* row(int64_t r) const { return (const uint8_t*)data + (uint64_t)r * row_bytes(); }
    std::string shape_str() const {
        std::string s = "[";
        for (int i = 0; i < ndim; i++) s += (i ? ", " : "") + std::to_string(shape[i]);
        return s + "]";
    }
};

// Dequantize one row (n elements) of any stored dtype into f32. Reference path (scalar).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// The integer parts of the 5-bit and k-quant layouts (dtype.h), element e of one block:
// kquant_scale_min: sub-block j's 6-bit scale and min of Q4_K/Q5_K; q5_value: Q5_0/Q5_1 q (0..31);
// q4k_value / q5k_value: Q4_K (0..15) / Q5_K (0..31) q; q6k_value: Q6_K q (0..63, before the -32).
void kquant_scale_min(const uint8_t* scales, int j, int* sc, int* mn);
// (inline: the CPU backend's packing calls them once per weight)
inline int q5_value(const uint8_t* qh, const uint8_t* qs, int e) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const int lo = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
    return lo | (int)((h >> e) & 1) << 4;
}

inline int q4k_value(const uint8_t* qs, int e) {
    const int j = e / 32, l = e % 32;
    return (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 15;
}

inline int q5k_value(const uint8_t* qh, const uint8_t* qs, int e) { return q4k_value(qs, e) | ((qh[e % 32] >> (e / 32)) & 1) << 4; }

inline int q6k_value(const uint8_t* ql, const uint8_t* qh, int e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int lo = (ql[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
    const int hi = (qh[32 * h + l] >> (2 * k)) & 3;
    return lo | hi << 4;
}

}  // namespace beagle
