// dtype.h: element types of stored tensors (GGUF-compatible block layouts) and half conversions.
// Quantized types are blocks of 32 elements (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) or super-blocks of 256
// (the k-quants Q4_K, Q5_K, Q6_K); a row of n elements is n / dtype_block_elems(t) blocks.
#pragma once
#include <cstdint>
#include <cstring>

namespace beagle {

enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_1, I32, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K };

constexpr int QK = 32;    // elements per quantized block
constexpr int QK_K = 256; // elements per k-quant super-block

struct BlockQ8_0 { uint16_t d; int8_t qs[QK]; };          // x = d * q
struct BlockQ4_0 { uint16_t d; uint8_t qs[QK / 2]; };     // x = d * (q - 8); low nibbles = elems 0..15
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[QK / 2]; };  // x = d * q + m
// 5-bit: element j (j < 16) is the low nibble of qs[j], element j + 16 its high nibble; bit j of the
// little-endian word qh is element j's fifth bit (value 16).
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; };     // x = d * (q - 16)
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; };  // x = d * q + m
// k-quants: super-blocks of 256 = 8 sub-blocks of 32 (Q4_K, Q5_K) or 16 of 16 (Q6_K).
//  Q4_K / Q5_K: sub-block j has a 6-bit scale sc[j] and a 6-bit min mn[j], packed in scales[12]:
//    j < 4: sc = scales[j] & 63, mn = scales[j + 4] & 63;
//    j >= 4: sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4, mn = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4.
//    x = (d * sc[j]) * q - dmin * mn[j]. 4-bit q: qs[32 p + l] holds element l of sub-block 2p (low
//    nibble) and of 2p + 1 (high nibble). Q5_K adds bit j of qh[l] as the fifth bit (16) of element l of
//    sub-block j.
//  Q6_K: x = (d * scales[s]) * (q - 32), s = element / 16, q 6-bit; in each half h of 128 elements,
//    element 128 h + 32 k + l (k < 4, l < 32) has low 4 bits ql[64 h + l + 32 (k & 1)] >> 4 (k >> 1)
//    and high 2 bits (qh[32 h + l] >> 2 k) & 3.
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block");
static_assert(sizeof(BlockQ5_0) == 22, "q5_0 block");
static_assert(sizeof(BlockQ5_1) == 24, "q5_1 block");
static_assert(sizeof(BlockQ4_K) == 144, "q4_k block");
static_assert(sizeof(BlockQ5_K) == 176, "q5_k block");
static_assert(sizeof(BlockQ6_K) == 210, "q6_k block");
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block");
static_assert(sizeof(BlockQ4_1) == 20, "q4_1 block");

inline const char* dtype_name(DType t) {
    switch (t) {
        case DType::F32: return "F32";
        case DType::F16: return "F16";
        case DType::BF16: return "BF16";
        case DType::Q8_0: return "Q8_0";
        case DType::Q4_0: return "Q4_0";
        case DType::Q4_1: return "Q4_1";
        case DType::I32: return "I32";
        case DType::Q5_0: return "Q5_0";
        case DType::Q5_1: return "Q5_1";
        case DType::Q4_K: return "Q4_K";
        case DType::Q5_K: return "Q5_K";
        case DType::Q6_K: return "Q6_K";
    }
    return "?";
}

// Elements per block: 1 for unquantized types, 32, or 256 (k-quants).
inline int dtype_block_elems(DType t) {
    switch (t) {
        case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: return QK;
        case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return QK_K;
        default: return 1;
    }
}
// Bytes per block (per element for unquantized types).
inline uint64_t dtype_block_bytes(DType t) {
    switch (t) {
        case DType::F32: case DType::I32: return 4;
        case DType::F16: case DType::BF16: return 2;
        case DType::Q8_0: return sizeof(BlockQ8_0);
        case DType::Q4_0: return sizeof(BlockQ4_0);
        case DType::Q4_1: return sizeof(BlockQ4_1);
        case DType::Q5_0: return sizeof(BlockQ5_0);
        case DType::Q5_1: return sizeof(BlockQ5_1);
        case DType::Q4_K: return sizeof(BlockQ4_K);
        case DType::Q5_K: return sizeof(BlockQ5_K);
        case DType::Q6_K: return sizeof(BlockQ6_K);
    }
    return 0;
}

inline bool dtype_is_quantized(DType t) { return dtype_block_elems(t) > 1; }
// The types the CPU matmul's original kernels (and the row-group packing, and the CUDA backend) take.
inline bool dtype_is_q32_legacy(DType t) { return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1; }

// Bytes of one row of n elements; 0 if n is not a multiple of the block size (caller must check).
inline uint64_t dtype_row_bytes(DType t, uint64_t n) {
    const uint64_t be = (uint64_t)dtype_block_elems(t);
    return n % be ? 0 : n / be * dtype_block_bytes(t);
}

inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, u;
    if (exp == 0) {
        if (mant == 0) u = sign;
        else {  // subnormal: normalise
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            mant &= 0x3FF;
            u = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) u = sign | 0x7F800000 | (mant << 13);
    else u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even.
inline uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xFF) - 127 + 15;
    uint32_t mant = x & 0x7FFFFF;
    if (((x >> 23) & 0xFF) == 0xFF) return (uint16_t)(sign | 0x7C00 | (mant ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7C00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;  // may carry into exponent: correct
    return (uint16_t)(sign | h);
}

inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((x >> 16) | 0x40);  // NaN stays NaN
    x += 0x7FFF + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

}  // namespace beagle
