// test_draft_ops.cpp: every CPU training op (float, src/backend/cpu/, one file per op) against a
// naive float64 reference written here from the formulas (dense loops, a dense mask built from
// the method's rule), on ragged shapes; plus batch invariance (a row alone == the same row in a batch,
// bit for bit). Tolerance: relative 2e-5 of the output scale (float rounding over <= 100-term sums).
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/common.h"
#include "testlib.h"
#include "train/masks.h"
#include "backend/cpu/ops_f64.h"
#include "core/rng.h"

using namespace beagle;

static TrainRng rng(42);
static std::vector<float> randv(size_t n, double sd = 1.0) {
    std::vector<float> v(n);
    for (float& x : v) x = (float)(sd * rng.normal());
    return v;
}
static double scale_of(const std::vector<double>& r) {
    double m = 0;
    for (double x : r) m = std::max(m, std::fabs(x));
    return m > 0 ? m : 1;
}
// max |got - want| <= tol * max|want|
static void check_vec(const float* got, const std::vector<double>& want, double tol, const char* what) {
    double s = scale_of(want), worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < want.size(); i++) {
        double d = std::fabs(got[i] - want[i]);
        if (!(d <= worst)) worst = d, at = i;
    }
    CHECK(worst <= tol * s, "%s: max error %.3g at %zu (scale %.3g)", what, worst, at, s);
}

static void test_matmul(CpuOps& ops) {
    int Ts[] = {1, 5, 37}, ins[] = {1, 7, 33, 70}, outs[] = {1, 5, 50};
    for (int T : Ts)
        for (int ni : ins)
            for (int no : outs) {
                auto x = randv((size_t)T * ni), W = randv((size_t)no * ni), dy = randv((size_t)T * no);
                auto dx0 = randv((size_t)T * ni), dW0 = randv((size_t)no * ni);
                std::vector<double> y(T * no, 0), dx(T * ni, 0), dxa(T * ni), dW(no * ni);
                for (int t = 0; t < T; t++)
                    for (int o = 0; o < no; o++)
                        for (int i = 0; i < ni; i++) {
                            y[t * no + o] += (double)W[o * ni + i] * x[t * ni + i];
                            dx[t * ni + i] += (double)dy[t * no + o] * W[o * ni + i];
                        }
                for (size_t k = 0; k < dxa.size(); k++) dxa[k] = dx[k] + dx0[k];
                for (int o = 0; o < no; o++)
                    for (int i = 0; i < ni; i++) {
                        double s = dW0[o * ni + i];
                        for (int t = 0; t < T; t++) s += (double)dy[t * no + o] * x[t * ni + i];
                        dW[o * ni + i] = s;
                    }
                std::vector<float> gy(T * no), gdx(T * ni), gdxa = dx0, gdW = dW0;
                ops.matmul_f32(gy.data(), x.data(), W.data(), T, ni, no);
                ops.matmul_f32_bwd_x(gdx.data(), dy.data(), W.data(), T, ni, no, false);
                ops.matmul_f32_bwd_x(gdxa.data(), dy.data(), W.data(), T, ni, no, true);
                ops.matmul_f32_bwd_w(gdW.data(), dy.data(), x.data(), T, ni, no);
                std::string s = strfmt("T %d in %d out %d", T, ni, no);
                check_vec(gy.data(), y, 2e-6 * std::sqrt(ni) + 1e-6, ("matmul_f32 " + s).c_str());
                check_vec(gdx.data(), dx, 2e-6 * std::sqrt(no) + 1e-6, ("matmul_f32_bwd_x " + s).c_str());
                check_vec(gdxa.data(), dxa, 2e-6 * std::sqrt(no) + 1e-6, ("matmul_f32_bwd_x acc " + s).c_str());
                check_vec(gdW.data(), dW, 2e-6 * std::sqrt(T) + 1e-6, ("matmul_f32_bwd_w " + s).c_str());
                // batch invariance: each row alone gives the same bits
                for (int t = 0; t < T; t += 3) {
                    std::vector<float> y1(no), dx1(ni);
                    ops.matmul_f32(y1.data(), x.data() + t * ni, W.data(), 1, ni, no);
                    ops.matmul_f32_bwd_x(dx1.data(), dy.data() + t * no, W.data(), 1, ni, no, false);
                    CHECK(!memcmp(y1.data(), gy.data() + t * no, no * 4), "matmul_f32 row %d not batch-invariant (%s)", t,
                          s.c_str());
                    CHECK(!memcmp(dx1.data(), gdx.data() + t * ni, ni * 4), "matmul_f32_bwd_x row %d not batch-invariant", t);
                }
            }
}

