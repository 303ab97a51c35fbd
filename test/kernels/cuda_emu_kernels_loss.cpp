// cuda_emu_kernels_loss.cpp -> build/test/test_emu_kernels_loss: the training-loss, optimizer and
// drafting kernels in the CPU emulator against double references: lse_update_kernel, ce_soft_kernel,
// ce_hard_kernel (cuda/cross_entropy.cu: vocabulary chunks C = 1, 37, 300, chunked vs one-chunk
// softmax), smoothl1_kernel (smoothl1.cu: both branches and |d| == beta), sumsq_kernel and adamw_kernel
// (adamw.cu: odd n across several chunks, several steps with clipping scale and weight decay),
// topk_kernel (topk.cu: ties, k > n, k = 1 argmax, against a sort), row_lse_kernel (topk.cu: wide
// ranges, a row of -inf, a NaN entry, against a double logsumexp). Block sizes 32/256/1024, poisoned
// shared memory and shuffled thread orders. Tolerances stated at each comparison.
#include "cuda_kernel_test.h"
#include "cross_entropy.cu"
#include "smoothl1.cu"
#include "adamw.cu"
#include "topk.cu"

// ---- cross-entropy over vocabulary chunks ----------------------------------------------------------
static void test_ce(int n, int V, int C, int block, const std::string& tag) {
    std::vector<float> zt = kt_vec((size_t)n * V, -6, 6), zd = kt_vec((size_t)n * V, -6, 6);
    std::vector<int> labels(n);
    for (int r = 0; r < n; r++) labels[r] = (int)(kt_rand() * V);
    // reference lse and losses in double
    std::vector<double> lt(n), ld(n), soft(n), hard(n);
    for (int r = 0; r < n; r++) {
        double mt = -INFINITY, md = -INFINITY, st = 0, sd = 0;
        for (int c = 0; c < V; c++) {
            mt = std::max(mt, (double)zt[(size_t)r * V + c]);
            md = std::max(md, (double)zd[(size_t)r * V + c]);
        }
        for (int c = 0; c < V; c++) {
            st += std::exp(zt[(size_t)r * V + c] - mt);
            sd += std::exp(zd[(size_t)r * V + c] - md);
        }
        lt[r] = mt + std::log(st);
        ld[r] = md + std::log(sd);
        double l = 0;
        for (int c = 0; c < V; c++) l -= std::exp(zt[(size_t)r * V + c] - lt[r]) * (zd[(size_t)r * V + c] - ld[r]);
        soft[r] = l;
        hard[r] = ld[r] - zd[(size_t)r * V + labels[r]];
    }
    const float scale = 0.37f;
    // pass 1: online lse over chunks (a chunk is a contiguous n x Cc copy, as losses.cpp computes it)
    std::vector<float> mt(n, -INFINITY), st(n, 0), md(n, -INFINITY), sd(n, 0);
    auto chunk = [&](const std::vector<float>& z, int v0, int Cc) {
        std::vector<float> out((size_t)n * Cc);
        for (int r = 0; r < n; r++) memcpy(&out[(size_t)r * Cc], &z[(size_t)r * V + v0], Cc * 4);
        return out;
    };
    for (int v0 = 0; v0 < V; v0 += C) {
        int Cc = std::min(C, V - v0);
        std::vector<float> a = chunk(zt, v0, Cc), b = chunk(zd, v0, Cc);
        TLAUNCH(n, block, 0, lse_update_kernel)(mt.data(), st.data(), a.data(), Cc);
        TLAUNCH(n, block, 0, lse_update_kernel)(md.data(), sd.data(), b.data(), Cc);
    }
    std::vector<float> got_lse(2 * n);
    std::vector<double> ref_lse(2 * n);
    for (int r = 0; r < n; r++) {
        got_lse[2 * r] = mt[r] + logf(st[r]);
        got_lse[2 * r + 1] = md[r] + logf(sd[r]);
        ref_lse[2 * r] = lt[r];
        ref_lse[2 * r + 1] = ld[r];
    }
    std::string what = kt_fmt("n%d V%d chunk%d block%d %s", n, V, C, block, tag.c_str());
    kt_compare("lse_update_kernel", got_lse, ref_lse, 1e-5, 1e-5, what);  // sums of <= 1000 exps, log
    // pass 2: loss and gradient per chunk
    std::vector<float> ls(n, 0.25f), lh(n, 0.5f), dzs((size_t)n * V), dzh((size_t)n * V);
    for (int v0 = 0; v0 < V; v0 += C) {
        int Cc = std::min(C, V - v0);
        std::vector<float> a = chunk(zt, v0, Cc), b = chunk(zd, v0, Cc), ds((size_t)n * Cc), dh((size_t)n * Cc);
        TLAUNCH(n, block, 0, ce_soft_kernel)(ds.data(), ls.data(), a.data(), b.data(), mt.data(), st.data(), md.data(),
                                             sd.data(), Cc, scale);
        TLAUNCH(n, block, 0, ce_hard_kernel)(dh.data(), lh.data(), b.data(), md.data(), sd.data(), labels.data(), v0, Cc,
                                             scale);
        for (int r = 0; r < n; r++) {
            memcpy(&dzs[(size_t)r * V + v0], &ds[(size_t)r * Cc], Cc * 4);
            memcpy(&dzh[(size_t)r * V + v0], &dh[(size_t)r * Cc], Cc * 4);
        }
    }
    std::vector<double> rls(n), rlh(n), rdzs((size_t)n * V), rdzh((size_t)n * V);
    for (int r = 0; r < n; r++) {
        rls[r] = 0.25 + scale * soft[r];
        rlh[r] = 0.5 + scale * hard[r];
        for (int c = 0; c < V; c++) {
            size_t k = (size_t)r * V + c;
            double q = std::exp(zd[k] - ld[r]), p = std::exp(zt[k] - lt[r]);
            rdzs[k] = scale * (q - p);
            rdzh[k] = scale * (q - (c == labels[r] ? 1 : 0));
        }
    }
    // loss: sums of V terms of magnitude <= 12 with fp32 lse (error ~1e-6 x 12) -> atol 3e-5
    kt_compare("ce_soft_kernel", ls, rls, 3e-5, 1e-5, what + " loss");
    kt_compare("ce_soft_kernel", dzs, rdzs, 1e-6, 1e-4, what + " dz");
    kt_compare("ce_hard_kernel", lh, rlh, 3e-5, 1e-5, what + " loss");
    kt_compare("ce_hard_kernel", dzh, rdzh, 1e-6, 1e-4, what + " dz");
}

// ---- SmoothL1 ------------------------------------------------------------------------------------------
static void test_smoothl1(int n, int dim, int block, const std::string& tag) {
    const float beta = 0.5f, scale = 2.5f;
    std::vector<float> x = kt_vec((size_t)n * dim, -2, 2), tg = kt_vec((size_t)n * dim, -2, 2);
    x[0] = tg[0] + beta;  // |d| == beta: the linear branch (PyTorch: |d| < beta is quadratic)
    std::vector<float> dx = kt_vec((size_t)n * dim), dx0 = dx, loss(n, 1.0f);
    TLAUNCH(n, block, 0, smoothl1_kernel)(dx.data(), loss.data(), x.data(), tg.data(), dim, beta, scale);
    std::vector<double> rdx((size_t)n * dim), rl(n);
    for (int r = 0; r < n; r++) {
        double acc = 0;
        for (int i = 0; i < dim; i++) {
            size_t k = (size_t)r * dim + i;
            double d = (double)x[k] - tg[k], ad = std::fabs(d);
            acc += ad < beta ? 0.5 * d * d / beta : ad - 0.5 * beta;
            rdx[k] = dx0[k] + scale / dim * (ad < beta ? d / beta : (d > 0 ? 1 : -1));
        }
        rl[r] = 1.0 + scale * acc / dim;
    }
    std::string what = kt_fmt("n%d dim%d block%d %s", n, dim, block, tag.c_str());
    kt_compare("smoothl1_kernel", loss, rl, 1e-5, 1e-5, what + " loss");
    kt_compare("smoothl1_kernel", dx, rdx, 1e-6, 1e-5, what + " dx");
}

// ---- sum of squares, AdamW -------------------------------------------------------------------------
static void test_adamw(long long n, int block, int grid) {
    std::vector<float> w = kt_vec(n), m(n, 0), v(n, 0);
    std::vector<double> rw(w.begin(), w.end()), rm(n, 0), rv(n, 0);
    const float b1 = 0.9f, b2 = 0.95f, lr = 1e-2f, eps = 1e-8f, wd = 0.1f;
    for (int step = 1; step <= 3; step++) {
        std::vector<float> g = kt_vec(n, -3, 3);
        // the global norm through sumsq_kernel, as the clip factor
        int nb = (int)((n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK);
        std::vector<double> part(nb, -1);
        TLAUNCH(nb, block, 0, sumsq_kernel)(g.data(), n, part.data());
        double ss = 0, rss = 0;
        for (double p : part) ss += p;
        for (float x : g) rss += (double)x * x;
        // compared as the relative error of the double sum (exact up to double roundings: 1e-12)
        std::vector<float> got = {(float)((ss - rss) / rss)};
        kt_compare("sumsq_kernel", got, std::vector<double>{0.0}, 1e-12, 0, kt_fmt("n%lld block%d, relative", n, block));
        float gs = (float)std::min(1.0, 0.5 / std::sqrt(ss));
        AdamWArgs a;
        a.w = w.data(); a.m = m.data(); a.v = v.data(); a.g = g.data(); a.n = n;
        a.beta1 = b1; a.beta2 = b2; a.lr = lr; a.eps = eps; a.decay = 1.0f - lr * wd; a.grad_scale = gs;
        a.bc1 = 1.0f - (float)std::pow((double)b1, step);
        a.bc2 = 1.0f - (float)std::pow((double)b2, step);
        TLAUNCH(grid, block, 0, adamw_kernel)(a);
        for (long long i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            rw[i] = rw[i] * (1 - (double)lr * wd) -
                    lr * (rm[i] / (1 - std::pow(b1, step))) / (std::sqrt(rv[i] / (1 - std::pow(b2, step))) + eps);
        }
        std::string what = kt_fmt("n%lld block%d grid%d step%d", n, block, grid, step);
        // m, v: a few fp32 roundings per step; w: lr-sized update of fp32 weights -> atol 1e-6
        kt_compare("adamw_kernel", m, rm, 1e-7, 1e-5, what + " m");
        kt_compare("adamw_kernel", v, rv, 1e-8, 1e-5, what + " v");
        kt_compare("adamw_kernel", w, rw, 1e-6, 1e-5, what + " w");
    }
}

// ---- top-k ---------------------------------------------------------------------------------------------
static void test_topk(int rows, int n, int k, int block, const std::string& tag) {
    std::vector<float> x = kt_vec((size_t)rows * n, -3, 3);
    for (size_t i = 0; i < x.size(); i += 5) x[i] = (float)(int)(x[i] * 2) / 2;  // many exact ties
    std::vector<int> idx((size_t)rows * k, -9);
    std::vector<float> val((size_t)rows * k);
    TLAUNCH(rows, block, 0, topk_kernel)(x.data(), n, k, idx.data(), val.data());
    std::vector<int> ridx((size_t)rows * k, -1);
    std::vector<double> rval((size_t)rows * k, -INFINITY);
    for (int r = 0; r < rows; r++) {
        std::vector<int> ord(n);
        for (int i = 0; i < n; i++) ord[i] = i;
        const float* xr = &x[(size_t)r * n];
        std::stable_sort(ord.begin(), ord.end(), [&](int a, int b) { return xr[a] > xr[b]; });  // ties: lower index
        for (int i = 0; i < k && i < n; i++) {
            ridx[(size_t)r * k + i] = ord[i];
            rval[(size_t)r * k + i] = xr[ord[i]];
        }
    }
    std::string what = kt_fmt("rows%d n%d k%d block%d %s", rows, n, k, block, tag.c_str());
    kt_compare_int("topk_kernel", idx.data(), ridx.data(), idx.size(), what + " indices");
    kt_compare("topk_kernel", val, rval, 0, 0, what + " values");
}

// k = 1 over a row without a number (all NaN): id 0, the CPU's argmax() (an id left on the device for the
// next draft step's embedding must be a row); k > 1 pads with -1.
static void test_topk_no_number() {
    std::vector<float> x(2 * 40, NAN);
    for (int c = 0; c < 40; c++) x[40 + c] = c == 17 ? 1.0f : NAN;  // row 1: one number
    for (int k : {1, 3}) {
        std::vector<int> idx(2 * k, -9);
        std::vector<float> val(2 * k);
        TLAUNCH(2, 64, 0, topk_kernel)(x.data(), 40, k, idx.data(), val.data());
        std::vector<int> ref(2 * k, -1);
        ref[0] = k == 1 ? 0 : -1;
        ref[k] = 17;
        kt_compare_int("topk_kernel", idx.data(), ref.data(), idx.size(), kt_fmt("no number, k%d", k));
    }
}

// ---- row logsumexp -------------------------------------------------------------------------------------
// Tolerance: |got - ref| <= 1e-5 (1 + |ref|): float exp/log per term and a float sum over <= 5000
// terms of size <= 1 (relative error ~n * 2^-24 of a sum >= 1), far below 1e-5 at these n.
static void test_row_lse(int rows, int n, int block, const std::string& tag) {
    std::vector<float> x = kt_vec((size_t)rows * n, -30, 30);
    if (rows >= 2)
        for (int c = 0; c < n; c++) x[(size_t)n + c] = -INFINITY;  // row 1: no number -> -inf
    if (rows >= 3) x[(size_t)2 * n + n / 2] = NAN;                   // row 2: a NaN is ignored by the max only
    std::vector<float> lse(rows, 7.0f);
    TLAUNCH(rows, block, 0, row_lse_kernel)(x.data(), n, lse.data());
    std::vector<double> ref(rows);
    for (int r = 0; r < rows; r++) {
        const float* xr = &x[(size_t)r * n];
        double mx = -INFINITY, s = 0;
        for (int c = 0; c < n; c++) if (xr[c] == xr[c]) mx = std::max(mx, (double)xr[c]);
        for (int c = 0; c < n; c++) s += std::exp((double)xr[c] - mx);
        ref[r] = mx == -INFINITY ? -INFINITY : mx + std::log(s);  // a NaN entry makes the sum NaN, as the kernel
    }
    std::string what = kt_fmt("rows%d n%d block%d %s", rows, n, block, tag.c_str());
    kt_compare("row_lse_kernel", lse, ref, 1e-5, 1e-5, what);
}

int main() {
    for (int block : {32, 256, 1024}) {
        test_ce(3, 300, 300, block, "");
        test_ce(2, 1000, 37, block, "");
        test_smoothl1(4, 77, block, "");
        test_adamw(40000, block, 5);
        test_topk(3, 500, 10, block, "");
        test_row_lse(4, 5000, block, "");
    }
    test_ce(2, 5, 1, 64, "");
    test_smoothl1(2, 1, 32, "");
    test_adamw(7, 32, 1);
    test_topk(2, 50000, 1, 256, "argmax");
    test_topk(2, 49159, 10, 1024, "vocab-wide, the launcher's 1024 threads");
    test_topk(2, 7, 12, 64, "k > n");
    test_topk(1, 1000, 20, 128, "");
    test_topk_no_number();
    kt_debug_modes([](const char* mode) {
        test_ce(2, 100, 33, 64, mode);
        test_smoothl1(2, 40, 64, mode);
        test_topk(2, 100, 5, 64, mode);
        test_row_lse(3, 300, 64, mode);
        test_adamw(20000, 64, 2);
    });
    return kt_finish("test_emu_kernels_loss");
}
