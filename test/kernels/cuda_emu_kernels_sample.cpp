// cuda_emu_kernels_sample.cpp -> build/test/test_emu_kernels_sample: warp_rows_kernel (cuda/sample.cu: logits ->
// temperature / top-k / top-p sampling distributions and a draw per row) in the CPU emulator, against a
// reference written here (double precision, a sort, steps 1-5 of the kernel's header) and against the host's
// warp_dense (src/decode/sampling.cpp, run.c's walk) on tie-free rows; plus ties at the cuts, NaN / -inf /
// +inf entries, rows without a number, top_k = 1 (argmax), the rounding fallback of the draw, the launcher,
// block sizes 32..1024 and the emulator's reverse / random schedules with poisoned shared memory.
// Tolerances (stated at each comparison; the numbers reached are in the kernel-test log):
//   p against the reference: rtol 1e-5, atol 1e-30. The reference repeats the kernel's float steps up to the
//     exponent (v = x / T and v - m in float, as the kernel and the host), so what is left is expf (<= 2 ulp
//     on a GPU, 1 here), the float sum S over <= 49,152 terms in a fixed tree order, and two divisions:
//     ~1e-6 at worst (2.6e-7 seen), 10x under the tolerance. atol covers p in float's subnormal range.
//   kept sets: equal, except where the reference's top-p cumulative mass lies within 1e-5 (relative) of the
//     target top_p * M_k, where float summation order may move the cut by one group: then the kernel's
//     row is checked against the nearest of the cuts allowed there (counted, printed).
//   ids: the kernel's id c must satisfy cdf(c - 1) - 1e-5 <= u < cdf(c) + 1e-5 with p_ref(c) > 0 (cdf: the
//     reference's running sum in column order, whose float counterpart differs by < 1e-6): where u is more
//     than 1e-5 from every boundary that is the reference's id exactly, next to one it is one of the two
//     neighbours (both counted).
//   against warp_dense: the host sums up to 49,152 floats one after another (its sums are off by up to
//     n 2^-24 = 2.9e-3 relative; ~1e-4 seen), so: the same kept columns except those its top-p walk may take
//     or leave by that rounding (the mass above them within 1e-3 of the target), and on the columns both
//     keep p equal up to one factor per row (the normalisers' ratio, within 3e-3 of 1) to rtol 1e-5.
#include "cuda_kernel_test.h"
#include "sample.cu"

#include <chrono>
#include <numeric>

#include "decode/sampling.h"

// ---- the reference ----------------------------------------------------------------------------------
struct RefRow {
    std::vector<std::vector<double>> p;  // the allowed kept sets' distributions (p[0]: the exact cut)
    bool ambiguous = false;              // top-p cut within 1e-5 of the target
    bool no_number = false;
    std::vector<double> p1;              // step 1's p (softmax)
    double target = -1;                  // top_p * M_k (-1: top-p off)
};

