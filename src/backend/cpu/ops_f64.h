// ops_f64.h: a float64 CPU op set with the same method names as the ops of Ops the draft uses (ops.h),
// for the gradient check (src/train/gradcheck.cpp). Its methods and CpuOps' float ops are
// instantiations of the SAME kernel templates (one file per op in src/backend/cpu/); the draft's layer
// code is a template over the op set, so gradcheck verifies the code that trains and runs the draft.
#pragma once
#include <cstddef>

#include "../../core/threadpool.h"
#include "../ops.h"

namespace beagle {

class CpuOps64 {
public:
    explicit CpuOps64(int n_threads = 1) : pool_(n_threads) {}
    const char* name() const { return "cpu-f64"; }

    // Test hook of the gradient check (`beagle gradcheck --plant-bug`, test/cli/test_gradcheck.sh): when
    // set, swiglu_bwd returns dgate scaled by (1 + 1e-4), a backward error 10x the check's tolerance,
    // so a test shows the check failing on it. Only the gradient check uses CpuOps64 (training and
    // inference run the float Ops), and it prints "PLANTED BUG" when this is on.
    bool plant_swiglu_bwd_bug = false;

    double* alloc(size_t n);  // zero-initialised
    void release(double* p);
    void upload(double* dst, const double* src, size_t n);
    void download(double* dst, const double* src, size_t n);
    void copy(double* dst, const double* src, size_t n);
    void add(double* y, const double* x, size_t n, size_t period = 0);  // as Ops::add
    void swiglu(double* out, const double* gate, const double* up, size_t n);

    void zero(double* p, size_t n);
    void gather_rows(double* dst, const double* src, const int* idx, int n, int width);
    void scatter_rows(double* dst, const double* src, const int* idx, int n, int width, bool accumulate);
    void matmul_f32(double* y, const double* x, const double* W, int T, int n_in, int n_out);
    void matmul_f32_bwd_x(double* dx, const double* dy, const double* W, int T, int n_in, int n_out, bool accumulate);
    void matmul_f32_bwd_w(double* dW, const double* dy, const double* x, int T, int n_in, int n_out);
    void rmsnorm_f32(double* y, double* rstd, const double* x, const double* w, int T, int dim, float eps);
    void rmsnorm_f32_bwd(double* dx, double* dw, const double* dy, const double* x, const double* w, const double* rstd,
                         int T, int dim);
    void rope(double* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse);
    void xattn(double* out, double* lse, const double* q, const int* qrow, int n_q, const XAttnKeysT<double>& keys,
               int n_heads, int n_kv_heads, int head_dim, const XAttnMask& mask);
    void xattn_bwd(double* dq, const XAttnGradsT<double>& dkeys, const double* dout, const double* out,
                   const double* lse, const double* q, const int* qrow, int n_q, const XAttnKeysT<double>& keys,
                   int n_heads, int n_kv_heads, int head_dim, const XAttnMask& mask);
    void swiglu_bwd(double* dgate, double* dup, const double* dout, const double* gate, const double* up, size_t n);
    void lse_update(double* m, double* s, const double* z, int n, int C);
    void ce_soft_chunk(double* dz, double* loss, const double* zt, const double* zd, const double* m_t,
                       const double* s_t, const double* m_d, const double* s_d, int n, int C, float scale);
    void ce_hard_chunk(double* dz, double* loss, const double* zd, const double* m_d, const double* s_d,
                       const int* labels, int v0, int n, int C, float scale);
    void smoothl1(double* dx, double* loss, const double* x, const double* target, int n, int dim, float beta,
                  float scale);
    double sumsq(const double* x, size_t n);
    double sumsq_all(const double* const* xs, const size_t* ns, int count) {  // as Ops::sumsq_all
        double s = 0;
        for (int i = 0; i < count; i++) s += sumsq(xs[i], ns[i]);
        return s;
    }
    void adamw(double* w, double* m, double* v, const double* g, size_t n, const AdamWParams& p);

private:
    ThreadPool pool_;
};

}  // namespace beagle
