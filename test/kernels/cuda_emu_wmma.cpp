// cuda_emu_wmma.cpp -> build/test/test_emu_wmma: nvcuda::wmma in the CUDA emulator (8-bit inputs with
// int accumulators exact, against a 64-bit integer reference). GEMMs with one
// warp per output tile (m16n16k16, m32n8k16, m8n32k16) for __half and __nv_bfloat16 inputs, row- and
// column-major B, row- and column-major stores, an accumulator loaded from C, elementwise scaling
// looped to num_elements, a __half accumulator, tiles staged through shared memory, and tf32.
// Reference: double-precision products of the inputs AFTER rounding to the input type, so the
// only error left is the fp32 accumulation (bound 1e-5 * sum|a*b|) or the __half accumulator's
// rounding after each k-step (bound 1e-2 * sum|a*b|).
#include "testlib.h"

#include <chrono>
#include <vector>

using namespace nvcuda;

static uint32_t g_rng = 777;
static float frand() {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}
template <class T> static T to_t(float v);
template <> __half to_t<__half>(float v) { return __float2half(v); }
template <> __nv_bfloat16 to_t<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
static float to_f(__half v) { return __half2float(v); }
static float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

// C = alpha * A * B (+ C if accumulate). A: M x K row-major. B: K x N row-major (ldb = N) or, for
// col_major, stored as N x K row-major (ldb = K). C: row-major (ldc = N) or col-major (ldc = M).
// blockDim = (32, warps); warp (threadIdx.y) of block (bx, by) computes tile (by * warps + y, bx).
template <class T, class LayoutB, int TM, int TN, int TK>
__global__ void wmma_gemm(const T* A, const T* B, float* C, int M, int N, int K, bool col_c, bool accumulate,
                          float alpha) {
    const int tile_m = blockIdx.y * blockDim.y + threadIdx.y, tile_n = blockIdx.x;
    if (tile_m * TM >= M) return;  // the whole warp leaves together
    const bool b_row = std::is_same<LayoutB, wmma::row_major>::value;
    const int ldb = b_row ? N : K, ldc = col_c ? M : N;
    float* c_tile = col_c ? C + (size_t)tile_n * TN * M + tile_m * TM : C + (size_t)tile_m * TM * N + tile_n * TN;
    const wmma::layout_t c_layout = col_c ? wmma::mem_col_major : wmma::mem_row_major;
    wmma::fragment<wmma::matrix_a, TM, TN, TK, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, TM, TN, TK, T, LayoutB> b;
    wmma::fragment<wmma::accumulator, TM, TN, TK, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += TK) {
        wmma::load_matrix_sync(a, A + (size_t)tile_m * TM * K + k0, K);
        wmma::load_matrix_sync(b, b_row ? B + (size_t)k0 * ldb + tile_n * TN : B + (size_t)tile_n * TN * ldb + k0, ldb);
        wmma::mma_sync(acc, a, b, acc);
    }
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= alpha;
    if (accumulate) {
        wmma::fragment<wmma::accumulator, TM, TN, TK, float> c;
        wmma::load_matrix_sync(c, c_tile, ldc, c_layout);
        for (int i = 0; i < c.num_elements; i++) acc.x[i] += c.x[i];
    }
    wmma::store_matrix_sync(c_tile, acc, ldc, c_layout);
}

// Returns the number of wrong elements; tol = rel * sum|a*b| + 1e-6.
template <class T, class LayoutB, int TM, int TN, int TK>
static int run_gemm(int M, int N, int K, bool col_c, bool accumulate, float alpha, int warps, double rel,
                    double* ms = nullptr) {
    const bool b_row = std::is_same<LayoutB, wmma::row_major>::value;
    std::vector<T> A(M * K), B(K * N);
    std::vector<float> C(M * N), C0(M * N);
    for (auto& v : A) v = to_t<T>(frand());
    for (auto& v : B) v = to_t<T>(frand());
    for (auto& v : C0) v = frand();
    C = C0;
    const dim3 block(32, warps), grid(N / TN, (M / TM + warps - 1) / warps);
    const auto t0 = std::chrono::steady_clock::now();
    KLAUNCH(grid, block, 0, 0, wmma_gemm<T, LayoutB, TM, TN, TK>)(A.data(), B.data(), C.data(), M, N, K, col_c,
                                                                accumulate, alpha);
    if (ms) *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (cudaGetLastError() != cudaSuccess) return -1;
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double r = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double p = (double)to_f(A[i * K + k]) * to_f(b_row ? B[k * N + j] : B[j * K + k]);
                r += p, mag += fabs(p);
            }
            r *= alpha, mag *= fabs(alpha);
            const double c0 = col_c ? C0[j * M + i] : C0[i * N + j];
            if (accumulate) r += c0, mag += fabs(c0);
            const double got = col_c ? C[j * M + i] : C[i * N + j];
            if (fabs(got - r) > rel * mag + 1e-6 && bad++ < 5)
                fprintf(stderr, "  C[%d][%d] = %.7g want %.7g\n", i, j, got, r);
        }
    return bad;
}