static void test_rmsnorm(CpuOps& ops) {
    for (int dim : {1, 9, 64, 77})
        for (int T : {1, 6}) {
            auto x = randv((size_t)T * dim), w = randv(dim), dy = randv((size_t)T * dim), dx0 = randv((size_t)T * dim),
                 dw0 = randv(dim);
            float eps = 1e-5f;
            std::vector<double> y(T * dim), dx(T * dim), dw(dim);
            for (int i = 0; i < dim; i++) dw[i] = dw0[i];
            for (int t = 0; t < T; t++) {
                double ss = 0;
                for (int i = 0; i < dim; i++) ss += (double)x[t * dim + i] * x[t * dim + i];
                double r = 1 / std::sqrt(ss / dim + eps), gx = 0;
                for (int i = 0; i < dim; i++) {
                    y[t * dim + i] = w[i] * x[t * dim + i] * r;
                    gx += (double)dy[t * dim + i] * w[i] * x[t * dim + i];
                    dw[i] += (double)dy[t * dim + i] * x[t * dim + i] * r;
                }
                for (int i = 0; i < dim; i++)
                    dx[t * dim + i] = dx0[t * dim + i] + r * dy[t * dim + i] * w[i] - r * r * r * x[t * dim + i] * gx / dim;
            }
            std::vector<float> gy(T * dim), rstd(T), gdx = dx0, gdw = dw0;
            ops.rmsnorm_f32(gy.data(), rstd.data(), x.data(), w.data(), T, dim, eps);
            ops.rmsnorm_f32_bwd(gdx.data(), gdw.data(), dy.data(), x.data(), w.data(), rstd.data(), T, dim);
            check_vec(gy.data(), y, 2e-6, strfmt("rmsnorm_f32 dim %d", dim).c_str());
            check_vec(gdx.data(), dx, 2e-5, strfmt("rmsnorm_f32_bwd dx dim %d", dim).c_str());
            check_vec(gdw.data(), dw, 2e-5, strfmt("rmsnorm_f32_bwd dw dim %d", dim).c_str());
        }
}

static void test_rope(CpuOps& ops) {
    for (bool l3 : {false, true}) {
        RopeParams rp;
        rp.head_dim = 8;
        rp.theta = 500000.0f;
        rp.llama3_scaling = l3;
        rp.factor = 8;
        rp.orig_max_pos = 64;
        int T = 5, H = 3;
        auto x = randv((size_t)T * H * 8);
        std::vector<int> pos = {0, 3, 17, 100, 2047};
        std::vector<float> freq(4);
        CpuOps::rope_freqs(rp, freq.data());  // the target's frequencies (the lead's code): same formula
        std::vector<double> want(x.size());
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < 4; i++) {
                    double a = (double)pos[t] * freq[i], c = cos(a), s = sin(a);
                    double v0 = x[(t * H + h) * 8 + 2 * i], v1 = x[(t * H + h) * 8 + 2 * i + 1];
                    want[(t * H + h) * 8 + 2 * i] = v0 * c - v1 * s;
                    want[(t * H + h) * 8 + 2 * i + 1] = v0 * s + v1 * c;
                }
        std::vector<float> g = x;
        ops.rope(g.data(), pos.data(), T, H, rp, false);
        check_vec(g.data(), want, 2e-4, "rope");  // float angles at pos 2047: ~1e-4 relative
        ops.rope(g.data(), pos.data(), T, H, rp, true);
        std::vector<double> xd(x.begin(), x.end());
        check_vec(g.data(), xd, 1e-6, "rope inverse(forward(x)) == x");
    }
    // CpuOps keeps the last call's cos / sin: calls with other positions (same T), other parameters, fewer
    // tokens, and the first positions again must each give a fresh CpuOps's bits
    RopeParams a, b;
    a.head_dim = b.head_dim = 8;
    b.theta = 500000.0f;
    const std::vector<int> p1 = {0, 3, 17, 100}, p2 = {1, 3, 17, 100};
    struct Call { const std::vector<int>* pos; int T; const RopeParams* rp; bool inverse; };
    const Call calls[] = {{&p1, 4, &a, false}, {&p2, 4, &a, false}, {&p2, 4, &b, false}, {&p2, 3, &b, true},
                          {&p1, 4, &a, false}};
    for (const Call& c : calls) {
        auto x = randv((size_t)c.T * 2 * 8);
        std::vector<float> got = x, fresh = x;
        ops.rope(got.data(), c.pos->data(), c.T, 2, *c.rp, c.inverse);
        CpuOps(1).rope(fresh.data(), c.pos->data(), c.T, 2, *c.rp, c.inverse);
        CHECK(memcmp(got.data(), fresh.data(), got.size() * sizeof(float)) == 0,
              "rope after other calls differs from a fresh CpuOps (pos[0] %d, T %d, theta %g)", (*c.pos)[0], c.T,
              (double)c.rp->theta);
    }
}

