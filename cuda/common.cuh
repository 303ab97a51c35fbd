// common.cuh: device helpers shared by the kernel files in cuda/: fixed-order warp and block
// reductions, the dequantization of one stored weight element (GGUF block layouts), and the portable
// int8 dot product dp4a. Included by the .cu files; never launched on its own.
//
// Determinism: every reduction here has ONE order for a given block size (xor butterfly inside a
// warp, then warp 0 over the per-warp partials), so a kernel that fixes its block size gives the same
// bits for a row whatever else the grid computes (batch invariance, docs/method.md "Exactness").
#pragma once
#include "compat.cuh"

#include <stdint.h>

// Stored element types as the host's beagle::DType (src/core/dtype.h) numbers them.
enum KDType : int {
    KD_F32 = 0, KD_F16 = 1, KD_BF16 = 2, KD_Q8_0 = 3, KD_Q4_0 = 4, KD_Q4_1 = 5,
    KD_Q5_0 = 7, KD_Q5_1 = 8, KD_Q4_K = 9, KD_Q5_K = 10, KD_Q6_K = 11
};

// ---- reductions -------------------------------------------------------------------------------
// Every lane of the (full) warp must call these. Result in every lane.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum / max; blockDim.x must be a multiple of 32 (<= 1024) and every thread must call it.
// `red` is shared scratch of 33 elements (32 warp partials + the broadcast slot). Result in every thread.
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();  // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nw ? red[lane] : 0.0f;
        w = warp_sum(w);
        if (lane == 0) red[32] = w;
    }
    __syncthreads();
    return red[32];
}
__device__ __forceinline__ double block_sum_d(double v, double* red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = lane < nw ? red[lane] : 0.0;
        w = warp_sum_d(w);
        if (lane == 0) red[32] = w;
    }
    __syncthreads();
    return red[32];
}
__device__ __forceinline__ float block_max(float v, float* red) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nw ? red[lane] : -INFINITY;
        w = warp_max(w);
        if (lane == 0) red[32] = w;
    }
    __syncthreads();
    return red[32];
}

// ---- stored weights ---------------------------------------------------------------------------
__device__ __forceinline__ float f16_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }

// ---- the 5-bit and k-quant layouts (src/core/dtype.h): one 32-weight block b of a row as integers.
// qblock_decode writes the block's 32 integer weights w[j] (element 32 b + j) and its scales such that
// element j = a[j / 16] * w[j] + m: Q5_0 a = d, w = q - 16, m = 0; Q5_1 a = d, w = q, m; Q4_K / Q5_K
// a = d sc_b, w = q, m = -(dmin mn_b); Q6_K a = d sc (one per 16 elements), w = q - 32, m = 0. Every a and
// m is exact in float (a half times an integer of at most 6 bits), so a[j / 16] * w[j] + m rounds once:
// the value dequantize_row gives.
__device__ __forceinline__ uint32_t load_u32_bytes(const uint8_t* p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
__device__ __forceinline__ void kquant_scale_min_d(const uint8_t* s, int j, int* sc, int* mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}
__device__ __forceinline__ int qblock_elems(int dtype) { return dtype >= KD_Q4_K ? 256 : 32; }
__device__ __forceinline__ int qblock_bytes(int dtype) {
    switch (dtype) {
        case KD_Q5_0: return 22;
        case KD_Q5_1: return 24;
        case KD_Q4_K: return 144;
        case KD_Q5_K: return 176;
        default: return 210;  // KD_Q6_K
    }
}
__device__ __forceinline__ void qblock_decode(int dtype, const uint8_t* row, int b, int* w, float* a, float* m) {
    *m = 0.0f;
    if (dtype == KD_Q5_0 || dtype == KD_Q5_1) {
        const uint8_t* blk = row + (long long)b * qblock_bytes(dtype);
        const int off = dtype == KD_Q5_1 ? 4 : 2;
        const uint32_t qh = load_u32_bytes(blk + off);
        const uint8_t* qs = blk + off + 4;
        UNROLL for (int j = 0; j < 32; j++) {
            const int q = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int)((qh >> j) & 1) << 4;
            w[j] = dtype == KD_Q5_0 ? q - 16 : q;
        }
        a[0] = a[1] = f16_bits_to_float(load_u16(blk));
        if (dtype == KD_Q5_1) *m = f16_bits_to_float(load_u16(blk + 2));
        return;
    }
    const uint8_t* blk = row + (long long)(b / 8) * qblock_bytes(dtype);
    const int j8 = b % 8;
    if (dtype == KD_Q6_K) {  // element 32 j8 + l of the super-block: h = j8 / 4, k = j8 % 4
        const int h = j8 / 4, k = j8 % 4;
        const uint8_t* ql = blk + 64 * h + 32 * (k & 1);
        const uint8_t* qh = blk + 128 + 32 * h;
        UNROLL for (int l = 0; l < 32; l++)
            w[l] = ((k >> 1 ? ql[l] >> 4 : ql[l] & 15) | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
        const float d = f16_bits_to_float(load_u16(blk + 208));
        a[0] = d * (float)(int8_t)blk[192 + 2 * j8];
        a[1] = d * (float)(int8_t)blk[192 + 2 * j8 + 1];
        return;
    }
    int sc, mn;  // Q4_K, Q5_K
    kquant_scale_min_d(blk + 4, j8, &sc, &mn);
    const uint8_t* qs = blk + (dtype == KD_Q5_K ? 48 : 16) + 32 * (j8 / 2);
    UNROLL for (int l = 0; l < 32; l++) {
        int q = j8 & 1 ? qs[l] >> 4 : qs[l] & 15;
        if (dtype == KD_Q5_K) q |= ((blk[16 + l] >> j8) & 1) << 4;
        w[l] = q;
    }
    a[0] = a[1] = f16_bits_to_float(load_u16(blk)) * (float)sc;
    *m = -(f16_bits_to_float(load_u16(blk + 2)) * (float)mn);
}

// Element i of a stored row (GGUF layouts: Q8_0 x = d q; Q4_0 x = d (q - 8); Q4_1 x = d q + m; in Q4
// blocks element j < 16 is the low nibble of qs[j], element j + 16 its high nibble; the 5-bit and k-quant
// types through qblock_decode).
__device__ __forceinline__ float dequant_elem(int dtype, const uint8_t* row, int i) {
    switch (dtype) {
        case KD_F32: return reinterpret_cast<const float*>(row)[i];
        case KD_F16: return f16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
        case KD_BF16: return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
        case KD_Q8_0: {
            const uint8_t* b = row + (i / 32) * 34;
            return f16_bits_to_float(load_u16(b)) * (float)(int8_t)b[2 + i % 32];
        }
        case KD_Q4_0: {
            const uint8_t* b = row + (i / 32) * 18;
            const int j = i % 32;
            const int q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
            return f16_bits_to_float(load_u16(b)) * (float)(q - 8);
        }
        case KD_Q4_1: {
            const uint8_t* b = row + (i / 32) * 20;
            const int j = i % 32;
            const int q = j < 16 ? (b[4 + j] & 0x0F) : (b[4 + j - 16] >> 4);
            return fmaf(f16_bits_to_float(load_u16(b)), (float)q, f16_bits_to_float(load_u16(b + 2)));
        }
        case KD_Q5_0: case KD_Q5_1: case KD_Q4_K: case KD_Q5_K: case KD_Q6_K: {
            int w[32];
            float a[2], m;
            qblock_decode(dtype, row, i / 32, w, a, &m);
            const float aw = (i % 32 < 16 ? a[0] : a[1]) * (float)w[i % 32];
            return dtype == KD_Q6_K || dtype == KD_Q5_0 ? aw : aw + m;
        }
    }
    return 0.0f;
}

// ---- int8 dot product of 4 packed bytes: c + sum_i a_i * b_i (signed) ---------------------------
// dp4a on the GPU (sm_61+); the portable fallback is what the emulator runs (and tests).
__device__ __forceinline__ int dot4_i8(int a, int b, int c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}

// Integer division rounding up.
__host__ __device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }
