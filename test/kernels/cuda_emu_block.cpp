// cuda_emu_block.cpp -> build/test/test_emu_block: block-level features of the CUDA emulator
// (cuda/emu/): static and dynamic shared memory with __syncthreads at block sizes 1..1024 (odd
// ones included), __syncthreads_count/and/or, 3D built-in variables, threads that exit before a
// barrier (PTX semantics: they do not hold it up), atomics across many concurrent blocks, the
// last-block pattern with __threadfence, __constant__ memory, and the speed of a tiled GEMM.
// Every result is checked against a plain C++ reference computed here (double accumulation).
#include "testlib.h"

#include <chrono>
#include <set>
#include <thread>
#include <vector>

static uint32_t g_rng = 12345;
static float frand() {  // uniform in [-1, 1)
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

// ---- block sum through static shared memory ----------------------------------------------------
__global__ void block_sum_static(const float* x, float* out, int n) {
    __shared__ float buf[1024];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + tid;
    buf[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    int size = blockDim.x;
    while (size > 1) {  // fold the upper half (rounded up) onto the lower half; works for odd sizes
        const int half = (size + 1) / 2;
        if (tid < size / 2) buf[tid] += buf[tid + half];
        __syncthreads();
        size = half;
    }
    if (tid == 0) out[blockIdx.x] = buf[0];
}

static void test_block_sum() {
    for (int block : {1, 2, 32, 33, 64, 100, 255, 256, 777, 1000, 1024}) {
        const int n = block * 5 + 3, blocks = (n + block - 1) / block;
        std::vector<float> x(n), out(blocks, -1.0f);
        for (auto& v : x) v = frand();
        KLAUNCH(blocks, block, 0, 0, block_sum_static)(x.data(), out.data(), n);
        CHECK(cudaGetLastError() == cudaSuccess, "block %d", block);
        for (int b = 0; b < blocks; b++) {
            double ref = 0, mag = 0;
            for (int i = b * block; i < n && i < (b + 1) * block; i++) ref += x[i], mag += fabs(x[i]);
            // fp32 tree sum of <= 1024 terms: error <= log2(1024) * 2^-24 * sum|x|, bound 1e-6 * sum|x|.
            CHECK(fabs(out[b] - ref) <= 1e-6 * mag + 1e-7, "block %d, block index %d: got %.9g want %.9g", block, b, out[b], ref);
        }
    }
}

// ---- dynamic shared memory: reverse each block's slice, two views of one buffer -----------------
__global__ void reverse_dyn(const float* x, float* y, int* idx_out, int n) {
    DYN_SMEM(float, vals);                      // blockDim.x floats
    int* idx = reinterpret_cast<int*>(vals + blockDim.x);  // then blockDim.x ints
    const int tid = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + tid;
    vals[tid] = i < n ? x[i] : 0.0f;
    idx[tid] = i;
    __syncthreads();
    const int r = blockDim.x - 1 - tid;
    if (i < n) {
        y[i] = vals[r];
        idx_out[i] = idx[r];
    }
}

static void test_dynamic_smem() {
    for (int block : {1, 31, 100, 256, 1024}) {
        const int blocks = 3, n = blocks * block;
        std::vector<float> x(n), y(n, 0.0f);
        std::vector<int> idx(n, -1);
        for (int i = 0; i < n; i++) x[i] = (float)i;
        KLAUNCH(blocks, block, block * (sizeof(float) + sizeof(int)), 0, reverse_dyn)(x.data(), y.data(), idx.data(), n);
        CHECK(cudaGetLastError() == cudaSuccess, "block %d", block);
        int bad = 0;
        for (int i = 0; i < n; i++) {
            const int b = i / block, t = i % block, src = b * block + (block - 1 - t);
            bad += y[i] != (float)src || idx[i] != src;
        }
        CHECK(bad == 0, "block %d: %d wrong elements", block, bad);
    }
}

// ---- __syncthreads_count / _and / _or ------------------------------------------------------------
__global__ void barrier_votes(int* out, int modulus) {
    const int tid = threadIdx.x + threadIdx.y * blockDim.x;
    const int pred = tid % modulus == 0;
    const int c = __syncthreads_count(pred);
    const int a = __syncthreads_and(pred);
    const int o = __syncthreads_or(pred);
    const int all_true = __syncthreads_and(1);
    const int none = __syncthreads_or(0);
    int* slot = out + 5 * (blockIdx.x * blockDim.x * blockDim.y + tid);
    slot[0] = c, slot[1] = a, slot[2] = o, slot[3] = all_true, slot[4] = none;
}

static void test_barrier_votes() {
    for (int modulus : {1, 3, 2000}) {
        const dim3 block(20, 5);  // 100 threads, a partial last warp
        const int nt = 100, blocks = 2;
        std::vector<int> out(5 * nt * blocks, -7);
        KLAUNCH(blocks, block, 0, 0, barrier_votes)(out.data(), modulus);
        const int count = (nt + modulus - 1) / modulus;  // tids 0, m, 2m, ... below 100
        int bad = 0;
        for (int t = 0; t < nt * blocks; t++) {
            const int* s = &out[5 * t];
            bad += s[0] != count || s[1] != (count == nt) || s[2] != (count > 0) || s[3] != 1 || s[4] != 0;
        }
        CHECK(bad == 0, "modulus %d: %d threads saw wrong barrier votes", modulus, bad);
    }
}

// ---- built-in variables in 3D -------------------------------------------------------------------
__global__ void write_ids(int* out) {
    const int bl = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int tl = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int* o = out + 12 * (bl * blockDim.x * blockDim.y * blockDim.z + tl);
    o[0] = threadIdx.x, o[1] = threadIdx.y, o[2] = threadIdx.z;
    o[3] = blockIdx.x, o[4] = blockIdx.y, o[5] = blockIdx.z;
    o[6] = blockDim.x, o[7] = blockDim.y, o[8] = blockDim.z;
    o[9] = gridDim.x, o[10] = gridDim.y, o[11] = gridDim.z;
}

static void test_builtin_ids() {
    const dim3 grid(3, 2, 2), block(5, 3, 2);
    const int nb = 12, nt = 30;
    std::vector<int> out(12 * nb * nt, -1);
    KLAUNCH(grid, block, 0, 0, write_ids)(out.data());
    int bad = 0;
    for (int bz = 0; bz < 2; bz++)
        for (int by = 0; by < 2; by++)
            for (int bx = 0; bx < 3; bx++)
                for (int tz = 0; tz < 2; tz++)
                    for (int ty = 0; ty < 3; ty++)
                        for (int tx = 0; tx < 5; tx++) {
                            const int bl = bx + 3 * (by + 2 * bz), tl = tx + 5 * (ty + 3 * tz);
                            const int* o = &out[12 * (bl * nt + tl)];
                            const int want[12] = {tx, ty, tz, bx, by, bz, 5, 3, 2, 3, 2, 2};
                            for (int k = 0; k < 12; k++) bad += o[k] != want[k];
                        }
    CHECK(bad == 0, "%d wrong built-in values", bad);
}

// ---- threads that exit before a barrier do not hold it up (PTX: exited threads count as arrived) --
__global__ void early_exit_then_barrier(const float* x, float* out, int active) {
    __shared__ float buf[256];
    const int tid = threadIdx.x;
    if (tid >= active) return;
    buf[tid] = x[tid];
    __syncthreads();
    float s = 0;
    for (int k = 0; k < active; k++) s += buf[k];
    __syncthreads();
    out[tid] = s;
}

static void test_early_exit() {
    for (int active : {1, 17, 64, 200}) {
        std::vector<float> x(256), out(256, -1.0f);
        float ref = 0;
        for (int i = 0; i < 256; i++) x[i] = (float)(i % 7), ref += i < active ? x[i] : 0;
        KLAUNCH(1, 256, 0, 0, early_exit_then_barrier)(x.data(), out.data(), active);
        CHECK(cudaGetLastError() == cudaSuccess, "active %d", active);
        int bad = 0;
        for (int i = 0; i < 256; i++) bad += i < active ? out[i] != ref : out[i] != -1.0f;
        CHECK(bad == 0, "active %d: %d wrong", active, bad);
    }
}

// ---- a __device__ helper with a barrier inside, called in a loop ----------------------------------
__device__ float sum_shared(float* buf, float v) {
    buf[threadIdx.x] = v;
    __syncthreads();
    float s = 0;
    for (int k = 0; k < (int)blockDim.x; k++) s += buf[k];
    __syncthreads();  // before anyone overwrites buf in the next call
    return s;
}
__global__ void prefix_rounds(float* out, int rounds) {
    __shared__ float buf[128];
    float v = (float)threadIdx.x;
    for (int r = 0; r < rounds; r++) v = sum_shared(buf, v) / blockDim.x;
    out[threadIdx.x] = v;
}

static void test_helper_barrier() {
    std::vector<float> out(96, -1.0f);
    KLAUNCH(1, 96, 0, 0, prefix_rounds)(out.data(), 5);
    // round 1: every thread gets the mean of 0..95 = 47.5; later rounds keep it.
    int bad = 0;
    for (float v : out) bad += v != 47.5f;
    CHECK(bad == 0 && cudaGetLastError() == cudaSuccess, "%d wrong", bad);
}

// ---- atomics across many blocks (blocks run concurrently on several OS threads) -------------------
__global__ void atomics_kernel(int* icount, unsigned* ucount, unsigned long long* ull, float* fsum, double* dsum,
                               int* imax, int* imin, unsigned* umax_, unsigned* wrap, float* product, int* exch_sum,
                               int* exch_slot, __half* hsum) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(icount, 1);
    atomicAdd(ucount, 2u);
    atomicAdd(ull, (unsigned long long)i);
    atomicAdd(fsum, 1.0f);
    atomicAdd(dsum, 0.5);
    atomicMax(imax, (i * 7919) % 100003);
    atomicMin(imin, (i * 7919) % 100003 - 50000);
    atomicMax(umax_, (unsigned)((i * 31) % 1000));
    atomicInc(wrap, 9u);
    if (i < 64) {  // 64 doublings through a CAS loop: exactly 2^64 whatever the order
        float* p = product;
        int old_bits = __float_as_int(*p), assumed;
        do {
            assumed = old_bits;
            old_bits = atomicCAS((int*)p, assumed, __float_as_int(__int_as_float(assumed) * 2.0f));
        } while (assumed != old_bits);
    }
    // atomicExch: the values that come back plus the one left behind are exactly the values put in.
    const int prev = atomicExch(exch_slot, i + 1);
    atomicAdd(exch_sum, prev);
    atomicAdd(hsum, __float2half(1.0f));
}

static void test_atomics() {
    const int blocks = 300, block = 128, n = blocks * block;
    int icount = 0, imax = -1, imin = 1 << 30, exch_sum = 0, exch_slot = 0;
    unsigned ucount = 0, wrap = 0;
    unsigned long long ull = 0;
    float fsum = 0, product = 1.0f;
    unsigned umax_ = 0;
    double dsum = 0;
    __half hsum = __float2half(0.0f);
    KLAUNCH(blocks, block, 0, 0, atomics_kernel)(&icount, &ucount, &ull, &fsum, &dsum, &imax, &imin, &umax_, &wrap,
                                                 &product, &exch_sum, &exch_slot, &hsum);
    CHECK(cudaGetLastError() == cudaSuccess, "atomics launch");
    int ref_max = -1, ref_min = 1 << 30;
    unsigned ref_umax = 0;
    for (int i = 0; i < n; i++) {
        ref_max = std::max(ref_max, (i * 7919) % 100003);
        ref_min = std::min(ref_min, (i * 7919) % 100003 - 50000);
        ref_umax = std::max(ref_umax, (unsigned)((i * 31) % 1000));
    }
    CHECK(icount == n, "icount %d", icount);
    CHECK(ucount == 2u * n, "ucount %u", ucount);
    CHECK(ull == (unsigned long long)n * (n - 1) / 2, "ull %llu", ull);
    CHECK(fsum == (float)n, "fsum %f (integers below 2^24 add exactly)", fsum);
    CHECK(dsum == 0.5 * n, "dsum %f", dsum);
    CHECK(imax == ref_max && imin == ref_min, "max %d/%d min %d/%d", imax, ref_max, imin, ref_min);
    CHECK(umax_ == ref_umax, "umax %u/%u", umax_, ref_umax);
    CHECK(wrap == (unsigned)(n % 10), "atomicInc wraps at limit+1: %u", wrap);
    CHECK(product == ldexpf(1.0f, 64), "CAS-loop product %g", product);
    CHECK((long long)exch_sum + exch_slot == (long long)n * (n + 1) / 2, "exch %d + %d", exch_sum, exch_slot);
    // __half accumulates exactly up to 2048, then rounds: check it reached the saturation point.
    CHECK(__half2float(hsum) == 2048.0f, "half sum %f", __half2float(hsum));
}

// ---- last-block pattern: partial sums, __threadfence, atomicInc ticket ------------------------------
__global__ void sum_last_block(const float* x, float* partial, unsigned* ticket, float* total, int n) {
    __shared__ float buf[256];
    __shared__ bool am_last;
    const int tid = threadIdx.x;
    float s = 0;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) s += x[i];
    buf[tid] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) buf[tid] += buf[tid + stride];
        __syncthreads();
    }
    if (tid == 0) {
        partial[blockIdx.x] = buf[0];
        __threadfence();
        am_last = atomicInc(ticket, gridDim.x) == gridDim.x - 1;
    }
    __syncthreads();
    if (am_last && tid == 0) {
        float t = 0;
        for (unsigned b = 0; b < gridDim.x; b++) t += partial[b];
        *total = t;
        *ticket = 0;
    }
}

