// naive_draft.h: the draft models of docs/method.md section 3 (Beagle) and section 4 (EAGLE-style) in float64, written from
// the equations with no code shared with src/ (loops over std::vector<double>): the reference of
// test_draft_equivalence.cpp and test_eagle_draft.cpp.
#pragma once
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "model/draft.h"

namespace beagle {

typedef std::vector<double> Vec;

// ---- method section 3 in float64, written from the equations ----------------------------------------
struct Naive {
    DraftConfig c;
    const DraftWeights* w;
    const DraftFrozen* fz;
    Vec rmsnorm(const Vec& x, const std::vector<float>& g, double eps) const {
        double ss = 0;
        for (double v : x) ss += v * v;
        double r = 1 / std::sqrt(ss / x.size() + eps);
        Vec y(x.size());
        for (size_t i = 0; i < x.size(); i++) y[i] = x[i] * r * g[i];
        return y;
    }
    Vec matvec(const std::vector<float>& W, const Vec& x, int out) const {
        Vec y(out, 0);
        for (int o = 0; o < out; o++)
            for (size_t i = 0; i < x.size(); i++) y[o] += (double)W[o * x.size() + i] * x[i];
        return y;
    }
    void rope(Vec& x, int pos, int heads) const {  // adjacent pairs (x[2i], x[2i+1]) of each head
        int hd = c.head_dim;
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < hd / 2; i++) {
                double f = std::pow((double)c.rope_theta, -2.0 * i / hd), a = pos * f;
                double x0 = x[h * hd + 2 * i], x1 = x[h * hd + 2 * i + 1];
                x[h * hd + 2 * i] = x0 * cos(a) - x1 * sin(a);
                x[h * hd + 2 * i + 1] = x0 * sin(a) + x1 * cos(a);
            }
    }
    // f^ of the query (token, pos) over key states (state, position)
    Vec query(int tok, int pos, const std::vector<std::pair<Vec, int>>& keys) const {
        int dim = c.dim, H = c.n_heads;
        Vec u(dim);
        for (int i = 0; i < dim; i++) u[i] = fz->embd[(size_t)tok * dim + i];
        Vec q = matvec(w->t[DT_WQ], rmsnorm(u, w->t[DT_NORM_Q], c.norm_eps), c.q_dim());
        rope(q, pos, H);
        std::vector<Vec> K, V;
        for (auto& kv : keys) {
            Vec ns = rmsnorm(kv.first, w->t[DT_NORM_KV], c.norm_eps);
            Vec k = matvec(w->t[DT_WK], ns, c.kv_dim());
            rope(k, kv.second, c.n_kv_heads);
            K.push_back(k);
            V.push_back(matvec(w->t[DT_WV], ns, c.kv_dim()));
        }
        return out_half(attend(q, K, V), u);
    }
    // softmax(q . K / sqrt(hd)) V per head (GQA: head h uses kv head h / (H / H_kv))
    Vec attend(const Vec& q, const std::vector<Vec>& K, const std::vector<Vec>& V) const {
        int H = c.n_heads, hd = c.head_dim, G = H / c.n_kv_heads;
        Vec att(c.q_dim(), 0);
        for (int h = 0; h < H; h++) {
            int kh = h / G;
            Vec s(K.size());
            double mx = -1e300, sum = 0;
            for (size_t j = 0; j < K.size(); j++) {
                double d = 0;
                for (int e = 0; e < hd; e++) d += q[h * hd + e] * K[j][kh * hd + e];
                s[j] = d / std::sqrt((double)hd);
                mx = std::max(mx, s[j]);
            }
            for (size_t j = 0; j < K.size(); j++) sum += std::exp(s[j] - mx);
            for (size_t j = 0; j < K.size(); j++)
                for (int e = 0; e < hd; e++) att[h * hd + e] += std::exp(s[j] - mx) / sum * V[j][kh * hd + e];
        }
        return att;
    }
    // a = u + Wo att;  f^ = a + W_down (silu(W_gate m) * W_up m),  m = RMSNorm_m(a)
    Vec out_half(const Vec& att, const Vec& u) const {
        int dim = c.dim;
        Vec a = matvec(w->t[DT_WO], att, dim);
        for (int i = 0; i < dim; i++) a[i] += u[i];
        Vec m = rmsnorm(a, w->t[DT_NORM_M], c.norm_eps);
        Vec g = matvec(w->t[DT_W_GATE], m, c.ffn_dim), up = matvec(w->t[DT_W_UP], m, c.ffn_dim);
        for (int i = 0; i < c.ffn_dim; i++) g[i] = g[i] / (1 + std::exp(-g[i])) * up[i];
        Vec fh = matvec(w->t[DT_W_DOWN], g, dim);
        for (int i = 0; i < dim; i++) fh[i] += a[i];
        return fh;
    }
    // Method section 4's EAGLE draft on a sequence of n inputs (token tok[i] with feature feat[i] at position
    // pos[i]): x_i = fc_e E(tok_i) + fc_f feat_i; xn = RMSNorm_in(x) (norm_q); causal self-attention,
    // query i over keys 0..i; then the output half. Returns f^ of every input.
    std::vector<Vec> eagle(const std::vector<int>& tok, const std::vector<Vec>& feat, const std::vector<int>& pos) const {
        int dim = c.dim;
        std::vector<Vec> X, Q, K, V, out;
        for (size_t i = 0; i < tok.size(); i++) {
            Vec e(dim);
            for (int k = 0; k < dim; k++) e[k] = fz->embd[(size_t)tok[i] * dim + k];
            Vec x = matvec(w->t[DT_FC_E], e, dim), xf = matvec(w->t[DT_FC_F], feat[i], dim);
            for (int k = 0; k < dim; k++) x[k] += xf[k];
            Vec xn = rmsnorm(x, w->t[DT_NORM_Q], c.norm_eps);
            Vec q = matvec(w->t[DT_WQ], xn, c.q_dim()), k = matvec(w->t[DT_WK], xn, c.kv_dim());
            rope(q, pos[i], c.n_heads);
            rope(k, pos[i], c.n_kv_heads);
            X.push_back(x);
            Q.push_back(q);
            K.push_back(k);
            V.push_back(matvec(w->t[DT_WV], xn, c.kv_dim()));
        }
        for (size_t i = 0; i < tok.size(); i++) {
            std::vector<Vec> Ki(K.begin(), K.begin() + i + 1), Vi(V.begin(), V.begin() + i + 1);
            out.push_back(out_half(attend(Q[i], Ki, Vi), X[i]));
        }
        return out;
    }
    Vec logits(const Vec& f) const {
        const std::vector<float>& head = fz->lm_head.empty() ? fz->embd : fz->lm_head;
        return matvec(head, rmsnorm(f, fz->out_norm, c.final_eps), c.vocab_size);
    }
    // L_i = CE(softmax(target logits of f), draft logits of fh) + 10 * mean SmoothL1_beta=1(fh - f)
    double loss(const Vec& fh, const Vec& f) const {
        Vec zt = logits(f), zd = logits(fh);
        auto lse = [](const Vec& z) {
            double m = -1e300, s = 0;
            for (double v : z) m = std::max(m, v);
            for (double v : z) s += std::exp(v - m);
            return m + std::log(s);
        };
        double lt = lse(zt), ld = lse(zd), ce = 0, sl = 0;
        for (size_t v = 0; v < zt.size(); v++) ce -= std::exp(zt[v] - lt) * (zd[v] - ld);
        for (size_t i = 0; i < f.size(); i++) {
            double d = std::fabs(fh[i] - f[i]);
            sl += d < 1 ? 0.5 * d * d : d - 0.5;
        }
        return ce + 10.0 * sl / f.size();
    }
};

inline double rel_err(const float* got, const Vec& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); i++) {
        num = std::max(num, std::fabs(got[i] - want[i]));
        den = std::max(den, std::fabs(want[i]));
    }
    return num / (den > 0 ? den : 1);
}

}  // namespace beagle
