// dev.cuh: what the kernel progressions in cuda/dev/ share (in the manner of llm.c's dev/cuda/common.h):
// fixed-seed inputs, device buffers, a launch check, and the validation line of one version,
// "<op> v<N> ok max_err <e>" or "<op> v<N> FAIL max_err <e> tol <t>". Included by cuda/dev/*.cu only.
#pragma once
#include "../kernels.cuh"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

// Unit roundoff of fp32 (half an ulp of 1): one correctly rounded operation is off by at most u |result|.
constexpr double DEV_U32 = 1.0 / (1 << 24);

// ---- errors -------------------------------------------------------------------------------------
#define DEV_CHECK(call) dev_check_rc((call), #call, __FILE__, __LINE__)
static inline void dev_check_rc(cudaError_t e, const char* what, const char* file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, cudaGetErrorString(e));
    exit(1);
}
// After a launch: the launch's own error, then the kernel's (on the emulator the grid has already run).
static inline void dev_launched(const char* what) {
    dev_check_rc(cudaGetLastError(), what, __FILE__, __LINE__);
    dev_check_rc(cudaDeviceSynchronize(), what, __FILE__, __LINE__);
}

// ---- inputs -------------------------------------------------------------------------------------
struct DevRng {  // xorshift64*: the same numbers on every machine for a given seed
    uint64_t s;
    explicit DevRng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint32_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return (uint32_t)((s * 0x2545F4914F6CDD1Dull) >> 32);
    }
    float uniform() { return (float)((next() >> 8) * (2.0 / 16777216.0) - 1.0); }  // [-1, 1)
};
static inline std::vector<float> dev_rand(DevRng& r, size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = scale * r.uniform();
    return v;
}

// Dot product in double of two fp32 rows, and sum |a_i b_i| for an error bound.
static inline double dev_dot(const float* a, const float* b, int n, double* abs_sum) {
    double s = 0, sa = 0;
    for (int i = 0; i < n; i++) {
        s += (double)a[i] * b[i];
        sa += fabs((double)a[i] * b[i]);
    }
    *abs_sum = sa;
    return s;
}
// gamma_n = n u / (1 - n u): the relative error bound of an n-term fp32 sum or fma chain.
static inline double dev_gamma(int n) { return n * DEV_U32 / (1 - n * DEV_U32); }

// ---- device buffers -----------------------------------------------------------------------------
template <class T>
T* dev_upload(const std::vector<T>& h) {
    T* d = nullptr;
    DEV_CHECK(cudaMalloc(&d, h.size() * sizeof(T) + 1));
    DEV_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <class T>
T* dev_zeros(size_t n) {
    T* d = nullptr;
    DEV_CHECK(cudaMalloc(&d, n * sizeof(T) + 1));
    DEV_CHECK(cudaMemset(d, 0, n * sizeof(T)));
    return d;
}
template <class T>
std::vector<T> dev_download(const T* d, size_t n) {
    std::vector<T> h(n);
    DEV_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// ---- the shipped attention launch -----------------------------------------------------------------
// attention_v4_kernel (attention.cu) and the shipped xattn_bwd_dq_kernel run with a warp per query head
// of a kv head's group (at most 4 warps) and this dynamic shared memory, as cuda/xattn.cu launch_xattn_bwd
// (xattn_query_smem) launches the latter.
struct DevAttnLaunch {
    int threads;
    size_t smem;
};
static inline DevAttnLaunch dev_attn_launch(int n_heads, int n_kv_heads, int head_dim) {
    const int group = n_heads / n_kv_heads, warps = group < 4 ? group : 4;
    return {32 * warps, (size_t)attn_smem_floats(head_dim, warps) * sizeof(float)};
}

// ---- command line -------------------------------------------------------------------------------
// `./<op>` runs every version, `./<op> 3` only version 3 (as llm.c's `./matmul_forward 3`).
static inline bool dev_want(int argc, char** argv, int version) { return argc < 2 || atoi(argv[1]) == version; }

// ---- validation ---------------------------------------------------------------------------------
static int g_dev_failures = 0;

// BEAGLE_DEV_PLANT=<op> plants a bug in the last (shipped) version of <op>: the middle output element
// moves by 1e-3 (1 + |value|), above every tolerance used here (all well below 1e-3 at these shapes), so
// the line of that version must read FAIL (test/cli/test_cuda_dev.sh checks that the checker catches it).
static inline bool dev_planted(const char* op) {
    const char* p = getenv("BEAGLE_DEV_PLANT");
    return p && strcmp(p, op) == 0;
}

// Compare got[i] with ref[i] under the per-element tolerance tol[i] and print the version's line (a
// version with several outputs passes them concatenated). Returns whether it passed.
static inline bool dev_compare(const char* op, int version, std::vector<float> got, const std::vector<double>& ref,
                               const std::vector<double>& tol, bool plant) {
    if (plant && !got.empty()) {
        float& g = got[got.size() / 2];
        g += 1e-3f * (1.0f + fabsf(g));
    }
    double max_err = 0, worst = -1, worst_tol = 0;
    size_t bad = got.size() == ref.size() ? 0 : 1;
    for (size_t i = 0; i < got.size() && i < ref.size(); i++) {
        // equal values (an lse of -inf where a query sees no key) pass; otherwise within tol[i]
        const double err = got[i] == ref[i] ? 0.0 : fabs((double)got[i] - ref[i]);
        if (!(err <= tol[i])) bad++;
        if (!(err <= max_err)) max_err = err;  // a NaN sticks
        const double ratio = err / tol[i];
        if (!(ratio <= worst)) {
            worst = ratio;
            worst_tol = tol[i];
        }
    }
    if (bad == 0) {
        printf("%s v%d ok max_err %.3g\n", op, version, max_err);
        return true;
    }
    printf("%s v%d FAIL max_err %.3g tol %.3g (%zu of %zu elements outside)\n", op, version, max_err, worst_tol, bad,
           got.size());
    g_dev_failures++;
    return false;
}