// Dense reference attention over two key sets with the visibility from the method's rule (built here).
static void test_xattn(CpuOps& ops) {
    struct Case { int nq, n0, n1, H, KV, hd; XAttnMask m; };
    std::vector<Case> cases;
    for (int off : {0, 2}) {
        XAttnMask m;
        m.kind = XAttnMask::BLOCK;
        m.w = 3;
        m.offset = off;
        m.n_pred = 0;
        cases.push_back({11, 11, 0, 4, 2, 8, m});
        m.n_pred = 2;
        cases.push_back({11, 11, 11, 6, 3, 5, m});
    }
    XAttnMask pm;
    pm.kind = XAttnMask::PREFIX;
    cases.push_back({3, 7, 0, 2, 1, 16, pm});
    static std::vector<uint64_t> bits = {0b101, 0b011, 0b000};
    pm.set1_bits = bits.data();
    pm.set1_words = 1;
    cases.push_back({3, 7, 3, 2, 2, 9, pm});
    for (const Case& cs : cases) {
        int qd = cs.H * cs.hd, kvd = cs.KV * cs.hd, g = cs.H / cs.KV;
        auto q = randv((size_t)cs.nq * qd), k0 = randv((size_t)cs.n0 * kvd), v0 = randv((size_t)cs.n0 * kvd);
        auto k1 = randv((size_t)std::max(cs.n1, 1) * kvd), v1 = randv((size_t)std::max(cs.n1, 1) * kvd);
        auto dout = randv((size_t)cs.nq * qd);
        std::vector<int> qrow(cs.nq);
        for (int t = 0; t < cs.nq; t++) qrow[t] = t;
        // the method's rule, written directly (windows as explicit intervals)
        auto sees = [&](int t, int set, int j) -> bool {
            if (cs.m.kind == XAttnMask::PREFIX) return set == 0 || (cs.m.set1_bits && (bits[t] >> j & 1));
            int o = cs.m.offset, w = cs.m.w, b = 0;
            if (t >= o) b = o + ((t - o) / w) * w;
            return set == 0 ? j < b : (j >= b && j <= b + cs.m.n_pred - 1 && j < t);
        };
        std::vector<double> out(cs.nq * qd, 0), lse(cs.nq * cs.H), dq(cs.nq * qd, 0), dk0(cs.n0 * kvd, 0),
            dv0(cs.n0 * kvd, 0), dk1(std::max(cs.n1, 1) * kvd, 0), dv1(std::max(cs.n1, 1) * kvd, 0);
        double sc = 1 / std::sqrt((double)cs.hd);
        for (int t = 0; t < cs.nq; t++)
            for (int h = 0; h < cs.H; h++) {
                int kh = h / g;
                std::vector<std::pair<int, int>> keys;
                for (int j = 0; j < cs.n0; j++)
                    if (sees(t, 0, j)) keys.push_back({0, j});
                for (int j = 0; j < cs.n1; j++)
                    if (sees(t, 1, j)) keys.push_back({1, j});
                auto K = [&](std::pair<int, int> k) { return (k.first ? k1.data() : k0.data()) + k.second * kvd + kh * cs.hd; };
                auto Vv = [&](std::pair<int, int> k) { return (k.first ? v1.data() : v0.data()) + k.second * kvd + kh * cs.hd; };
                if (keys.empty()) {
                    lse[t * cs.H + h] = -INFINITY;
                    continue;
                }
                std::vector<double> s(keys.size()), p(keys.size());
                double mx = -1e300, sum = 0;
                for (size_t i = 0; i < keys.size(); i++) {
                    double d = 0;
                    for (int e = 0; e < cs.hd; e++) d += (double)q[t * qd + h * cs.hd + e] * K(keys[i])[e];
                    s[i] = d * sc;
                    mx = std::max(mx, s[i]);
                }
                for (size_t i = 0; i < keys.size(); i++) sum += std::exp(s[i] - mx);
                for (size_t i = 0; i < keys.size(); i++) p[i] = std::exp(s[i] - mx) / sum;
                lse[t * cs.H + h] = mx + std::log(sum);
                double* o = &out[t * qd + h * cs.hd];
                for (size_t i = 0; i < keys.size(); i++)
                    for (int e = 0; e < cs.hd; e++) o[e] += p[i] * Vv(keys[i])[e];
                // backward: dP = dO V^T, dS = P (dP - sum_i P dP), dQ = scale dS K, dK += scale dS q, dV += P dO
                const float* dO = &dout[t * qd + h * cs.hd];
                std::vector<double> dP(keys.size());
                double Dsum = 0;
                for (size_t i = 0; i < keys.size(); i++) {
                    double d = 0;
                    for (int e = 0; e < cs.hd; e++) d += (double)dO[e] * Vv(keys[i])[e];
                    dP[i] = d;
                    Dsum += p[i] * d;
                }
                for (size_t i = 0; i < keys.size(); i++) {
                    double dS = p[i] * (dP[i] - Dsum);
                    auto& dK = keys[i].first ? dk1 : dk0;
                    auto& dV = keys[i].first ? dv1 : dv0;
                    for (int e = 0; e < cs.hd; e++) {
                        dq[t * qd + h * cs.hd + e] += sc * dS * K(keys[i])[e];
                        dK[keys[i].second * kvd + kh * cs.hd + e] += sc * dS * q[t * qd + h * cs.hd + e];
                        dV[keys[i].second * kvd + kh * cs.hd + e] += p[i] * dO[e];
                    }
                }
            }
        XAttnKeys keys;
        keys.k0 = k0.data();
        keys.v0 = v0.data();
        keys.n0 = cs.n0;
        keys.k1 = k1.data();
        keys.v1 = v1.data();
        keys.n1 = cs.n1;
        std::vector<float> go(cs.nq * qd), gl(cs.nq * cs.H), gdq(cs.nq * qd), gdk0(cs.n0 * kvd), gdv0(cs.n0 * kvd),
            gdk1(std::max(cs.n1, 1) * kvd), gdv1(std::max(cs.n1, 1) * kvd);
        ops.xattn(go.data(), gl.data(), q.data(), qrow.data(), cs.nq, keys, cs.H, cs.KV, cs.hd, cs.m);
        XAttnGrads G;
        G.dk0 = gdk0.data();
        G.dv0 = gdv0.data();
        G.dk1 = gdk1.data();
        G.dv1 = gdv1.data();
        ops.xattn_bwd(gdq.data(), G, dout.data(), go.data(), gl.data(), q.data(), qrow.data(), cs.nq, keys, cs.H, cs.KV,
                      cs.hd, cs.m);
        std::string nm = strfmt("xattn kind %d n_pred %d offset %d", cs.m.kind, cs.m.n_pred, cs.m.offset);
        check_vec(go.data(), out, 2e-5, (nm + " out").c_str());
        for (size_t i = 0; i < lse.size(); i++)
            CHECK((std::isinf(lse[i]) && std::isinf(gl[i])) || std::fabs(gl[i] - lse[i]) < 1e-5 * (1 + std::fabs(lse[i])),
                  "%s lse[%zu] %g vs %g", nm.c_str(), i, gl[i], lse[i]);
        check_vec(gdq.data(), dq, 5e-5, (nm + " dq").c_str());
        check_vec(gdk0.data(), dk0, 5e-5, (nm + " dk0").c_str());
        check_vec(gdv0.data(), dv0, 5e-5, (nm + " dv0").c_str());
        if (cs.n1) {
            check_vec(gdk1.data(), dk1, 5e-5, (nm + " dk1").c_str());
            check_vec(gdv1.data(), dv1, 5e-5, (nm + " dv1").c_str());
        }
        // batch invariance: each query alone gives the same bits
        for (int t = 0; t < cs.nq; t++) {
            std::vector<float> o1(qd), l1(cs.H);
            XAttnMask m1 = cs.m;
            if (m1.kind == XAttnMask::PREFIX && m1.set1_bits) m1.set1_bits = bits.data() + t;
            ops.xattn(o1.data(), l1.data(), q.data() + t * qd, qrow.data() + t, 1, keys, cs.H, cs.KV, cs.hd, m1);
            CHECK(!memcmp(o1.data(), go.data() + t * qd, qd * 4), "%s: query %d alone differs", nm.c_str(), t);
        }
    }
}