// Steps 1-4 in double over a sort (ties: whole groups of equal p), for one row.
static RefRow ref_warp(const float* x, int n, float T, int top_k, float top_p) {
    RefRow R;
    std::vector<float> v(n);
    float m = -INFINITY;
    for (int i = 0; i < n; i++) {
        v[i] = x[i] / T;  // float division, as the kernel and the host
        if (v[i] == v[i]) m = std::max(m, v[i]);
    }
    std::vector<double> e(n);
    double S = 0;
    for (int i = 0; i < n; i++) {
        const float d = v[i] - m;  // float subtraction, as the kernel and the host
        e[i] = d == d ? std::exp((double)d) : 0.0;
        S += e[i];
    }
    if (!(S > 0)) {  // no number (or +inf): p = 0
        R.no_number = true;
        R.p.assign(1, std::vector<double>(n, 0.0));
        return R;
    }
    std::vector<double> p(n);
    for (int i = 0; i < n; i++) p[i] = e[i] / S;
    R.p1 = p;
    std::vector<int> ord(n);
    std::iota(ord.begin(), ord.end(), 0);
    std::stable_sort(ord.begin(), ord.end(), [&](int a, int b) { return p[a] > p[b]; });
    // group ends: g_end[j] = one past the last sorted index of the j-th group of equal p
    std::vector<int> g_end;
    for (int i = 1; i <= n; i++)
        if (i == n || p[ord[i]] != p[ord[i - 1]]) g_end.push_back(i);
    // top-k: the groups up to the one holding the top_k-th entry
    int gk = (int)g_end.size();
    if (top_k > 0 && top_k < n)
        for (int j = 0; j < (int)g_end.size(); j++)
            if (g_end[j] >= top_k) {
                gk = j + 1;
                break;
            }
    std::vector<double> cum(gk);  // mass of groups 0..j
    double c = 0;
    for (int j = 0, i = 0; j < gk; j++) {
        for (; i < g_end[j]; i++) c += p[ord[i]];
        cum[j] = c;
    }
    const double Mk = cum[gk - 1];
    std::vector<int> cuts{gk};  // kept groups: the exact cut first, then the ones rounding may pick
    if (top_p > 0 && top_p < 1) {
        const double target = (double)top_p * Mk, eps = 1e-5 * target;
        R.target = target;
        int g = gk;
        for (int j = 0; j < gk; j++)
            if (cum[j] > target) {
                g = j + 1;
                break;
            }
        cuts = {g};
        if (g >= 2 && target - cum[g - 2] < eps) cuts.push_back(g - 1);
        if (g < gk && cum[g - 1] - target < eps) cuts.push_back(g + 1);
        R.ambiguous = cuts.size() > 1;
    }
    for (int g : cuts) {
        std::vector<double> q(n, 0.0);
        const int kept = g_end[g - 1];
        double Z = 0;
        for (int i = 0; i < kept; i++) Z += p[ord[i]];
        for (int i = 0; i < kept; i++) q[ord[i]] = p[ord[i]] / Z;
        R.p.push_back(q);
    }
    return R;
}

// the worst |got - ref| / (atol + rtol |ref|) of a row (no record)
static double row_ratio(const float* got, const std::vector<double>& ref, double atol, double rtol) {
    double worst = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double err = std::fabs((double)got[i] - ref[i]);
        if (got[i] != got[i]) err = INFINITY;
        worst = std::max(worst, err / (atol + rtol * std::fabs(ref[i])));
    }
    return worst;
}

// Is id a draw of u from ref (running sum in column order), within eps of a boundary? exact: u is more than eps
// from both ends of id's interval.
static bool draw_ok(const std::vector<double>& ref, float u, int id, double eps, bool* exact) {
    *exact = false;
    if (id < 0 || id >= (int)ref.size() || !(ref[id] > 0)) return false;
    double before = 0;
    for (int c = 0; c < id; c++) before += ref[c];
    const double after = before + ref[id];
    *exact = u >= before + eps && u + eps < after;
    if (after >= 1 - eps && u >= before - eps) return true;  // the last interval: u up to 1 (rounding fallback)
    return u >= before - eps && u < after + eps;
}

// ---- tie-free rows -----------------------------------------------------------------------------------
// A shuffled monotone grid: x = spread (t + a t^9), t = (rank + 0.5) / n. Neighbouring logits differ by >= spread / n,
// so after / T (T <= 2) and expf neighbouring p differ by >= 1e-5 relative (>> float's 6e-8): no ties in the
// kernel's floats either. wide: spread 8, a = 2 (logits up to 24: peaked); narrow: spread 1, a = 0 (flat).
static std::vector<float> tie_free_rows(int rows, int n, bool wide) {
    std::vector<float> x((size_t)rows * n);
    for (int r = 0; r < rows; r++) {
        std::vector<int> rank(n);
        std::iota(rank.begin(), rank.end(), 0);
        for (int i = n - 1; i > 0; i--) std::swap(rank[i], rank[(int)(kt_rand() * (i + 1))]);
        const double spread = wide ? 8 : 1, a = wide ? 2 : 0, shift = kt_uniform(-3, 3);
        for (int i = 0; i < n; i++) {
            const double t = (rank[i] + 0.5) / n;
            x[(size_t)r * n + i] = (float)(spread * (t + a * std::pow(t, 9)) + shift);
        }
    }
    return x;
}

struct Counts {
    int rows = 0, ambiguous = 0, draws_exact = 0, draws_near = 0, host_rows = 0, host_cut_moved = 0;
    double host_max_factor = 0;
} g_n;

// Against the host's warp_dense (float sums one after another: its mass sums are off by up to n 2^-24, 2.9e-3
// relative at 49,152 terms, ~1e-4 seen): (a) the same kept columns, except columns the host's top-p walk may
// take or leave by its rounding: the reference's mass of the larger entries lies within 1e-3 of the target
// (counted); (b) on the columns both keep, p equal up to one factor per row (the two normalisers Z: within
// 3e-3 of 1) to rtol 1e-5 (the same expf of the same float arguments, then a few roundings each).
static void check_host(const float* xr, const float* pr, int n, float T, int top_k, float top_p, const RefRow& R,
                       const std::string& what) {
    beagle::SamplingParams sp;
    sp.temperature = T;
    sp.top_k = top_k;
    sp.top_p = top_p;
    std::vector<float> hp;
    beagle::warp_dense(xr, n, sp, &hp);
    g_n.host_rows++;
    int differ = 0, bad = -1;
    double sum_k = 0, sum_h = 0;
    for (int i = 0; i < n; i++) {
        if ((pr[i] > 0) != (hp[i] > 0)) {
            differ++;
            double larger = 0;  // the reference's mass of the entries above i
            for (int j = 0; j < n; j++)
                if (R.p1[j] > R.p1[i]) larger += R.p1[j];
            if (!(R.target > 0 && std::fabs(larger - R.target) <= 1e-3 * R.target) && bad < 0) bad = i;
        } else if (pr[i] > 0) {
            sum_k += pr[i];
            sum_h += hp[i];
        }
    }
    g_n.host_cut_moved += differ > 0;
    CHECK(bad < 0, "%s: column %d kept by one of kernel / host only (p %.9g / %.9g), not at the top-p cut", what.c_str(),
          bad, bad < 0 ? 0.0 : pr[bad], bad < 0 ? 0.0 : hp[bad]);
    const double f = sum_h > 0 ? sum_k / sum_h : 1.0;
    CHECK(std::fabs(f - 1) <= 3e-3, "%s: the normalisers differ by %.3g", what.c_str(), f - 1);
    g_n.host_max_factor = std::max(g_n.host_max_factor, std::fabs(f - 1));
    std::vector<float> got;
    std::vector<double> ref;
    for (int i = 0; i < n; i++)
        if (pr[i] > 0 && hp[i] > 0) {
            got.push_back(pr[i]);
            ref.push_back(f * hp[i]);
        }
    kt_compare("warp_rows_kernel", got, ref, 1e-30, 1e-5, what + " (kept by both, up to the normalisers' ratio)");
}

// Launch on rows x n logits, compare p and ids with the reference (and with warp_dense when host).
static void check_rows(const std::vector<float>& x, int rows, int n, float T, int top_k, float top_p, int block,
                       const std::vector<float>& coins, bool host, const std::string& tag) {
    std::vector<float> p((size_t)rows * n, -7.0f);
    std::vector<int> ids(rows, -9);
    const bool draw = !coins.empty();
    TLAUNCH(rows, block, 0, warp_rows_kernel)(p.data(), draw ? ids.data() : nullptr, draw ? coins.data() : nullptr,
                                              x.data(), n, T, top_k, top_p);
    const std::string what = kt_fmt("rows%d n%d T%.1f k%d p%.2f block%d %s", rows, n, T, top_k, top_p, block, tag.c_str());
    for (int r = 0; r < rows; r++) {
        const float* xr = &x[(size_t)r * n];
        const float* pr = &p[(size_t)r * n];
        RefRow R = ref_warp(xr, n, T, top_k, top_p);
        g_n.rows++;
        g_n.ambiguous += R.ambiguous;
        // the allowed cut nearest to the kernel's row (the exact one unless ambiguous)
        size_t best = 0;
        for (size_t j = 1; j < R.p.size(); j++)
            if (row_ratio(pr, R.p[j], 1e-30, 1e-5) < row_ratio(pr, R.p[best], 1e-30, 1e-5)) best = j;
        const std::vector<double>& ref = R.p[best];
        kt_compare("warp_rows_kernel", pr, ref.data(), n, 1e-30, 1e-5, what + kt_fmt(" row%d p", r));
        if (draw) {
            bool exact = false;
            int want = ids[r];
            if (R.no_number) {
                want = 0;
            } else if (!draw_ok(ref, coins[r], ids[r], 1e-5, &exact)) {
                want = -1;  // no column within 1e-5 of u's interval: report the reference's own draw
                double c = 0;
                for (int i = 0; i < n && want < 0; i++)
                    if ((c += ref[i]) > coins[r]) want = i;
            }
            (exact ? g_n.draws_exact : g_n.draws_near)++;
            kt_compare_int("warp_rows_kernel", &ids[r], &want, 1, what + kt_fmt(" row%d id (u %.7f)", r, coins[r]));
        }
        if (host) check_host(xr, pr, n, T, top_k, top_p, R, what + kt_fmt(" row%d vs warp_dense", r));
    }
}

