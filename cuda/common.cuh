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
enum KDType : int { KD_F32 = 0, KD_F16 = 1, KD_BF16 = 2, KD_Q8_0 = 3, KD_Q4_0 = 4, KD_Q4_1 = 5 };

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

// Element i of a stored row (GGUF layouts: Q8_0 x = d q; Q4_0 x = d (q - 8); Q4_1 x = d q + m; in Q4
// blocks element j < 16 is the low nibble of qs[j], element j + 16 its high nibble).
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
