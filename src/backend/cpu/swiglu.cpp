// swiglu.cpp: the SwiGLU gate out = silu(gate) * up and its backward (ops.h swiglu, swiglu_bwd),
// for CpuOps (forward vectorized, batch invariant) and CpuOps64.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "cpu_ops.h"
#include "ops_f64.h"
#include "simd.h"

namespace beagle {
namespace {

template <class R>
void swiglu_t(R* out, const R* gate, const R* up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        R g = gate[i];
        out[i] = g * (R(1) / (R(1) + std::exp(-g))) * up[i];
    }
}

// out = silu(g) u:  dup = dout silu(g);  dgate = dout u sig(g) (1 + g (1 - sig(g)))
template <class R>
void swiglu_bwd_t(R* dgate, R* dup, const R* dout, const R* gate, const R* up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        R g = gate[i], sig = R(1) / (R(1) + std::exp(-g));
        dup[i] = dout[i] * g * sig;
        dgate[i] = dout[i] * up[i] * sig * (R(1) + g * (R(1) - sig));
    }
}

}  // namespace

// out = g sigmoid(g) up, 8 lanes at a time (the tail through masked loads, so every element gets the
// same arithmetic wherever it sits): sigmoid(g) = 1 / (1 + e) for g >= 0, e / (1 + e) below, with
// e = e^-|g| (exp8_neg: no overflow).
void cpu_swiglu(float* out, const float* gate, const float* up, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (size_t i = 0; i < n; i += 8) {
        const __m256i lanes = tail_mask8((int)std::min<size_t>(8, n - i));
        const __m256 g = _mm256_maskload_ps(gate + i, lanes), u = _mm256_maskload_ps(up + i, lanes);
        const __m256 e = exp8_neg(_mm256_or_ps(g, sign));  // e^-|g|
        const __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, e));
        const __m256 sg = _mm256_blendv_ps(_mm256_mul_ps(e, r), r, _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_GE_OQ));
        _mm256_maskstore_ps(out + i, lanes, _mm256_mul_ps(_mm256_mul_ps(g, sg), u));
    }
}

void CpuOps::swiglu(float* out, const float* gate, const float* up, size_t n) { cpu_swiglu(out, gate, up, n); }

void CpuOps::swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) {
    swiglu_bwd_t(dgate, dup, dout, gate, up, n);
}

void CpuOps64::swiglu(double* out, const double* gate, const double* up, size_t n) { swiglu_t(out, gate, up, n); }
void CpuOps64::swiglu_bwd(double* dgate, double* dup, const double* dout, const double* gate, const double* up,
                          size_t n) {
    swiglu_bwd_t(dgate, dup, dout, gate, up, n);
    if (plant_swiglu_bwd_bug)
        for (size_t i = 0; i < n; i++) dgate[i] *= 1.0 + 1e-4;  // planted bug (gradcheck test), see ops_f64.h
}

}  // namespace beagle