static std::vector<float> random_coins(int rows) {
    std::vector<float> u(rows);
    for (auto& c : u) c = (float)kt_rand();
    return u;
}

static int launch_block(int n) { return n >= 8192 ? 1024 : 256; }  // launch_warp_rows' choice

// The sweep of tie-free rows: every (T, top_k, top_p, spread) for the shorter rows, a Latin-square selection
// (every value of each parameter at least 4 times) for 49,152 columns. Rows 1..6 in turn.
// Quick (BEAGLE_KERNEL_TEST_QUICK=1, test_cuda_kernels_valgrind.sh: a bounds check under memcheck): 1 case of 8
// of the sweep up to 100 columns, the special rows at 32 and 256 threads (ties at 32), 1024 threads on 9,000
// columns in the launcher's test, the debug schedules.
static const bool g_quick = kt_quick();

static void test_sweep() {
    const float temps[] = {0.3f, 0.8f, 1.0f, 2.0f};
    const float top_ps[] = {0.0f, 0.5f, 0.9f, 1.0f};
    int cycle = 0;
    for (int n : {1, 7, 100, 8192, 49152}) {
        if (g_quick && n >= 8192) continue;
        const int ks[] = {0, 1, 40, n};
        for (int ti = 0; ti < 4; ti++)
            for (int ki = 0; ki < 4; ki++)
                for (int pi = 0; pi < 4; pi++)
                    for (int wide = 0; wide < 2; wide++) {
                        if (n == 49152 && (ti + ki + pi) % 4 != 0) continue;  // 16 of 64, x 2 spreads
                        if (n == 8192 && (ti + ki + pi + wide) % 2 != 0) continue;  // half
                        if (g_quick && (ti + 2 * ki + pi + wide) % 8 != 0) continue;  // 1 of 8
                        const int rows = 1 + cycle++ % 6;
                        std::vector<float> x = tie_free_rows(rows, n, wide);
                        check_rows(x, rows, n, temps[ti], ks[ki], top_ps[pi], launch_block(n), random_coins(rows),
                                   true, wide ? "wide" : "narrow");
                    }
    }
}

// ---- ties, NaN, inf, argmax, the fallback ------------------------------------------------------------
// Logits on a 0.5 grid: many exact ties at every cut (all tied entries kept: the reference keeps whole groups).
static void test_ties(int block) {
    for (int top_k : {0, 1, 2, 5, 40})
        for (float top_p : {0.0f, 0.3f, 0.6f, 0.9f}) {
            const int rows = 3, n = 300;
            std::vector<float> x((size_t)rows * n);
            for (auto& v : x) v = (float)(int)(kt_uniform(0, 8)) * 0.5f;
            check_rows(x, rows, n, 0.7f, top_k, top_p, block, random_coins(rows), false, "ties");
        }
    // hand-made: 3 tied at the top-k cut, 4 tied across the top-p target
    std::vector<float> x = {3, 2, 2, 2, 1, 0, 0, -1, 1, 1, 1, 1, 0, 0, 0, 0};
    check_rows(x, 2, 8, 1.0f, 2, 0.0f, block, {0.3f, 0.9f}, false, "ties: top_k 2 keeps 1 + 3");
    std::vector<float> y(2 * 8);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 8; i++) y[r * 8 + i] = x[8 + i];
    check_rows(y, 2, 8, 1.0f, 0, 0.5f, block, {0.1f, 0.99f}, false, "ties: top_p 0.5 keeps 4 tied");
    // the counts: top_k 2 on row 0 keeps exactly 4 entries, top_p 0.5 on a row of 4 ones keeps 4
    std::vector<float> p(16);
    TLAUNCH(2, block, 0, warp_rows_kernel)(p.data(), nullptr, nullptr, x.data(), 8, 1.0f, 2, 0.0f);
    int kept = 0;
    for (int i = 0; i < 8; i++) kept += p[i] > 0;
    const int want = 4;
    kt_compare_int("warp_rows_kernel", &kept, &want, 1, "ties: entries kept by top_k 2 over {3, 2, 2, 2, ...}");
}

// NaN entries get p = 0; -inf entries p = 0; a row of NaN / -inf / with +inf: p = 0 and id 0.
static void test_special(int block) {
    const int n = 50;
    std::vector<float> x = kt_vec((size_t)6 * n, -4, 4);
    for (int i = 0; i < n; i += 7) x[i] = NAN;                               // row 0: some NaN
    for (int i = 3; i < n; i += 5) x[n + i] = -INFINITY;                     // row 1: some -inf
    for (int i = 0; i < n; i++) x[2 * n + i] = NAN;                          // row 2: all NaN
    for (int i = 0; i < n; i++) x[3 * n + i] = i % 2 ? NAN : -INFINITY;      // row 3: no number
    x[4 * n + 17] = INFINITY;                                                // row 4: +inf (no finite softmax)
    for (int i = 0; i < n; i++) x[5 * n + i] = i == 31 ? 2.0f : -INFINITY;  // row 5: one number
    for (int top_k : {0, 3})
        for (float top_p : {0.0f, 0.8f}) check_rows(x, 6, n, 0.9f, top_k, top_p, block, random_coins(6), false, "nan/inf");
    // the host's warp_dense follows the same rules (NaN -> p = 0; no number -> p = 0 and draw id 0): the same
    // kept columns and p to rtol 1e-5 (the same expf of the same floats, other summation orders), and the
    // host's draw of a row without a number is id 0 as the kernel's
    std::vector<float> p((size_t)6 * n), u = random_coins(6);
    std::vector<int> ids(6, -9);
    TLAUNCH(6, block, 0, warp_rows_kernel)(p.data(), ids.data(), u.data(), x.data(), n, 0.9f, 0, 0.8f);
    beagle::SamplingParams sp;
    sp.temperature = 0.9f;
    sp.top_p = 0.8f;
    for (int r = 0; r < 6; r++) {
        std::vector<float> hp;
        beagle::warp_dense(&x[(size_t)r * n], n, sp, &hp);
        const std::vector<double> kp(p.begin() + (size_t)r * n, p.begin() + (size_t)(r + 1) * n);
        kt_compare("warp_rows_kernel", hp.data(), kp.data(), n, 1e-7, 1e-5,
                   kt_fmt("host warp_dense vs the kernel, NaN / inf row %d", r));
        beagle::Candidates c;
        beagle::warp(&x[(size_t)r * n], n, sp, &c);
        if (r >= 2 && r <= 4) {
            const int host_id = beagle::sample_candidates(c, u[r]), want = 0;
            kt_compare_int("warp_rows_kernel", &host_id, &want, 1, kt_fmt("host draw of a row without a number, row %d", r));
            kt_compare_int("warp_rows_kernel", &ids[r], &want, 1, kt_fmt("kernel draw of a row without a number, row %d", r));
        }
    }
}

// top_k = 1: the argmax, p = 1 exactly, id = argmax whatever the coin.
static void test_argmax(int rows, int n, int block) {
    std::vector<float> x = tie_free_rows(rows, n, true);
    std::vector<float> p((size_t)rows * n), u = random_coins(rows);
    std::vector<int> ids(rows, -9), want(rows);
    TLAUNCH(rows, block, 0, warp_rows_kernel)(p.data(), ids.data(), u.data(), x.data(), n, 0.8f, 1, 0.9f);
    std::vector<double> ref((size_t)rows * n, 0.0);
    for (int r = 0; r < rows; r++) {
        want[r] = (int)(std::max_element(&x[(size_t)r * n], &x[(size_t)r * n] + n) - &x[(size_t)r * n]);
        ref[(size_t)r * n + want[r]] = 1.0;
    }
    const std::string what = kt_fmt("top_k 1 rows%d n%d block%d", rows, n, block);
    kt_compare("warp_rows_kernel", p, ref, 0, 0, what + " p (exact)");
    kt_compare_int("warp_rows_kernel", ids.data(), want.data(), rows, what + " id = argmax");
}

// The draw's fallback (no running sum exceeds u: rounding can get there for u near 1), forced with u = 1.5
// (outside the [0, 1) of a coin; every running sum is below it): the last column with p > 0.
static void test_fallback(int block) {
    const int rows = 3, n = 1000;
    std::vector<float> x = tie_free_rows(rows, n, false), p((size_t)rows * n), u(rows, 1.5f);
    std::vector<int> ids(rows, -9), want(rows, -1);
    TLAUNCH(rows, block, 0, warp_rows_kernel)(p.data(), ids.data(), u.data(), x.data(), n, 1.0f, 40, 0.0f);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < n; c++)
            if (p[(size_t)r * n + c] > 0) want[r] = c;
    kt_compare_int("warp_rows_kernel", ids.data(), want.data(), rows, kt_fmt("fallback u = 1.5 block%d", block));
}

