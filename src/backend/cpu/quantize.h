// quantize.h: int8 quantization of activation rows for the quantized matmul (blocks of 32 like
// ggml's q8_1). cpu_matmul (matmul.cpp) quantizes each token row of x once per call; the kernels in
// matmul.cpp (AVX2) and matmul_avx512.cpp read this layout. Both ISAs use the same quantizer.
#pragma once
#include <cstddef>
#include <cstdint>

namespace beagle {

// One token row x (cols floats, cols % 32 == 0) becomes, for each block b of 32 values x_i:
//   d[b] = max_i |x_i| / 127                                  (float division)
//   q_i  = round_half_even(x_i * id), id = d[b] ? 1/d[b] : 0  (so |q_i| <= 127)
//   s[b] = d[b] * (float)(sum_i q_i)                          (the m * sum(x) term of Q4_1/Q4_0)
// so x_i ~= d[b] * q_i with |x_i - d[b] * q_i| <= d[b] / 2 (plus one float rounding of x_i * id).
// A NaN in the block makes d[b] NaN (so the matmul outputs it touches are NaN, not silent garbage).
// Options used only by the AVX-512 kernels:
//   interleaved: within each block pair (2k, 2k+1) the 64 stored bytes alternate 4-byte groups of the
//                two blocks: group j of block 2k, group j of block 2k+1, group j+1 of block 2k, ...
//                (an odd last block pairs with zeros). Then int32 lane l of a 64-byte dot product
//                belongs to block 2k + (l & 1), and [d_w*d_x of 2k, of 2k+1] is one 8-byte broadcast.
//   corr[g] (one int32 per stored group of 4 values) = -128 * (sum of the group's 4 q): the
//                correction for Q8_0 weights offset by +128 to make them unsigned.
// Padding (so kernels may read whole 64-byte pairs): q is zero up to qbytes, d/s are zero up to
// nb_pad blocks, corr is zero up to qbytes / 4 entries.
struct QuantActs {
    int64_t cols = 0, nb = 0, nb_pad = 0;  // nb = cols / 32; nb_pad = nb rounded up to a multiple of 32
    size_t qbytes = 0;                     // cols rounded up to a multiple of 64
    size_t stride = 0;                     // bytes per token row (multiple of 64)
    size_t off_d = 0, off_s = 0;           // byte offsets of d[] and s[] in a row (q[] is at offset 0)
    size_t off_corr = 0;                   // 0 = not stored
    bool interleaved = false;              // pair layout of q (see above)
    uint8_t* base = nullptr;               // 64-byte aligned, T * stride bytes
};

// Fill the layout fields of a for rows of `cols` values (cols % 32 == 0); base is left alone.
void quant_acts_layout(QuantActs& a, int64_t cols, bool interleaved, bool with_corr);
// Quantize x (a.cols floats) into token row t of a.
void quantize_act_row(const QuantActs& a, const float* x, int64_t t);

static inline int8_t* qa_q(const QuantActs& a, int64_t t) { return (int8_t*)(a.base + (size_t)t * a.stride); }
static inline float* qa_d(const QuantActs& a, int64_t t) { return (float*)(a.base + (size_t)t * a.stride + a.off_d); }
static inline float* qa_s(const QuantActs& a, int64_t t) { return (float*)(a.base + (size_t)t * a.stride + a.off_s); }
static inline int32_t* qa_corr(const QuantActs& a, int64_t t) {
    return (int32_t*)(a.base + (size_t)t * a.stride + a.off_corr);
}

}  // namespace beagle
