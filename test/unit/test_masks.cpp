// test_masks.cpp: the draft's attention masks. For several (T, w, offset, S), the visible
// (query, key) pairs are enumerated three ways — the mask rule (src/backend/xattn_mask.h), the CPU
// attention FORWARD op (q = 0 so scores are uniform, V one-hot per key: out[key] > 0 iff visible),
// and the attention BACKWARD op (dV rows that receive gradient from one query) — and compared with
// a direct implementation of docs/method.md section 6's text written here (windows as explicit intervals). Also the
// query rows of stage 1 / stage 2 and the diagonal rule (never j >= i).
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/xattn_mask.h"
#include "core/common.h"
#include "testlib.h"
#include "train/masks.h"

using namespace beagle;

// docs/method.md section 6, directly: windows [b, b+w) with b = o + m*w plus the partial first window [0, o).
struct Window { int b, e; };
static std::vector<Window> spec_windows(int T, int w, int o) {
    std::vector<Window> ws;
    if (o > 0) ws.push_back({0, std::min(o, T)});
    for (int b = o; b < T; b += w) ws.push_back({b, std::min(b + w, T)});
    return ws;
}
// Visible pairs (query q, set, key j) for stage 1 (S = 0) or stage-2 step s.
using Pair = std::pair<int, int>;  // (set * 1000 + j) per query
static std::set<int> spec_visible(int T, int w, int o, int step, int q) {
    std::set<int> vis;
    for (const Window& win : spec_windows(T, w, o)) {
        if (q < win.b || q >= win.e) continue;
        for (int j = 0; j < win.b; j++) vis.insert(j);                 // true states before the window
        if (step >= 2)                                                 // predicted states b..b+s-2 (own window)
            for (int r = win.b; r <= win.b + step - 2 && r < q; r++) vis.insert(1000 + r);
    }
    return vis;
}

static XAttnMask block_mask(int w, int o, int n_pred) {
    XAttnMask m;
    m.kind = XAttnMask::BLOCK;
    m.w = w;
    m.offset = o;
    m.n_pred = n_pred;
    return m;
}

// Visible keys of each query as seen by the forward and backward attention ops.
static void op_visible(CpuOps& ops, int T, const XAttnMask& m, const std::vector<int>& qrows,
                       std::vector<std::set<int>>* fwd, std::vector<std::set<int>>* bwd) {
    int hd = 2 * T, nq = (int)qrows.size();
    std::vector<float> q((size_t)nq * hd, 0.0f), k((size_t)T * hd, 0.5f), v0((size_t)T * hd, 0), v1((size_t)T * hd, 0);
    for (int j = 0; j < T; j++) {
        v0[(size_t)j * hd + j] = 1;      // set-0 key j -> channel j
        v1[(size_t)j * hd + T + j] = 1;  // set-1 key j -> channel T + j
    }
    XAttnKeys keys;
    keys.k0 = k.data();
    keys.v0 = v0.data();
    keys.n0 = T;
    keys.k1 = k.data();
    keys.v1 = v1.data();
    keys.n1 = T;
    std::vector<float> out((size_t)nq * hd), lse(nq);
    ops.xattn(out.data(), lse.data(), q.data(), qrows.data(), nq, keys, 1, 1, hd, m);
    fwd->assign(nq, {});
    bwd->assign(nq, {});
    for (int t = 0; t < nq; t++)
        for (int c = 0; c < hd; c++)
            if (out[(size_t)t * hd + c] > 0) (*fwd)[t].insert(c < T ? c : 1000 + c - T);
    for (int t = 0; t < nq; t++) {
        std::vector<float> dout((size_t)nq * hd, 0), dq((size_t)nq * hd), dk0((size_t)T * hd, 0), dv0((size_t)T * hd, 0),
            dk1((size_t)T * hd, 0), dv1((size_t)T * hd, 0);
        for (int c = 0; c < hd; c++) dout[(size_t)t * hd + c] = 1;
        XAttnGrads G;
        G.dk0 = dk0.data();
        G.dv0 = dv0.data();
        G.dk1 = dk1.data();
        G.dv1 = dv1.data();
        ops.xattn_bwd(dq.data(), G, dout.data(), out.data(), lse.data(), q.data(), qrows.data(), nq, keys, 1, 1, hd, m);
        for (int j = 0; j < T; j++) {
            if (dv0[(size_t)j * hd] != 0) (*bwd)[t].insert(j);
            if (dv1[(size_t)j * hd] != 0) (*bwd)[t].insert(1000 + j);
        }
    }
}