// The launcher: the same bits as the kernel at its block size, and its argument checks.
struct TestRunner : KernelRunner {
    std::string failed;
    void after(const char*) override {}
    [[noreturn]] void fail(const std::string& msg) override { throw msg; }
};
static void test_launcher() {
    const int rows = 2, n = 9000;
    std::vector<float> x = tie_free_rows(rows, n, true), u = random_coins(rows);
    std::vector<float> p1((size_t)rows * n), p2((size_t)rows * n);
    std::vector<int> i1(rows), i2(rows);
    TLAUNCH(rows, 1024, 0, warp_rows_kernel)(p1.data(), i1.data(), u.data(), x.data(), n, 0.8f, 0, 0.9f);
    TestRunner kr;
    launch_warp_rows(p2.data(), i2.data(), u.data(), x.data(), rows, n, 0.8f, 0, 0.9f, kr);
    CHECK(memcmp(p1.data(), p2.data(), p1.size() * 4) == 0 && i1 == i2, "launch_warp_rows: not the 1024-thread bits");
    int refused = 0;
    auto expect_fail = [&](std::function<void()> f) {
        try {
            f();
        } catch (const std::string&) {
            refused++;
        }
    };
    expect_fail([&] { launch_warp_rows(p2.data(), i2.data(), u.data(), x.data(), rows, n, 0.0f, 0, 0.9f, kr); });
    expect_fail([&] { launch_warp_rows(p2.data(), i2.data(), nullptr, x.data(), rows, n, 0.8f, 0, 0.9f, kr); });
    expect_fail([&] { launch_warp_rows(p2.data(), i2.data(), u.data(), p2.data(), rows, n, 0.8f, 0, 0.9f, kr); });
    CHECK(refused == 3, "launch_warp_rows refused %d of 3 bad calls (temperature 0, ids without coins, p = x)", refused);
}

// Emulated time of one 49,152-column row (SmolLM2's vocabulary) at the launcher's 1024 threads.
static void time_vocab_row() {
    std::vector<float> x = tie_free_rows(1, 49152, false), p(49152), u{0.5f};
    std::vector<int> ids(1);
    for (auto cfg : {std::make_pair(0, 0.9f), std::make_pair(40, 0.9f), std::make_pair(0, 0.0f)}) {
        auto t0 = std::chrono::steady_clock::now();
        KLAUNCH(1, 1024, 0, 0, warp_rows_kernel)(p.data(), ids.data(), u.data(), x.data(), 49152, 0.8f, cfg.first,
                                                 cfg.second);
        cudaDeviceSynchronize();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        printf("emulated warp_rows_kernel, one 49,152-column row (flat, T 0.8, top_k %d, top_p %.1f, coin): %.1f ms\n",
               cfg.first, cfg.second, ms);
    }
}

int main() {
    test_sweep();
    for (int block : {32, 64, 256, 1024}) {
        if (g_quick && (block == 64 || block == 1024)) continue;
        if (!g_quick || block == 32) test_ties(block);
        test_special(block);
        test_argmax(3, 1000, block);
        test_fallback(block);
    }
    if (!g_quick) test_argmax(2, 49152, 1024);
    test_launcher();
    kt_debug_modes([](const char* mode) {
        const int rows = 3, n = 300;
        for (int top_k : {0, 40})
            for (float top_p : {0.0f, 0.9f}) {
                std::vector<float> x = tie_free_rows(rows, n, false);
                check_rows(x, rows, n, 0.8f, top_k, top_p, 64, random_coins(rows), true, mode);
            }
        test_ties(64);
        test_special(64);
        test_fallback(64);
    });
    printf("%d rows compared; %d with an ambiguous top-p cut; draws: %d exact, %d next to a boundary; %d rows vs "
           "warp_dense (%d with the top-p cut moved by rounding; normalisers' ratio within %.2e of 1)\n",
           g_n.rows, g_n.ambiguous, g_n.draws_exact, g_n.draws_near, g_n.host_rows, g_n.host_cut_moved,
           g_n.host_max_factor);
    if (!g_quick) time_vocab_row();
    return kt_finish("test_emu_kernels_sample");
}