static void test_last_block() {
    const int n = 100000, blocks = 37;
    std::vector<float> x(n), partial(blocks);
    double ref = 0, mag = 0;
    for (auto& v : x) v = frand(), ref += v, mag += fabs(v);
    unsigned ticket = 0;
    float total = 0;
    KLAUNCH(blocks, 256, 0, 0, sum_last_block)(x.data(), partial.data(), &ticket, &total, n);
    CHECK(fabs(total - ref) <= 1e-5 * mag, "last-block sum: got %.9g want %.9g", total, ref);
    CHECK(ticket == 0, "ticket %u", ticket);
}

// ---- __constant__ memory through cudaMemcpyToSymbol ----------------------------------------------
__constant__ float c_coef[4];
__global__ void poly(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = ((c_coef[3] * x[i] + c_coef[2]) * x[i] + c_coef[1]) * x[i] + c_coef[0];
}

static void test_constant() {
    const float coef[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    CHECK(cudaMemcpyToSymbol(c_coef, coef, sizeof coef) == cudaSuccess, "cudaMemcpyToSymbol");
    const int n = 1000;
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = frand();
    KLAUNCH((n + 127) / 128, 128, 0, 0, poly)(x.data(), y.data(), n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const double r = ((3.0 * x[i] + 0.5) * x[i] - 2.0) * x[i] + 1.0;
        bad += fabs(y[i] - r) > 1e-5;
    }
    CHECK(bad == 0, "%d wrong", bad);
}

// ---- speed: GEMM 128^3 with 16x16 thread blocks and shared-memory tiles ------------------------
template <int TILE>
__global__ void gemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = row < M && k0 + (int)threadIdx.x < K ? A[row * K + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = col < N && k0 + (int)threadIdx.y < K ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

static void test_gemm_speed() {
    for (int size : {128, 77}) {
        const int M = size, N = size, K = size;
        std::vector<float> A(M * K), B(K * N), C(M * N, 0.0f);
        for (auto& v : A) v = frand();
        for (auto& v : B) v = frand();
        const dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
        KLAUNCH(grid, block, 0, 0, gemm_tiled<16>)(A.data(), B.data(), C.data(), M, N, K);  // warm-up
        const auto t0 = std::chrono::steady_clock::now();
        KLAUNCH(grid, block, 0, 0, gemm_tiled<16>)(A.data(), B.data(), C.data(), M, N, K);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        int bad = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double r = 0, mag = 0;
                for (int k = 0; k < K; k++) r += (double)A[i * K + k] * B[k * N + j], mag += fabs(A[i * K + k] * B[k * N + j]);
                bad += fabs(C[i * N + j] - r) > 1e-5 * mag + 1e-6;  // fp32 dot of <= 128 terms
            }
        CHECK(bad == 0, "gemm %d: %d wrong", size, bad);
        printf("gemm %dx%dx%d, 16x16 blocks, %d barriers per thread: %.1f ms\n", M, N, K, 2 * ((K + 15) / 16), ms);
        // Design target: tens of ms on 2 cores. The bound leaves room for a loaded CI machine.
        if (size == 128) CHECK(ms < 1000.0, "gemm 128^3 took %.0f ms", ms);
    }
}

// ---- launches from several host threads: serialized, each thread keeps its own last error -------
static void test_host_threads() {
    std::vector<std::thread> threads;
    std::vector<int> ok(6, 0);
    for (int k = 0; k < 6; k++)
        threads.emplace_back([k, &ok] {
            const int n = 300 + 37 * k, block = 64;
            std::vector<float> x(n, 1.0f), out((n + block - 1) / block, 0.0f);
            KLAUNCH((n + block - 1) / block, block, 0, 0, block_sum_static)(x.data(), out.data(), n);
            float total = 0;
            for (float v : out) total += v;
            if (k == 0) KLAUNCH(1, 2048, 0, 0, block_sum_static)(x.data(), out.data(), n);  // error in thread 0 only
            const cudaError_t e = cudaGetLastError();
            ok[k] = total == (float)n && e == (k == 0 ? cudaErrorInvalidConfiguration : cudaSuccess);
        });
    for (auto& t : threads) t.join();  // their fiber stacks are released at thread exit
    int good = 0;
    for (int v : ok) good += v;
    CHECK(good == 6, "%d of 6 host threads got the right sums and their own last error", good);
}

int main() {
    beagle_emu::set_check_pointers(false);  // these kernels run on host vectors (legal in the emulator only)
    test_host_threads();
    test_block_sum();
    test_dynamic_smem();
    test_barrier_votes();
    test_builtin_ids();
    test_early_exit();
    test_helper_barrier();
    test_atomics();
    test_last_block();
    test_constant();
    test_gemm_speed();
    return test_summary("test_emu_block");
}
