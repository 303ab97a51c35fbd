// quantize.h: float rows to the stored weight types of dtype.h, as ggml's reference quantizers make
// them (what llama-quantize writes when no importance matrix is given), so a file quantized here has
// the bytes llama.cpp would write. `beagle quantize` and the draft's Q8_0 copy call these.
#pragma once
#include <cstdint>

#include "dtype.h"

namespace beagle {

// Quantize n floats (a multiple of dtype_block_elems(t)) into n / block_elems blocks of type t at dst
// (F32 / F16 / BF16 convert; I32 is an Error). Each block depends only on its own elements, so rows may
// be quantized in any order or on any thread. Per type, for a block x:
//   Q8_0          d = max|x| / 127, q = round(x / d) (half away from zero)
//   Q4_0 / Q5_0   d = -m / 8 (/ 16) with m the element of largest magnitude, q = trunc(x / d + 8.5 (16.5))
//   Q4_1 / Q5_1   d = (max - min) / 15 (31), m = min, q = trunc((x - min) / d + 0.5)
//   Q4_K / Q5_K   per sub-block of 32: a scale and min fitted by weighted least squares over 21 (16) trial
//                 scales (weights |x| + rms(x)), then scales and mins quantized to 6 bits against the
//                 super-block's d and dmin, and q re-rounded against the quantized scales
//   Q6_K          per sub-block of 16: the scale of 19 trials with the least x^2-weighted error, then
//                 scales quantized to int8 against d, and q re-rounded
// Every float operation is ggml's, in ggml's order, each rounded on its own (the Makefile compiles
// quantize.cpp with -ffp-contract=off: no fused multiply-adds), which is what makes the bytes equal.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// Quantize n f32 values (n % 32 == 0) to Q8_0 blocks: quantize_row(DType::Q8_0, ...).
void quantize_row_q8_0(const float* src, void* dst, int64_t n);

}  // namespace beagle
