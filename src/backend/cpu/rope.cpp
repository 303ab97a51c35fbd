// rope.cpp: rotary position embedding (ops.h rope: adjacent pairs of each head, forward and
// inverse = backward) and its inverse frequencies with optional Llama-3 scaling, for CpuOps and
// CpuOps64. CpuOps::rope_freqs also gives the CUDA backend its frequencies (same float values).
#include <algorithm>
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

// cs[2 (t half + i) + {0, 1}] = cos, sin of pos[t] freq[i] for t < T, i < head_dim / 2.
template <class R>
void rope_angles_t(R* cs, const int* pos, int T, const RopeParams& rp) {
    const int half = rp.head_dim / 2;
    std::vector<R> freq(half);
    rope_freqs_t(rp, freq.data());
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const R val = (R)pos[t] * freq[i];
            cs[2 * ((int64_t)t * half + i)] = std::cos(val);
            cs[2 * ((int64_t)t * half + i) + 1] = std::sin(val);
        }
}

// Rotates the adjacent pairs (2i, 2i + 1) of each head of row t by the angle in cs (inverse: by minus it).
template <class R>
void rope_apply_t(R* x, const R* cs, int T, int n_heads, int hd, bool inverse) {
    const int half = hd / 2;
    for (int t = 0; t < T; t++) {
        R* xr = x + (int64_t)t * n_heads * hd;
        for (int i = 0; i < half; i++) {
            const R c = cs[2 * ((int64_t)t * half + i)];
            R s = cs[2 * ((int64_t)t * half + i) + 1];
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

bool same_rope(const RopeParams& a, const RopeParams& b) {
    return a.head_dim == b.head_dim && a.theta == b.theta && a.llama3_scaling == b.llama3_scaling &&
           a.factor == b.factor && a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
           a.orig_max_pos == b.orig_max_pos;
}

}  // namespace

void CpuOps::rope_freqs(const RopeParams& rp, float* freq) { rope_freqs_t(rp, freq); }

// A forward ropes q and k of every layer at the same positions (SmolLM2: 60 calls a forward), so the
// angles' cos / sin are kept from the last call and computed again only for other positions or
// parameters: 32 powf and T x 32 sincosf once a forward instead of 60 times (~2% of a decode step).
// The values are the same floats whichever call computed them.
void CpuOps::rope(float* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    if (T <= 0) return;
    RopeAngles& a = rope_angles_;
    if (!(a.pos.size() == (size_t)T && same_rope(a.rp, rp) && std::equal(pos, pos + T, a.pos.begin()))) {
        a.pos.assign(pos, pos + T);
        a.rp = rp;
        a.cs.resize((size_t)T * rp.head_dim);
        rope_angles_t(a.cs.data(), pos, T, rp);
    }
    rope_apply_t(x, a.cs.data(), T, n_heads, rp.head_dim, inverse);
}

void CpuOps64::rope(double* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    if (T <= 0) return;
    std::vector<double> cs((size_t)T * rp.head_dim);
    rope_angles_t(cs.data(), pos, T, rp);
    rope_apply_t(x, cs.data(), T, n_heads, rp.head_dim, inverse);
}

}  // namespace beagle
