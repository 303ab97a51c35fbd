// dtype.h: element types of stored tensors (GGUF-compatible block layouts) and half conversions.
// Quantized types are blocks of 32 elements; a row of n elements is n/32 blocks.
#pragma once
#include <cstdint>
#include <cstring>

namespace beagle {

enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_1, I32 };

constexpr int QK = 32;  // elements per quantized block

struct BlockQ8_0 { uint16_t d; int8_t qs[QK]; };          // x = d * q
struct BlockQ4_0 { uint16_t d; uint8_t qs[QK / 2]; };     // x = d * (q - 8); low nibbles = elems 0..15
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[QK / 2]; };  // x = d * q + m
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block");
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
    }
    return "?";
}

inline bool dtype_is_quantized(DType t) { return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1; }

// Bytes of one row of n elements; 0 if n is not a multiple of the block size (caller must check).
inline uint64_t dtype_row_bytes(DType t, uint64_t n) {
    switch (t) {
        case DType::F32: case DType::I32: return 4 * n;
        case DType::F16: case DType::BF16: return 2 * n;
        case DType::Q8_0: return n % QK ? 0 : n / QK * sizeof(BlockQ8_0);
        case DType::Q4_0: return n % QK ? 0 : n / QK * sizeof(BlockQ4_0);
        case DType::Q4_1: return n % QK ? 0 : n / QK * sizeof(BlockQ4_1);
    }
    return 0;
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