int main() {
    CpuOps ops(2);
    int cases = 0;
    struct C { int T, w; };
    for (C c : {C{13, 3}, C{16, 4}, C{20, 5}, C{7, 3}, C{9, 1}, C{25, 6}}) {
        for (int o = 0; o < c.w; o++) {
            // stage 1 and stage-2 steps 1..w (S up to w)
            for (int step = 1; step <= c.w; step++) {
                int n_pred = step - 1;
                XAttnMask m = block_mask(c.w, o, n_pred);
                std::vector<int> all(c.T);
                for (int q = 0; q < c.T; q++) all[q] = q;
                std::vector<std::set<int>> fwd, bwd;
                op_visible(ops, c.T, m, all, &fwd, &bwd);
                for (int q = 0; q < c.T; q++) {
                    std::set<int> want = spec_visible(c.T, c.w, o, step, q);
                    std::vector<int> keys(2 * c.T);
                    int nk = xattn_visible(m, q, q, c.T, c.T, keys.data());
                    std::set<int> helper;
                    for (int i = 0; i < nk; i++) helper.insert(keys[i] < c.T ? keys[i] : 1000 + keys[i] - c.T);
                    for (int i = 1; i < nk; i++) CHECK(keys[i] > keys[i - 1], "keys not in kernel order");
                    std::set<int> pred;
                    for (int j = 0; j < c.T; j++) {
                        if (xattn_sees(m, q, q, 0, j)) pred.insert(j);
                        if (xattn_sees(m, q, q, 1, j)) pred.insert(1000 + j);
                    }
                    CHECK(helper == want, "T %d w %d o %d step %d q %d: helper enumeration differs from the method's rule", c.T, c.w, o,
                          step, q);
                    CHECK(pred == want, "T %d w %d o %d step %d q %d: xattn_sees differs from the method's rule", c.T, c.w, o, step, q);
                    CHECK(fwd[q] == want, "T %d w %d o %d step %d q %d: forward op visibility differs from the method's rule", c.T,
                          c.w, o, step, q);
                    CHECK(bwd[q] == want, "T %d w %d o %d step %d q %d: backward op visibility differs from the method's rule", c.T,
                          c.w, o, step, q);
                    for (int k : want) CHECK(k % 1000 < q, "diagonal rule: query %d sees key %d", q, k % 1000);
                }
                cases++;
            }
            // query rows of each stage: stage 1 = every query whose window starts at b >= 1
            std::vector<int> s1;
            for (const Window& win : spec_windows(c.T, c.w, o))
                if (win.b >= 1)
                    for (int q = win.b; q < win.e; q++) s1.push_back(q);
            CHECK(stage1_rows(c.T, c.w, o) == s1, "stage1_rows T %d w %d o %d", c.T, c.w, o);
            for (int s = 1; s <= c.w; s++) {
                std::vector<int> s2;
                for (const Window& win : spec_windows(c.T, c.w, o))
                    if (win.b >= 1 && win.b + s - 1 < win.e) s2.push_back(win.b + s - 1);
                CHECK(stage2_rows(c.T, c.w, o, s) == s2, "stage2_rows T %d w %d o %d s %d", c.T, c.w, o, s);
            }
        }
    }
    // the attention on a SUBSET of query rows (what stage 2 computes) sees the same keys
    {
        int T = 17, w = 4, o = 2;
        for (int s = 1; s <= 4; s++) {
            std::vector<int> rows = stage2_rows(T, w, o, s);
            std::vector<std::set<int>> fwd, bwd;
            op_visible(ops, T, block_mask(w, o, s - 1), rows, &fwd, &bwd);
            for (size_t i = 0; i < rows.size(); i++) {
                std::set<int> want = spec_visible(T, w, o, s, rows[i]);
                CHECK(fwd[i] == want && bwd[i] == want, "stage-2 step %d row %d (subset) visibility", s, rows[i]);
                // method: query b+s-1 sees true j < b and predicted b..b+s-2
                int b = rows[i] - (s - 1);
                std::set<int> direct;
                for (int j = 0; j < b; j++) direct.insert(j);
                for (int r = b; r <= b + s - 2; r++) direct.insert(1000 + r);
                CHECK(want == direct, "stage-2 step %d row %d: the method's sentence", s, rows[i]);
            }
        }
    }
    // inference (PREFIX): all true rows; predicted rows by bit (concat) or none (no-concat)
    {
        int T = 6, n_pred = 5;
        std::vector<uint64_t> bits = {0, 1, 3, 7, 0b10101};
        XAttnMask m;
        m.kind = XAttnMask::PREFIX;
        m.set1_bits = bits.data();
        m.set1_words = 1;
        for (int t = 0; t < 5; t++) {
            std::vector<int> keys(T + n_pred);
            int nk = xattn_visible(m, t, -1, T, n_pred, keys.data());
            std::vector<int> want;
            for (int j = 0; j < T; j++) want.push_back(j);
            for (int r = 0; r < n_pred; r++)
                if (bits[t] >> r & 1) want.push_back(T + r);
            CHECK(std::vector<int>(keys.begin(), keys.begin() + nk) == want, "PREFIX query %d", t);
        }
        m.set1_bits = nullptr;
        std::vector<int> keys(T + n_pred);
        CHECK(xattn_visible(m, 0, -1, T, n_pred, keys.data()) == T, "no-concat sees only true states");
    }
    // the EAGLE draft's training-time test (masks.h ttt_mask) against the rule stated as a chain: query i of
    // depth k (it predicts what step-1 query i predicts) continues a chain whose last true input is at
    // index a = i - k + 1; it sees step 1's keys 0..a and, for m = 1..k-1, the key of index a + m made at
    // depth m + 1 (depth d's key of index x is set-1 row ttt_offset(n, d) + x - (d - 1))
    int ttt_cases = 0;
    for (int n = 2; n <= 70; n += (n < 12 ? 1 : 29))
        for (int k = 2; k <= std::min(n, 5); k++) {
            TttMask tm = ttt_mask(n, k);
            XAttnMask m = tm.mask();
            const int nk = n - k + 1, n1 = ttt_offset(n, k) + nk;
            CHECK((int)tm.qrow.size() == nk && tm.words == (n1 + 63) / 64, "ttt_mask(%d, %d): %zu queries", n, k, tm.qrow.size());
            for (int r = 0; r < nk; r++) {
                const int i = r + k - 1, a = i - k + 1;
                std::vector<int> want;
                for (int j = 0; j <= a; j++) want.push_back(j);
                for (int mm = 1; mm <= k - 1; mm++) want.push_back(n + ttt_offset(n, mm + 1) + (a + mm) - mm);
                std::vector<int> keys(n + n1);
                const int nk_vis = xattn_visible(m, r, tm.qrow[r], n, n1, keys.data());
                CHECK(std::vector<int>(keys.begin(), keys.begin() + nk_vis) == want, "ttt n %d step %d query %d", n, k, r);
                ttt_cases++;
            }
        }
    CHECK_THROWS(ttt_mask(4, 5), "step");
    printf("training-time test masks compared with the chain rule: %d queries\n", ttt_cases);
    CHECK_THROWS(stage1_rows(10, 3, 3), "offset");
    CHECK_THROWS(stage2_rows(10, 3, 0, 4), "step");
    printf("mask cases compared with the method's rule: %d (T, w, offset, step) combinations\n", cases);
    return test_summary("test_masks");
}
