// rope.cpp: rotary position embedding (ops.h rope: adjacent pairs of each head, forward and
// inverse = backward) and its inverse frequencies with optional Llama-3 scaling, for CpuOps and
// CpuOps64. CpuOps::rope_freqs also gives the CUDA backend its frequencies (same float values).
#include <cmath>
#include <cstdint>
#include <vector>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "cpu_ops.h"
#include "ops_f64.h"

namespace beagle {
namespace {

// RoPE inverse frequencies in precision R (same formula as CpuOps::rope_freqs).
template <class R>
void rope_freqs_t(const RopeParams& rp, R* freq) {
    int hd = rp.head_dim;
    for (int i = 0; i < hd / 2; i++) {
        R f = R(1) / std::pow((R)rp.theta, (R)(2 * i) / (R)hd);
        if (rp.llama3_scaling) {
            R wavelen = R(2) * (R)M_PI / f;
            R low_wavelen = (R)rp.orig_max_pos / (R)rp.low_freq_factor;
            R high_wavelen = (R)rp.orig_max_pos / (R)rp.high_freq_factor;
            if (wavelen > low_wavelen) f = f / (R)rp.factor;
            else if (wavelen >= high_wavelen) {
                R smooth = ((R)rp.orig_max_pos / wavelen - (R)rp.low_freq_factor) /
                           ((R)rp.high_freq_factor - (R)rp.low_freq_factor);
                f = (R(1) - smooth) * f / (R)rp.factor + smooth * f;
            }
        }
        freq[i] = f;
    }
}

template <class R>
void rope_t(R* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    int hd = rp.head_dim, half = hd / 2;
    std::vector<R> freq(half);
    rope_freqs_t(rp, freq.data());
    for (int t = 0; t < T; t++) {
        R* xr = x + (int64_t)t * n_heads * hd;
        for (int i = 0; i < half; i++) {
            R val = (R)pos[t] * freq[i];
            R c = std::cos(val), s = std::sin(val);
            if (inverse) s = -s;
            for (int h = 0; h < n_heads; h++) {
                R* v = xr + h * hd + 2 * i;
                R v0 = v[0], v1 = v[1];
                v[0] = v0 * c - v1 * s;
                v[1] = v0 * s + v1 * c;
            }
        }
    }
}

}  // namespace

void CpuOps::rope_freqs(const RopeParams& rp, float* freq) { rope_freqs_t(rp, freq); }
void CpuOps::rope(float* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    rope_t(x, pos, T, n_heads, rp, inverse);
}

void CpuOps64::rope(double* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    rope_t(x, pos, T, n_heads, rp, inverse);
}

}  // namespace beagle
