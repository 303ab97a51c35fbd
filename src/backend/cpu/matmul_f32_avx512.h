// matmul_f32_avx512.h: the AVX-512 tiles matmul_f32.cpp calls on the AVX-512 path (cpu_matmul_isa()), each
// bit-identical to the AVX2 tiles it replaces (matmul_f32_avx512.cpp says how). mt / mo: 4 or 1 rows.
#pragma once

namespace beagle {

// y[t0 .. t0 + mt) x [o0 .. o0 + 6) of y = x W^T (n_in inputs, n_out outputs).
void matmul_f32_fwd_tile_avx512(int mt, float* y, const float* x, const float* W, int t0, int o0, int n_in, int n_out);
// dx[t0 .. t0 + mt) x [i0 .. i0 + 32) of dx (+)= dy W over o in [oa, ob); first: start from zero, else from dx.
void matmul_f32_bwd_x_tile_avx512(int mt, float* dx, const float* dy, const float* W, int t0, int i0, int oa, int ob,
                                  int n_in, int n_out, bool first);
// dW[o0 .. o0 + mo) x [i0 .. i0 + 32) += dy^T x over t in [ta, tb).
void matmul_f32_bwd_w_tile_avx512(int mo, float* dW, const float* dy, const float* x, int o0, int i0, int ta, int tb,
                                  int n_in, int n_out);

}  // namespace beagle
