// quantize.h: quantization of activation rows for the quantized matmul, in blocks of 32: int16
// (default, ~float accuracy) or int8 (ggml q8_1 style, kept for comparison). cpu_matmul (matmul.cpp)
// quantizes each token row of x once per call; the kernels in matmul.cpp (AVX2) and matmul_avx512.cpp
// read this layout. Both ISAs use the same quantizer, so they see the same q, d, s values.
#pragma once
#include <cstddef>
#include <cstdint>

namespace beagle {

// One token row x (cols floats, cols % 32 == 0) becomes, for each block b of 32 values x_i, with
// QMAX = 127 (bits = 8) or 32767 (bits = 16):
//   d[b] = max_i |x_i| / QMAX                                  (float division)
//   q_i  = round_half_even(x_i * id), id = d[b] ? 1/d[b] : 0   (so |q_i| <= QMAX, see below)
//   s[b] = d[b] * (float)(sum_i q_i)                           (the m * sum(x) term of Q4_1/Q4_0;
//                                                               |sum q| <= 32 * 32767 < 2^24: exact)
// so x_i ~= d[b] * q_i with |x_i - d[b] * q_i| <= d[b] / 2 + 3u|x_i| (u = 2^-24: the roundings of
// 1/d and x * id). |q_i| <= QMAX: x * id <= QMAX (1 + 3u) < QMAX + 0.5 for QMAX <= 32767.
// A NaN in the block makes d[b] NaN (so the matmul outputs it touches are NaN, not silent garbage).
//
// bits = 16: q is int16, 64 bytes per block, stored in "nibble order": position 8k + j (k < 4, j < 8)
//   of block b holds element 2j + {0, 16, 1, 17}[k]. That is the order in which the kernels widen
//   weights to int16 without any shuffle: the 16 bytes of a Q4 block read as 8 dwords, shifted right
//   by 4k and masked with 0x000F000F, give exactly the elements of group k; the 32 int8 of a Q8_0
//   block read as 16 words give the even elements (low bytes, groups 0 and 1) and the odd ones (high
//   bytes, groups 2 and 3) by arithmetic shifts.
// bits = 8: q is int8 in natural order, 32 bytes per block.
// Two options used only by the AVX-512 kernels:
//   interleaved: the blocks of each pair (2k, 2k+1) alternate 4-byte groups (an odd last block pairs
//                with zeros), so that int32 lane l of a 512-bit dot product belongs to block 2k + (l & 1)
//                and [d_w*d_x of 2k, of 2k+1] is one 8-byte broadcast:
//                bits = 8:  the pair's 64 bytes are group 0 of block 2k, group 0 of 2k+1, group 1 of
//                           2k, group 1 of 2k+1, ... (group = 4 consecutive bytes);
//                bits = 16: the pair's 128 bytes are P1 = unpacklo_epi32(A, B), P2 = unpackhi_epi32(A, B)
//                           (512-bit, per 128-bit lane), A and B the 64-byte nibble-order blocks 2k and
//                           2k+1: lane m of P1 = dwords [A 4m, B 4m, A 4m+1, B 4m+1], of P2 the same for
//                           4m+2, 4m+3.
//   corr[g] (bits = 8 only; one int32 per stored group of 4 values) = -128 * (sum of the group's 4 q):
//                the correction for Q8_0 weights offset by +128 to make them unsigned.
// Padding (so kernels may read whole 64-byte vectors): q is zero up to qbytes, d/s are zero up to
// nb_pad blocks, corr is zero up to qbytes / 4 entries.
struct QuantActs {
    int bits = 16;                         // 8 or 16
    int64_t cols = 0, nb = 0, nb_pad = 0;  // nb = cols / 32; nb_pad = nb rounded up to a multiple of 32
    size_t qbytes = 0;                     // bytes of q: 64 (bits = 8) or 128 (16) per block pair
    size_t stride = 0;                     // bytes per token row (multiple of 64)
    size_t off_d = 0, off_s = 0;           // byte offsets of d[] and s[] in a row (q[] is at offset 0)
    size_t off_corr = 0;                   // 0 = not stored
    bool interleaved = false;              // pair layout of q (see above)
    uint8_t* base = nullptr;               // 64-byte aligned, T * stride bytes
};

// Fill the layout fields of a for rows of `cols` values (cols % 32 == 0); base is left alone.
// bits: 8 or 16; with_corr applies to bits = 8 only (Error if set with 16).
void quant_acts_layout(QuantActs& a, int64_t cols, int bits, bool interleaved, bool with_corr);
// Quantize x (a.cols floats) into token row t of a.
void quantize_act_row(const QuantActs& a, const float* x, int64_t t);
// Blocks [b0, b1) of that (x: the whole row), for the plain int16 layout (16 bits, not interleaved; else
// Error): every block depends on its own 32 values only, so threads may split a row's blocks. The call
// whose b1 is a.nb also zeroes the row's padding. The same bytes as quantize_act_row.
void quantize_act_blocks(const QuantActs& a, const float* x, int64_t t, int64_t b0, int64_t b1);

// Element of block position p (0..31) in the int16 nibble order above.
static inline int q16_element(int p) { return 2 * (p % 8) + (p / 8 == 1 ? 16 : p / 8 == 2 ? 1 : p / 8 == 3 ? 17 : 0); }

static inline int8_t* qa_q(const QuantActs& a, int64_t t) { return (int8_t*)(a.base + (size_t)t * a.stride); }
static inline int16_t* qa_q16(const QuantActs& a, int64_t t) { return (int16_t*)(a.base + (size_t)t * a.stride); }
static inline float* qa_d(const QuantActs& a, int64_t t) { return (float*)(a.base + (size_t)t * a.stride + a.off_d); }
static inline float* qa_s(const QuantActs& a, int64_t t) { return (float*)(a.base + (size_t)t * a.stride + a.off_s); }
static inline int32_t* qa_corr(const QuantActs& a, int64_t t) {
    return (int32_t*)(a.base + (size_t)t * a.stride + a.off_corr);
}

}  // namespace beagle
