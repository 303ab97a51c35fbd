// test_matmul_f32_isa.cpp: the draft's dense f32 products (matmul_f32, its backward to x with and without
// accumulation, its backward to W) compute exactly the fma chains matmul_f32.cpp documents, on every ISA
// path this CPU has (AVX2; AVX-512 with its own tiles, matmul_f32_avx512.cpp): by memcmp against a scalar
// model of those chains written here, so the two paths give the same bits and a draft trained on either is
// the same file. Shapes with every edge: T not a multiple of 4, inputs not a multiple of 8 (the scalar
// tail), outputs not a multiple of 6 (pairs left to the AVX2 tiles), widths past one 32-lane tile.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul.h"
#include "core/rng.h"
#include "testlib.h"

using namespace beagle;

static std::vector<float> randv(TrainRng& rng, size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = (float)rng.normal();
    return v;
}

// One shape's operands: x (T x n_in), W (n_out x n_in), dy (T x n_out), and the dx / dW the accumulating
// backward passes start from.
struct Inputs {
    int T, n_in, n_out;
    std::vector<float> x, W, dy, dx0, dW0;
    Inputs(int T_, int n_in_, int n_out_, uint64_t seed) : T(T_), n_in(n_in_), n_out(n_out_) {
        TrainRng rng(seed);
        x = randv(rng, (size_t)T * n_in);
        W = randv(rng, (size_t)n_out * n_in);
        dy = randv(rng, (size_t)T * n_out);
        dx0 = randv(rng, (size_t)T * n_in);
        dW0 = randv(rng, (size_t)n_out * n_in);
    }
};

struct Outputs {
    std::vector<float> y, dx, dx_acc, dW;
};

static Outputs run(const char* isa, const Inputs& in) {
    cpu_matmul_set_isa(isa);
    CpuOps ops(2);
    const int T = in.T, n_in = in.n_in, n_out = in.n_out;
    const std::vector<float>&x = in.x, &W = in.W, &dy = in.dy, &dx0 = in.dx0, &dW0 = in.dW0;
    Outputs o;
    o.y.resize((size_t)T * n_out);
    ops.matmul_f32(o.y.data(), x.data(), W.data(), T, n_in, n_out);
    o.dx.resize((size_t)T * n_in);
    ops.matmul_f32_bwd_x(o.dx.data(), dy.data(), W.data(), T, n_in, n_out, false);
    o.dx_acc = dx0;
    ops.matmul_f32_bwd_x(o.dx_acc.data(), dy.data(), W.data(), T, n_in, n_out, true);
    o.dW = dW0;
    ops.matmul_f32_bwd_w(o.dW.data(), dy.data(), x.data(), T, n_in, n_out);
    return o;
}

// The documented chains, one float operation at a time (fmaf is the fused multiply-add the vector FMA does
// per lane; the tests build in ISO C++ mode, so GCC contracts no other expression into an FMA).
static Outputs model(const Inputs& in) {
    const int T = in.T, n_in = in.n_in, n_out = in.n_out;
    const std::vector<float>&x = in.x, &W = in.W, &dy = in.dy, &dx0 = in.dx0, &dW0 = in.dW0;
    Outputs o;
    o.y.resize((size_t)T * n_out);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < n_out; c++) {
            const float* xr = &x[(size_t)t * n_in];
            const float* wr = &W[(size_t)c * n_in];
            float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // lane j: i = j, j + 8, ... while a whole 8 fits
            int i = 0;
            for (; i + 8 <= n_in; i += 8)
                for (int j = 0; j < 8; j++) lane[j] = fmaf(xr[i + j], wr[i + j], lane[j]);
            // hsum8 (simd.h): halves added, then lanes 0 + 2 and 1 + 3, then those two
            float h[4];
            for (int k = 0; k < 4; k++) h[k] = lane[k] + lane[k + 4];
            float s = (h[0] + h[2]) + (h[1] + h[3]);
            for (; i < n_in; i++) s = fmaf(xr[i], wr[i], s);
            o.y[(size_t)t * n_out + c] = s;
        }
    o.dx.resize((size_t)T * n_in);
    o.dx_acc = dx0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n_in; i++) {
            float a = 0, b = dx0[(size_t)t * n_in + i];
            for (int c = 0; c < n_out; c++) {
                a = fmaf(dy[(size_t)t * n_out + c], W[(size_t)c * n_in + i], a);
                b = fmaf(dy[(size_t)t * n_out + c], W[(size_t)c * n_in + i], b);
            }
            o.dx[(size_t)t * n_in + i] = a;
            o.dx_acc[(size_t)t * n_in + i] = b;
        }
    o.dW = dW0;
    for (int c = 0; c < n_out; c++)
        for (int i = 0; i < n_in; i++) {
            float a = dW0[(size_t)c * n_in + i];
            for (int t = 0; t < T; t++) a = fmaf(dy[(size_t)t * n_out + c], x[(size_t)t * n_in + i], a);
            o.dW[(size_t)c * n_in + i] = a;
        }
    return o;
}

static bool same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int main() {
    std::vector<const char*> isas = {"avx2"};
    if (cpu_has_avx512_vnni())
        isas.push_back("avx512");
    else
        printf("note: CPU lacks AVX-512 VNNI, only the AVX2 path is tested\n");
    // (T, inputs, outputs): the draft's shapes (dim 576, KV 192, FFN 1536, a 300-token batch) and ragged ones
    const int shapes[][3] = {{1, 8, 6},     {3, 5, 7},       {5, 37, 13},   {4, 64, 48},   {13, 100, 50},
                             {37, 33, 61},  {70, 576, 192},  {9, 1536, 576}, {300, 576, 1536}};
    uint64_t seed = 1;
    for (const auto& s : shapes) {
        const int T = s[0], n_in = s[1], n_out = s[2];
        const Inputs in(T, n_in, n_out, seed);
        const Outputs m = model(in);
        for (const char* isa : isas) {
            const Outputs a = run(isa, in);
            CHECK(same(a.y, m.y), "%s forward T %d, %d -> %d: not the documented chains", isa, T, n_in, n_out);
            CHECK(same(a.dx, m.dx), "%s backward to x T %d, %d -> %d: not the documented chains", isa, T, n_in, n_out);
            CHECK(same(a.dx_acc, m.dx_acc), "%s backward to x, accumulated, T %d, %d -> %d: not the documented chains",
                  isa, T, n_in, n_out);
            CHECK(same(a.dW, m.dW), "%s backward to W T %d, %d -> %d: not the documented chains", isa, T, n_in, n_out);
        }
        seed++;
    }
    if (g_failures == 0)
        printf("matmul_f32, bwd_x, bwd_w: %zu shapes, %s == the scalar model bit for bit\n", sizeof(shapes) / sizeof(shapes[0]),
               isas.size() == 2 ? "AVX2 and AVX-512" : "AVX2");
    return test_summary("test_matmul_f32_isa");
}