static void test_gemms() {
    typedef wmma::row_major R;
    typedef wmma::col_major Cm;
    CHECK((run_gemm<__half, R, 16, 16, 16>(48, 32, 64, false, false, 1.0f, 2, 1e-5)) == 0, "half, B row, C row");
    CHECK((run_gemm<__half, Cm, 16, 16, 16>(48, 32, 64, false, false, 1.0f, 2, 1e-5)) == 0, "half, B col, C row");
    CHECK((run_gemm<__half, R, 16, 16, 16>(32, 48, 16, true, false, 0.5f, 1, 1e-5)) == 0, "half, C col, alpha");
    CHECK((run_gemm<__half, Cm, 16, 16, 16>(64, 16, 32, true, true, -2.0f, 4, 1e-5)) == 0, "half, C col, accumulate");
    CHECK((run_gemm<__nv_bfloat16, R, 16, 16, 16>(48, 32, 64, false, false, 1.0f, 3, 1e-5)) == 0, "bf16, B row");
    CHECK((run_gemm<__nv_bfloat16, Cm, 16, 16, 16>(16, 64, 128, false, true, 1.0f, 1, 1e-5)) == 0, "bf16, B col, acc");
    CHECK((run_gemm<__half, R, 32, 8, 16>(64, 24, 48, false, false, 1.0f, 2, 1e-5)) == 0, "half m32n8k16");
    CHECK((run_gemm<__nv_bfloat16, Cm, 8, 32, 16>(24, 64, 32, true, true, 1.0f, 3, 1e-5)) == 0, "bf16 m8n32k16");
    double ms = 0;
    CHECK((run_gemm<__half, R, 16, 16, 16>(128, 128, 128, false, false, 1.0f, 4, 1e-5, &ms)) == 0, "half 128^3");
    printf("wmma gemm 128^3 (4 warps per block): %.1f ms\n", ms);
}

// ---- __half accumulator -----------------------------------------------------------------------
__global__ void wmma_half_acc(const __half* A, const __half* B, __half* C, int K) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, __half> acc;
    wmma::fill_fragment(acc, __float2half(0.0f));
    for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::load_matrix_sync(a, A + k0, K);
        wmma::load_matrix_sync(b, B + (size_t)k0 * 16, 16);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);
}

static void test_half_accumulator() {
    const int K = 64;
    std::vector<__half> A(16 * K), B(K * 16), C(256);
    for (auto& v : A) v = __float2half(frand());
    for (auto& v : B) v = __float2half(frand());
    KLAUNCH(1, 32, 0, 0, wmma_half_acc)(A.data(), B.data(), C.data(), K);
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double r = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double p = (double)__half2float(A[i * K + k]) * __half2float(B[k * 16 + j]);
                r += p, mag += fabs(p);
            }
            bad += fabs(__half2float(C[i * 16 + j]) - r) > 1e-2 * mag;
        }
    CHECK(bad == 0, "%d wrong", bad);
}

// ---- 8-bit inputs, int accumulators: exact integer products (s8 x s8 and u8 x u8) -------------------
template <class T, class LB>
__global__ void wmma_int8(const T* A, const T* B, int* C, int K, int ldb) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc;
    wmma::fill_fragment(acc, 7);  // a non-zero start: C = 7 + A B
    const bool row = std::is_same<LB, wmma::row_major>::value;
    for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::load_matrix_sync(a, A + k0, K);
        wmma::load_matrix_sync(b, row ? B + (size_t)k0 * ldb : B + k0, ldb);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);
}

template <class T, class LB>
static int run_int8(int lo, int hi) {
    const int K = 512;  // u8 sums reach 200^2 x 512 > 2^24: a float accumulation would round
    const bool row = std::is_same<LB, wmma::row_major>::value;
    std::vector<T> A(16 * K), B(K * 16);
    for (auto& v : A) v = (T)(lo + (int)(frand() * 0.5f * (hi - lo) + 0.5f * (hi - lo)) % (hi - lo + 1));
    for (auto& v : B) v = (T)(lo + (int)(frand() * 0.5f * (hi - lo) + 0.5f * (hi - lo)) % (hi - lo + 1));
    A[0] = (T)lo, B[0] = (T)hi;  // the extremes: -128 * 127 (s8)
    std::vector<int> C(256);
    KLAUNCH(1, 32, 0, 0, wmma_int8<T, LB>)(A.data(), B.data(), C.data(), K, row ? 16 : K);
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            long long r = 7;  // B[k][j]: row-major B is K x 16, column-major B holds column j at B[j * K]
            for (int k = 0; k < K; k++) r += (long long)A[i * K + k] * (row ? B[k * 16 + j] : B[j * K + k]);
            bad += C[i * 16 + j] != r;
        }
    return bad;
}