static void test_elementwise(CpuOps& ops) {
    size_t n = 37;
    auto g = randv(n, 2), u = randv(n), dout = randv(n);
    std::vector<double> dg(n), du(n);
    for (size_t i = 0; i < n; i++) {
        double sig = 1 / (1 + std::exp(-(double)g[i]));
        du[i] = dout[i] * g[i] * sig;
        dg[i] = dout[i] * u[i] * (sig + g[i] * sig * (1 - sig));
    }
    std::vector<float> gdg(n), gdu(n);
    ops.swiglu_bwd(gdg.data(), gdu.data(), dout.data(), g.data(), u.data(), n);
    check_vec(gdg.data(), dg, 1e-6, "swiglu_bwd dgate");
    check_vec(gdu.data(), du, 1e-6, "swiglu_bwd dup");

    // SmoothL1 (beta 0.7), rows of 13, mixture of small and large differences
    int rows = 3, dim = 13;
    float beta = 0.7f, scale = 0.3f;
    auto x = randv(rows * dim, 1.0), tg = randv(rows * dim, 1.0), dx0 = randv(rows * dim);
    std::vector<double> dx(rows * dim), loss(rows, 0);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < dim; i++) {
            double d = (double)x[r * dim + i] - tg[r * dim + i];
            double l = std::fabs(d) < beta ? 0.5 * d * d / beta : std::fabs(d) - 0.5 * beta;
            double dl = std::fabs(d) < beta ? d / beta : (d > 0 ? 1 : -1);
            loss[r] += scale * l / dim;
            dx[r * dim + i] = dx0[r * dim + i] + scale * dl / dim;
        }
    std::vector<float> gdx = dx0, gl(rows, 0);
    ops.smoothl1(gdx.data(), gl.data(), x.data(), tg.data(), rows, dim, beta, scale);
    check_vec(gdx.data(), dx, 1e-6, "smoothl1 dx");
    check_vec(gl.data(), loss, 1e-6, "smoothl1 loss");

    // chunked soft / hard cross-entropy against a dense reference
    int V = 23, C = 5;
    auto zt = randv(rows * V, 2), zd = randv(rows * V, 2);
    std::vector<int> labels = {0, 22, 7};
    std::vector<double> ref_soft(rows), ref_hard(rows), dsoft(rows * V), dhard(rows * V);
    for (int r = 0; r < rows; r++) {
        double mt = -1e300, md = -1e300, st = 0, sd = 0;
        for (int v = 0; v < V; v++) mt = std::max(mt, (double)zt[r * V + v]), md = std::max(md, (double)zd[r * V + v]);
        for (int v = 0; v < V; v++) st += std::exp(zt[r * V + v] - mt), sd += std::exp(zd[r * V + v] - md);
        double lt = mt + std::log(st), ld = md + std::log(sd);
        ref_soft[r] = 0;
        for (int v = 0; v < V; v++) {
            double p = std::exp(zt[r * V + v] - lt), q = std::exp(zd[r * V + v] - ld);
            ref_soft[r] -= scale * p * (zd[r * V + v] - ld);
            dsoft[r * V + v] = scale * (q - p);
            dhard[r * V + v] = scale * (q - (v == labels[r]));
        }
        ref_hard[r] = scale * (ld - zd[r * V + labels[r]]);
    }
    std::vector<float> m_t(rows, -INFINITY), s_t(rows, 0), m_d(rows, -INFINITY), s_d(rows, 0);
    std::vector<float> ct(rows * C), cd(rows * C);
    auto chunk = [&](const std::vector<float>& z, int v0, int Cc, std::vector<float>& out) {
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < Cc; c++) out[r * Cc + c] = z[r * V + v0 + c];
    };
    for (int v0 = 0; v0 < V; v0 += C) {
        int Cc = std::min(C, V - v0);
        chunk(zt, v0, Cc, ct);
        chunk(zd, v0, Cc, cd);
        ops.lse_update(m_t.data(), s_t.data(), ct.data(), rows, Cc);
        ops.lse_update(m_d.data(), s_d.data(), cd.data(), rows, Cc);
    }
    std::vector<float> ls(rows, 0), lh(rows, 0), gsoft(rows * V), ghard(rows * V), dz(rows * C);
    for (int v0 = 0; v0 < V; v0 += C) {
        int Cc = std::min(C, V - v0);
        chunk(zt, v0, Cc, ct);
        chunk(zd, v0, Cc, cd);
        ops.ce_soft_chunk(dz.data(), ls.data(), ct.data(), cd.data(), m_t.data(), s_t.data(), m_d.data(), s_d.data(),
                          rows, Cc, scale);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < Cc; c++) gsoft[r * V + v0 + c] = dz[r * Cc + c];
        ops.ce_hard_chunk(dz.data(), lh.data(), cd.data(), m_d.data(), s_d.data(), labels.data(), v0, rows, Cc, scale);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < Cc; c++) ghard[r * V + v0 + c] = dz[r * Cc + c];
    }
    check_vec(ls.data(), ref_soft, 1e-5, "ce_soft loss");
    check_vec(gsoft.data(), dsoft, 1e-5, "ce_soft dz");
    check_vec(lh.data(), ref_hard, 1e-5, "ce_hard loss");
    check_vec(ghard.data(), dhard, 1e-5, "ce_hard dz");

    // sumsq, AdamW
    auto big = randv(70001);
    double ss = 0;
    for (float v : big) ss += (double)v * v;
    CHECK_CLOSE(ops.sumsq(big.data(), big.size()), ss, 0, 1e-12);
    AdamWParams p;
    p.lr = 0.01f;
    p.weight_decay = 0.1f;
    p.grad_scale = 0.5f;
    p.step = 3;
    auto w = randv(n), m = randv(n, 0.1), v = randv(n, 0.1), gr = randv(n);
    for (float& e : v) e = std::fabs(e);
    std::vector<double> rw(n);
    for (size_t i = 0; i < n; i++) {
        double gi = gr[i] * 0.5, mi = 0.9 * m[i] + 0.1 * gi, vi = 0.95 * v[i] + 0.05 * gi * gi;
        double mh = mi / (1 - std::pow(0.9, 3)), vh = vi / (1 - std::pow(0.95, 3));
        rw[i] = w[i] * (1 - 0.01 * 0.1) - 0.01 * mh / (std::sqrt(vh) + 1e-8);
    }
    ops.adamw(w.data(), m.data(), v.data(), gr.data(), n, p);
    check_vec(w.data(), rw, 1e-6, "adamw");
}

