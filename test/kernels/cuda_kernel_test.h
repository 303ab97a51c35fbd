// cuda_kernel_test.h: the harness of the kernel tests test/kernels/cuda_emu_kernels_*.cpp (each includes the
// cuda/*.cu files it tests and runs them in the CPU emulator). TLAUNCH launches a kernel and records
// its name and launch status; kt_compare checks a result against a reference with
// |got - ref| <= atol + rtol |ref| and records the kernel's worst error; kt_finish writes the
// kernel-test log (one line per kernel: name, launches, max error, tolerance) to
// $BEAGLE_KERNEL_LOG_DIR or <build>/kernel-tests/<test>.log, which test/cli/test_cuda_kernel_coverage.sh
// compares with the __global__ functions of cuda/*.cu. A kernel launched but never compared fails.
#pragma once
#include <sys/stat.h>

#include <algorithm>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "testlib.h"

struct KtStat {
    int launches = 0, failed_launches = 0, compares = 0;
    double max_abs = 0, worst_ratio = 0;  // worst |got - ref| / (atol + rtol |ref|)
    double atol = 0, rtol = 0;            // the tolerance of the worst comparison
    std::string worst_what;
};
static std::map<std::string, KtStat> g_kt;
// The kernel tests hand host vectors to kernels (legal in the emulator only); the emulator's check that
// pointer arguments are device memory guards the backend and cuda/dev (test_emu_faults shows it working).
static const bool g_kt_host_pointers = (beagle_emu::set_check_pointers(false), true);

// "center_rows_kernel<true, true>" -> "center_rows_kernel"
static inline std::string kt_base(const char* expr) {
    std::string s(expr);
    size_t p = s.find('<');
    if (p != std::string::npos) s = s.substr(0, p);
    while (!s.empty() && (s.back() == ' ' || s.back() == ')')) s.pop_back();
    while (!s.empty() && (s[0] == ' ' || s[0] == '(')) s.erase(0, 1);
    return s;
}

// Destroyed at the end of the launch's full expression: records the launch and its error status.
struct KtLaunchGuard {
    std::string name;
    ~KtLaunchGuard() {
        cudaError_t e = cudaGetLastError();
        KtStat& st = g_kt[name];
        st.launches++;
        if (e != cudaSuccess) {
            st.failed_launches++;
            g_checks++;
            g_failures++;
            fprintf(stderr, "FAIL launch of %s: %s (%s)\n", name.c_str(), cudaGetErrorString(e),
                    beagle_emu::last_error_detail().c_str());
        }
    }
};
// TLAUNCH(grid, block, smem, kernel)(args...): KLAUNCH on stream 0, recorded.
#define TLAUNCH(grid, block, smem, ...) KtLaunchGuard{kt_base(#__VA_ARGS__)}, KLAUNCH(grid, block, smem, 0, __VA_ARGS__)

// Compare n values; `what` names the case. Returns true if all within tolerance.
static inline bool kt_compare(const char* kernel, const float* got, const double* ref, size_t n, double atol, double rtol,
                              const std::string& what) {
    KtStat& st = g_kt[kernel];
    st.compares++;
    double max_abs = 0, worst = 0;
    size_t bad = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        double err = std::fabs((double)got[i] - ref[i]);
        if (std::isnan(got[i]) != std::isnan(ref[i])) err = INFINITY;
        if (std::isnan(got[i]) && std::isnan(ref[i])) err = 0;
        if (std::isinf(ref[i]) && got[i] == ref[i]) err = 0;
        double ratio = err / (atol + rtol * std::fabs(ref[i]));
        if (err > max_abs) max_abs = err;
        if (ratio > worst) {
            worst = ratio;
            if (ratio > 1 && bad == (size_t)-1) bad = i;
        }
    }
    if (max_abs > st.max_abs) st.max_abs = max_abs;
    if (worst >= st.worst_ratio) {
        st.worst_ratio = worst;
        st.atol = atol;
        st.rtol = rtol;
        st.worst_what = what;
    }
    CHECK(bad == (size_t)-1, "%s [%s]: element %zu got %.9g want %.9g (atol %g rtol %g)", kernel, what.c_str(),
          bad == (size_t)-1 ? 0 : bad, bad == (size_t)-1 ? 0.0 : got[bad], bad == (size_t)-1 ? 0.0 : ref[bad], atol,
          rtol);
    return bad == (size_t)-1;
}
static inline bool kt_compare(const char* kernel, const std::vector<float>& got, const std::vector<double>& ref,
                              double atol, double rtol, const std::string& what) {
    CHECK(got.size() == ref.size(), "%s [%s]: size %zu vs %zu", kernel, what.c_str(), got.size(), ref.size());
    return kt_compare(kernel, got.data(), ref.data(), std::min(got.size(), ref.size()), atol, rtol, what);
}
// Exact comparison of integers (indices), recorded as error 0 or 1.
static inline bool kt_compare_int(const char* kernel, const int* got, const int* ref, size_t n, const std::string& what) {
    std::vector<float> g(n);
    std::vector<double> r(n);
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)got[i];
        r[i] = (double)ref[i];
    }
    return kt_compare(kernel, g.data(), r.data(), n, 0.0, 0.0, what + " (exact)");
}

// BEAGLE_KERNEL_TEST_QUICK=1 (set by test_cuda_kernels_valgrind.sh: a bounds check under memcheck): a kernel
// test that honours it drops its costliest cases, keeping every code path; each test says what it drops.
static inline bool kt_quick() {
    const char* v = getenv("BEAGLE_KERNEL_TEST_QUICK");
    return v && atoi(v) > 0;
}

// Run fn under the emulator's debug modes that expose missing barriers and reads of unwritten shared
// memory: reverse and random thread orders with NaN-poisoned shared memory, then back to normal.
static inline void kt_debug_modes(const std::function<void(const char* mode)>& fn) {
    beagle_emu::set_poison(true);
    beagle_emu::set_schedule(beagle_emu::Schedule::Reverse);
    fn("reverse+poison");
    beagle_emu::set_schedule(beagle_emu::Schedule::Random, 7);
    fn("random+poison");
    beagle_emu::set_schedule(beagle_emu::Schedule::Forward);
    beagle_emu::set_poison(false);
}

static inline std::string kt_log_dir() {
    if (const char* d = getenv("BEAGLE_KERNEL_LOG_DIR")) return d;
    if (const char* b = getenv("BEAGLE_BIN")) {
        std::string s(b);
        size_t p = s.rfind('/');
        return (p == std::string::npos ? std::string(".") : s.substr(0, p)) + "/kernel-tests";
    }
    return "build/kernel-tests";
}

// Print and write the kernel-test log of this binary; returns the exit code.
static inline int kt_finish(const char* test_name) {
    std::string dir = kt_log_dir();
    std::string cmd = "mkdir -p '" + dir + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "warning: cannot create %s\n", dir.c_str());
    std::string lines;
    for (auto& kv : g_kt) {
        const KtStat& st = kv.second;
        bool ok = st.launches > 0 && st.failed_launches == 0 && st.compares > 0 && st.worst_ratio <= 1.0;
        CHECK(st.compares > 0, "kernel %s was launched but its result never compared", kv.first.c_str());
        char buf[512];
        snprintf(buf, sizeof buf,
                 "kernel %-26s %s launches %4d checks %3d max_abs_err %.3e max_err/tol %.3f (tol: atol %.1e rtol %.1e, "
                 "worst case: %s)\n",
                 kv.first.c_str(), ok ? "ok  " : "FAIL", st.launches, st.compares, st.max_abs, st.worst_ratio, st.atol,
                 st.rtol, st.worst_what.c_str());
        lines += buf;
    }
    fputs(lines.c_str(), stdout);
    int rc = test_summary(test_name);
    std::string path = dir + "/" + test_name + ".log";
    std::string tmp = path + ".tmp";
    if (FILE* f = fopen(tmp.c_str(), "w")) {
        fprintf(f, "# %s: %s\n", test_name, rc == 0 ? "passed" : "FAILED");
        // The identity of the binary that wrote this log (size and mtime of /proc/self/exe, as
        // `stat -L -c '%s %.9Y'` prints them): test_cuda_kernel_coverage.sh trusts a log only when
        // it names the binary that exists now, so a log of an older build or of a removed test vouches for nothing.
        struct stat sb;
        if (stat("/proc/self/exe", &sb) == 0)
            fprintf(f, "# binary %lld %lld.%09ld\n", (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                    (long)sb.st_mtim.tv_nsec);
        fputs(lines.c_str(), f);
        fclose(f);
        rename(tmp.c_str(), path.c_str());
    }
    return rc;
}

// ---- inputs -------------------------------------------------------------------------------------
static uint64_t g_kt_rng = 0x9E3779B97F4A7C15ull;
static inline double kt_rand() {  // uniform [0, 1)
    g_kt_rng ^= g_kt_rng << 13;
    g_kt_rng ^= g_kt_rng >> 7;
    g_kt_rng ^= g_kt_rng << 17;
    return (double)(g_kt_rng >> 11) / 9007199254740992.0;
}
static inline float kt_uniform(float lo, float hi) { return lo + (float)kt_rand() * (hi - lo); }
static inline std::vector<float> kt_vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = kt_uniform(lo, hi);
    return v;
}
static inline std::string kt_fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static inline std::string kt_fmt(const char* fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}