static void test_int8() {
    CHECK((run_int8<signed char, wmma::row_major>(-128, 127)) == 0, "s8 x s8 -> s32, B row-major: products not exact");
    CHECK((run_int8<signed char, wmma::col_major>(-128, 127)) == 0, "s8 x s8 -> s32, B col-major: products not exact");
    CHECK((run_int8<unsigned char, wmma::row_major>(200, 255)) == 0, "u8 x u8 -> s32: products not exact");
}

// ---- tiles staged through shared memory by all threads of the block ----------------------------
__global__ void wmma_from_smem(const float* A, const float* B, float* C) {
    __shared__ __half As[16 * 16];
    __shared__ __nv_bfloat16 Bs_unused[8];
    __shared__ __half Bs[16 * 16];
    const int t = threadIdx.x + threadIdx.y * blockDim.x;  // 64 threads, 4 elements each
    for (int e = t; e < 256; e += blockDim.x * blockDim.y) {
        As[e] = __float2half(A[e]);
        Bs[e] = __float2half(B[e]);
    }
    (void)Bs_unused;
    __syncthreads();
    if (threadIdx.y == 1) {  // only the second warp computes
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        wmma::load_matrix_sync(a, As, 16);
        wmma::load_matrix_sync(b, Bs, 16);
        wmma::mma_sync(acc, a, b, acc);
        wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);
    }
}

static void test_smem_staging() {
    std::vector<float> A(256), B(256), C(256, -1.0f);
    for (auto& v : A) v = __half2float(__float2half(frand()));  // values exact in half
    for (auto& v : B) v = __half2float(__float2half(frand()));
    KLAUNCH(1, dim3(32, 2), 0, 0, wmma_from_smem)(A.data(), B.data(), C.data());
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double r = 0, mag = 0;
            for (int k = 0; k < 16; k++) r += (double)A[i * 16 + k] * B[j * 16 + k], mag += fabs(A[i * 16 + k] * B[j * 16 + k]);
            bad += fabs(C[i * 16 + j] - r) > 1e-5 * mag + 1e-6;
        }
    CHECK(bad == 0 && cudaGetLastError() == cudaSuccess, "%d wrong", bad);
}

// ---- tf32 m16n16k8 ------------------------------------------------------------------------------
__global__ void wmma_tf32(const float* A, const float* B, float* C) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(a, A, 8);
    wmma::load_matrix_sync(b, B, 16);
    wmma::mma_sync(acc, a, b, acc);
    wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);
}

static void test_tf32() {
    std::vector<float> A(16 * 8), B(8 * 16), C(256);
    for (int i = 0; i < 128; i++) A[i] = (float)((i * 7) % 33 - 16) / 8.0f, B[i] = (float)((i * 5) % 29 - 14) / 4.0f;
    A[0] = 1.0f + ldexpf(1.0f, -12);  // not representable in tf32 (10 mantissa bits): rounds to 1
    KLAUNCH(1, 32, 0, 0, wmma_tf32)(A.data(), B.data(), C.data());
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double r = 0;
            for (int k = 0; k < 8; k++) r += (i == 0 && k == 0 ? 1.0 : (double)A[i * 8 + k]) * B[k * 16 + j];
            bad += C[i * 16 + j] != (float)r;  // small multiples of 1/32: exact in fp32
        }
    CHECK(bad == 0, "%d wrong", bad);
    CHECK(wmma::__float_to_tf32(1.0f + 3 * ldexpf(1.0f, -12)) == 1.0f + ldexpf(1.0f, -10), "tf32 rounds to nearest");
    CHECK(wmma::__float_to_tf32(1.0f + ldexpf(1.0f, -11)) == 1.0f + ldexpf(1.0f, -10), "tf32 ties away from zero");
}

// ---- fragments are warp collectives: a lane that skips mma_sync deadlocks the warp ---------------
__global__ void wmma_divergent(float* C) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 1.0f);
    if (threadIdx.x != 5) wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);
    else __syncthreads();
}

static void test_divergent() {
    beagle_emu::set_quiet(true);
    std::vector<float> C(256);
    KLAUNCH(1, 32, 0, 0, wmma_divergent)(C.data());
    const std::string d = beagle_emu::last_error_detail();
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure && d.find("deadlock") != std::string::npos &&
              d.find("store_matrix_sync") != std::string::npos,
          "message: %s", d.c_str());
    beagle_emu::set_quiet(false);
}

int main() {
    beagle_emu::set_check_pointers(false);  // these kernels run on host vectors (legal in the emulator only)
    test_gemms();
    test_half_accumulator();
    test_int8();
    test_smem_staging();
    test_tf32();
    test_divergent();
    return test_summary("test_emu_wmma");
}
