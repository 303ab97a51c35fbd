// matmul_ref.h: double-precision references and derived error bounds for cpu_matmul, shared by
// test/unit/test_matmul.cpp and test/unit/test_matmul_gguf.cpp (include after testlib.h).
// Bounds (u = 2^-24), see test_matmul.cpp's header comment for the derivation:
//  float weights:     |y - exact| <= (ceil(cols/8) + 5) u sum|w x|
//  quantized weights: |y - model| <= (nb + ceil(nb/8) + 5) u S and
//                     |y - exact| <= sum|w| (d_x/2 + 3u|x|) + u sum|w x| + (nb + ceil(nb/8) + 5) u S
//  with d_x = max|x_block| / 127 (8-bit activations) or / 32767 (16-bit).
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/tensor.h"

using beagle::DType;
using beagle::dtype_is_quantized;
using beagle::dtype_name;
using beagle::dtype_row_bytes;
using beagle::dequantize_row;
using beagle::f16_to_f32;

static const double U = std::ldexp(1.0, -24);
static int g_cases = 0;

// The test's own scalar model of the activation quantizer (quantize.h): bits = 8 or 16; q in natural
// element order.
struct QRow {
    std::vector<int> q;
    std::vector<float> d, s;
};
static QRow quantize_model(const float* x, int64_t cols, int bits) {
    const float qmax = bits == 16 ? 32767.0f : 127.0f;
    QRow r;
    int64_t nb = cols / 32;
    r.q.resize(cols);
    r.d.resize(nb);
    r.s.resize(nb);
    for (int64_t b = 0; b < nb; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
        volatile float d = amax / qmax;  // volatile: no contraction or reordering in the model
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            volatile float v = x[b * 32 + i] * id;
            int q = (int)std::nearbyint((float)v);  // round half to even
            r.q[b * 32 + i] = q;
            sum += q;
        }
        r.d[b] = d;
        volatile float s = d * (float)sum;
        r.s[b] = s;
    }
    return r;
}

// Raw fields of quantized block b of a row: d, m (Q4_0: -8 d; Q8_0: 0) and the 32 integer codes.
static void block_fields(DType t, const uint8_t* row, int64_t b, double* d, double* m, int* q) {
    uint16_t h;
    if (t == DType::Q8_0) {
        const uint8_t* blk = row + b * 34;
        memcpy(&h, blk, 2);
        *d = f16_to_f32(h);
        *m = 0;
        for (int i = 0; i < 32; i++) q[i] = (int8_t)blk[2 + i];
        return;
    }
    const uint8_t* blk = row + b * (t == DType::Q4_0 ? 18 : 20);
    memcpy(&h, blk, 2);
    *d = f16_to_f32(h);
    const uint8_t* qs = blk + (t == DType::Q4_0 ? 2 : 4);
    if (t == DType::Q4_1) {
        memcpy(&h, blk + 2, 2);
        *m = f16_to_f32(h);
    } else {
        *m = -8.0 * *d;
    }
    for (int i = 0; i < 16; i++) {
        q[i] = qs[i] & 15;
        q[i + 16] = qs[i] >> 4;
    }
}

// Check one matmul result y (T x rows), computed with `bits`-bit activations, against the references;
// returns false at the first failure.
static bool check_result(DType dt, const uint8_t* wb, const std::vector<float>& x, const float* y,
                         int64_t rows, int64_t cols, int T, const char* isa, int bits) {
    const uint64_t rb = dtype_row_bytes(dt, cols);
    std::vector<float> w(cols);
    const bool quant = dtype_is_quantized(dt);
    const int64_t nb = cols / 32;
    for (int t = 0; t < T; t++) {
        const float* xt = x.data() + (size_t)t * cols;
        QRow qr;
        if (quant) qr = quantize_model(xt, cols, bits);
        for (int64_t o = 0; o < rows; o++) {
            const uint8_t* row = wb + o * rb;
            dequantize_row(dt, row, w.data(), cols);
            double exact = 0, absum = 0;
            for (int64_t i = 0; i < cols; i++) {
                exact += (double)w[i] * xt[i];
                absum += std::fabs((double)w[i] * xt[i]);
            }
            const double got = y[(size_t)t * rows + o];
            g_cases++;
            if (!quant) {
                double tol = ((cols + 7) / 8 + 5) * U * absum;
                if (!(std::fabs(got - exact) <= tol)) {
                    CHECK(false, "%s %s rows %lld cols %lld T %d: y[%d, %lld] = %.9g, exact %.9g, tol %.3g", isa,
                          dtype_name(dt), (long long)rows, (long long)cols, T, t, (long long)o, got, exact, tol);
                    return false;
                }
                continue;
            }
            // model value and the magnitude S the kernel accumulates
            double model = 0, S = 0, act_err = 0;
            for (int64_t b = 0; b < nb; b++) {
                double d, m;
                int q[32];
                block_fields(dt, row, b, &d, &m, q);
                double dx = qr.d[b];
                long long isum = 0, iabs = 0;
                for (int i = 0; i < 32; i++) {
                    isum += (long long)q[i] * qr.q[b * 32 + i];
                    iabs += std::llabs((long long)q[i] * qr.q[b * 32 + i]);
                }
                double mt = dt == DType::Q8_0 ? 0.0 : m * (double)qr.s[b];
                model += d * dx * (double)isum + mt;
                S += std::fabs(d * dx) * (double)iabs + std::fabs(mt);
                for (int i = 0; i < 32; i++)
                    act_err += std::fabs((double)w[b * 32 + i]) * (dx / 2 + 3 * U * std::fabs(xt[b * 32 + i]));
            }
            // row-group kernels (avx2-packed, avx512-packed): per block one term fl(d_w d_x) float(I) (float(I) rounds
            // once for Q8_0, |I| up to 2^27) and, for Q4, one m s term, all added in sequence into one
            // float: at most 2 nb terms, each with <= 2 roundings of its own, so (2 nb + 2) u S
            double tol_model = strstr(isa, "-packed") ? (2 * nb + 2) * U * S : (nb + (nb + 7) / 8 + 5) * U * S;
            if (!(std::fabs(got - model) <= tol_model)) {
                CHECK(false, "%s int%d %s rows %lld cols %lld T %d: y[%d, %lld] = %.9g, model %.9g (diff %.3g), tol %.3g",
                      isa, bits, dtype_name(dt), (long long)rows, (long long)cols, T, t, (long long)o, got, model,
                      got - model, tol_model);
                return false;
            }
            double tol_exact = act_err + U * absum + tol_model;
            if (!(std::fabs(got - exact) <= tol_exact)) {
                CHECK(false, "%s int%d %s rows %lld cols %lld T %d: y[%d, %lld] = %.9g, exact %.9g, tol %.3g", isa,
                      bits, dtype_name(dt), (long long)rows, (long long)cols, T, t, (long long)o, got, exact, tol_exact);
                return false;
            }
        }
    }
    return true;
}