static void test_rows(CpuOps& ops) {
    int width = 11;
    auto src = randv(7 * width);
    std::vector<int> idx = {6, 0, 3, 3};
    std::vector<float> dst(4 * width);
    ops.gather_rows(dst.data(), src.data(), idx.data(), 4, width);
    for (int i = 0; i < 4; i++) CHECK(!memcmp(&dst[i * width], &src[idx[i] * width], width * 4), "gather_rows row %d", i);
    std::vector<float> out = src, acc = src;
    std::vector<int> sidx = {2, 5, 0, 6};
    ops.scatter_rows(out.data(), dst.data(), sidx.data(), 4, width, false);
    ops.scatter_rows(acc.data(), dst.data(), sidx.data(), 4, width, true);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < width; k++) {
            CHECK(out[sidx[i] * width + k] == dst[i * width + k], "scatter_rows");
            CHECK(acc[sidx[i] * width + k] == src[sidx[i] * width + k] + dst[i * width + k], "scatter_rows accumulate");
        }
    CHECK(!memcmp(&out[width], &src[width], width * 4), "scatter_rows left other rows alone");
    ops.zero(out.data(), out.size());
    for (float v : out) CHECK(v == 0.0f, "zero");
}

// The float and float64 op sets are the same templates: the double set agrees with the float set.
static void test_f64_matches_f32(CpuOps& ops) {
    CpuOps64 o64(2);
    int T = 9, ni = 21, no = 13;
    auto x = randv(T * ni), W = randv(no * ni);
    std::vector<float> y(T * no);
    std::vector<double> xd(x.begin(), x.end()), Wd(W.begin(), W.end()), yd(T * no);
    ops.matmul_f32(y.data(), x.data(), W.data(), T, ni, no);
    o64.matmul_f32(yd.data(), xd.data(), Wd.data(), T, ni, no);
    check_vec(y.data(), yd, 2e-6, "f64 op set vs f32 op set (matmul_f32)");
}

int main() {
    for (int threads : {1, 2}) {
        CpuOps ops(threads);
        test_matmul(ops);
        test_rmsnorm(ops);
        test_rope(ops);
        test_xattn(ops);
        test_elementwise(ops);
        test_f64_matches_f32(ops);
        test_rows(ops);
    }
    return test_summary("test_draft_ops");
}
