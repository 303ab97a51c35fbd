// cuda_emu_debug.cpp -> build/test/test_emu_debug: the emulator's bug-finding features.
//  - deadlocks (lanes at a warp collective while others wait at __syncthreads) and divergent
//    __syncthreads fail THE LAUNCH with cudaErrorLaunchFailure and a message naming kernel, block
//    and the file:line where each group of threads waits; the next launches work again;
//    __trap() and C++ exceptions in a kernel fail the launch the same way;
//    BEAGLE_EMU_ABORT mode aborts the process; a fiber stack overflow and a launch from inside a
//    kernel crash with a message saying so (all three checked in forked children);
//  - schedules: forward / reverse / random thread order between barriers (observed directly);
//  - NaN poisoning of static and dynamic shared memory at block start;
//  - the planted bugs of cuda/sample_reduce.cu: the correct kernel is right under every schedule x
//    poison combination; without its publish barrier it is WRONG under reverse and random order;
//    without its bound check it reads never-written shared memory, which poisoning turns into NaN.
#include "testlib.h"

#include "../cuda/sample_reduce.cu"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <stdexcept>
#include <vector>

using beagle_emu::Schedule;

static bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

// ---- deadlock: in block 1, lanes 0-15 of warp 0 wait at __syncthreads, lanes 16-31 at a shuffle ----
__global__ void deadlock_kernel(int* out) {
    int v = threadIdx.x;
    if (blockIdx.x == 1 && threadIdx.x < 16) {
        __syncthreads();
    } else if (threadIdx.x < 32) {
        v = __shfl_xor_sync(0xffffffff, v, 1);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void divergent_kernel(int* out) {
    if (threadIdx.x < 40) {
        out[threadIdx.x] = 1;
        __syncthreads();
    } else {
        __syncthreads();
        out[threadIdx.x] = 2;
    }
}

__global__ void trap_kernel(int* out) {
    if (blockIdx.x == 2 && threadIdx.x == 7) __trap();
    out[threadIdx.x] = 1;
}

__global__ void throw_kernel(int* out) {
    if (threadIdx.x == 3) throw std::runtime_error("boom");
    out[threadIdx.x] = 1;
}

// A template kernel launched from a template: the message gives the instantiation too.
template <int N>
__global__ void divergent_template(int* out) {
    if ((int)threadIdx.x < N) __syncthreads();
    out[threadIdx.x] = N;
    __syncthreads();
}
template <int N>
static void launch_divergent_template(int* out) {
    KLAUNCH(2, 32, 0, 0, divergent_template<N>)(out);
}

__global__ void ok_kernel(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 5; }

static void test_failures() {
    beagle_emu::set_quiet(true);
    std::vector<int> out(4 * 64);
    KLAUNCH(3, 64, 0, 0, deadlock_kernel)(out.data());
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure, "deadlock fails the launch");
    std::string d = beagle_emu::last_error_detail();
    CHECK(contains(d, "kernel 'deadlock_kernel' block (1,0,0)") && contains(d, "deadlock"), "message: %s", d.c_str());
    CHECK(contains(d, "threads 0-15 wait at __syncthreads() (test/kernels/cuda_emu_debug.cpp:") &&
              contains(d, "threads 16-31 (warp 0) wait at __shfl_xor_sync() (test/kernels/cuda_emu_debug.cpp:") &&
              contains(d, "threads 32-63 exited"),
          "message: %s", d.c_str());
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure, "synchronize reports the failed launch");

    KLAUNCH(1, 64, 0, 0, divergent_kernel)(out.data());
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure, "divergent barrier fails the launch");
    d = beagle_emu::last_error_detail();
    CHECK(contains(d, "divergent barrier") && contains(d, "threads 0-39 at __syncthreads()") &&
              contains(d, "threads 40-63 at __syncthreads()") && contains(d, "'divergent_kernel' block (0,0,0)"),
          "message: %s", d.c_str());

    launch_divergent_template<3>(out.data());
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure, "divergent barrier in a template kernel");
    d = beagle_emu::last_error_detail();
    CHECK(contains(d, "kernel 'divergent_template<N>' = divergent_template<3> block (0,0,0)") &&
              contains(d, "threads 0-2 at __syncthreads()") && contains(d, "threads 3-31 at __syncthreads()"),
          "message: %s", d.c_str());

    KLAUNCH(4, 32, 0, 0, trap_kernel)(out.data());
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure, "__trap fails the launch");
    d = beagle_emu::last_error_detail();
    CHECK(contains(d, "'trap_kernel' block (2,0,0)") && contains(d, "thread 7: kernel called __trap()"), "message: %s", d.c_str());

    KLAUNCH(1, 32, 0, 0, throw_kernel)(out.data());
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure, "an exception fails the launch");
    d = beagle_emu::last_error_detail();
    CHECK(contains(d, "thread 3 threw an exception: boom"), "message: %s", d.c_str());

    // After failures (with abandoned fibers), launches run normally again.
    std::fill(out.begin(), out.end(), 0);
    KLAUNCH(4, 64, 0, 0, ok_kernel)(out.data());
    int bad = 0;
    for (int v : out) bad += v != 5;
    CHECK(cudaGetLastError() == cudaSuccess && bad == 0, "launch after failures: %d wrong", bad);
    cudaDeviceSynchronize();
    beagle_emu::set_quiet(false);
}

// In abort mode a failed launch kills the process (for gdb); run it in a child.
static void test_abort_mode() {
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        beagle_emu::set_abort_on_error(true);
        const int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 2);  // keep the expected message out of the log
        std::vector<int> out(3 * 64);
        KLAUNCH(3, 64, 0, 0, deadlock_kernel)(out.data());
        _exit(0);  // not reached
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "child status %d", status);
}

// ---- crashes that cannot be turned into launch errors: checked in a forked child ---------------
__device__ float deep_recursion(int n) {
    volatile float local[1024];  // 4 KiB per frame: overflows the 256 KiB fiber stack quickly
    local[n % 1024] = (float)n;
    return n == 0 ? local[0] : deep_recursion(n - 1) + local[n % 1024];
}
__global__ void overflow_kernel(float* out) { out[threadIdx.x] = deep_recursion(100000); }
__global__ void nested_launch_kernel(int* out) {
    if (threadIdx.x == 0) KLAUNCH(1, 32, 0, 0, ok_kernel)(out);
}

// Runs body() in a child with stderr captured; returns the child's wait status and its stderr.
template <class F>
static int run_child(F body, std::string* err) {
    fflush(stdout);
    fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) return -1;
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        body();
        _exit(0);
    }
    close(fds[1]);
    char buf[4096];
    ssize_t k;
    while ((k = read(fds[0], buf, sizeof buf)) > 0) err->append(buf, (size_t)k);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void test_crashes() {
    std::string err;
    int status = run_child([] {
        std::vector<float> out(32);
        KLAUNCH(1, 32, 0, 0, overflow_kernel)(out.data());
    }, &err);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV && contains(err, "overflowed its fiber stack") &&
              contains(err, "BEAGLE_EMU_STACK_KB"),
          "stack overflow: status %d, stderr: %s", status, err.c_str());
    err.clear();
    status = run_child([] {
        std::vector<int> out(64);
        KLAUNCH(1, 32, 0, 0, nested_launch_kernel)(out.data());
    }, &err);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && contains(err, "dynamic parallelism is not emulated"),
          "nested launch: status %d, stderr: %s", status, err.c_str());
}

// ---- schedules: the order in which threads reach the first statement ---------------------------
__global__ void record_order(int* order, int* counter) {
    order[threadIdx.x] = atomicAdd(counter, 1);
    __syncthreads();
    order[blockDim.x + threadIdx.x] = atomicAdd(counter + 1, 1);  // order after a barrier
}

static std::vector<int> run_order(Schedule s, uint64_t seed, int n) {
    beagle_emu::set_schedule(s, seed);
    std::vector<int> order(2 * n, -1);
    int counter[2] = {0, 0};
    KLAUNCH(1, n, 0, 0, record_order)(order.data(), counter);
    beagle_emu::set_schedule(Schedule::Forward);
    return order;
}

static void test_schedules() {
    const int n = 100;
    std::vector<int> f = run_order(Schedule::Forward, 1, n), r = run_order(Schedule::Reverse, 1, n);
    std::vector<int> a = run_order(Schedule::Random, 1, n), a2 = run_order(Schedule::Random, 1, n);
    std::vector<int> b = run_order(Schedule::Random, 2, n);
    int fbad = 0, rbad = 0;
    for (int t = 0; t < n; t++) {
        fbad += f[t] != t || f[n + t] != t;
        rbad += r[t] != n - 1 - t || r[n + t] != n - 1 - t;
    }
    CHECK(fbad == 0, "forward order: %d threads out of order", fbad);
    CHECK(rbad == 0, "reverse order: %d threads out of order", rbad);
    std::set<int> seen(a.begin(), a.begin() + n);
    CHECK((int)seen.size() == n && *seen.begin() == 0 && *seen.rbegin() == n - 1, "random order is a permutation");
    int in_place = 0;
    for (int t = 0; t < n; t++) in_place += a[t] == t;
    CHECK(in_place < n / 4, "random order is not the forward order (%d in place)", in_place);
    CHECK(a == a2, "same seed, same order");
    CHECK(a != b, "other seed, other order");
    bool reshuffled = false;
    for (int t = 0; t < n; t++) reshuffled |= a[t] != a[n + t];
    CHECK(reshuffled, "a new order after each barrier");
}

// ---- NaN poisoning of static and dynamic shared memory -------------------------------------------
__global__ void read_uninitialized(float* out_static, float* out_dyn, int* out_int) {
    __shared__ float s[64];
    __shared__ int si[8];
    DYN_SMEM(float, d);
    const int t = threadIdx.x;
    out_static[t] = s[t];  // read before any write in this block
    out_dyn[t] = d[t];
    if (t < 8) out_int[t] = si[t];
    __syncthreads();
    s[t] = 1.0f;  // leave defined values behind for the next block
    d[t] = 2.0f;
    if (t < 8) si[t] = 3;
}

static void test_poison() {
    std::vector<float> st(64), dy(64);
    std::vector<int> in(8);
    KLAUNCH(1, 64, 64 * sizeof(float), 0, read_uninitialized)(st.data(), dy.data(), in.data());  // leaves 1, 2, 3
    beagle_emu::set_poison(true);
    for (Schedule s : {Schedule::Forward, Schedule::Reverse, Schedule::Random}) {
        beagle_emu::set_schedule(s, 3);
        KLAUNCH(1, 64, 64 * sizeof(float), 0, read_uninitialized)(st.data(), dy.data(), in.data());
        int nan_s = 0, nan_d = 0, ones = 0;
        for (int t = 0; t < 64; t++) nan_s += std::isnan(st[t]), nan_d += std::isnan(dy[t]);
        for (int t = 0; t < 8; t++) ones += in[t] == -1;  // 0xFF bytes
        CHECK(nan_s == 64 && nan_d == 64 && ones == 8, "schedule %d: NaN static %d, dynamic %d, int -1 %d", (int)s,
              nan_s, nan_d, ones);
    }
    beagle_emu::set_poison(false);
    beagle_emu::set_schedule(Schedule::Forward);
    KLAUNCH(1, 64, 64 * sizeof(float), 0, read_uninitialized)(st.data(), dy.data(), in.data());
    CHECK(st[5] == 1.0f && dy[5] == 2.0f && in[5] == 3, "without poisoning the previous block's values remain");
}

// ---- the planted bugs of sample_reduce.cu ---------------------------------------------------------
struct Rows {
    int rows, n;
    std::vector<float> x, y, sum;
    std::vector<double> ref_sum;
    Rows(int rows_, int n_) : rows(rows_), n(n_), x(rows_ * n_), y(rows_ * n_), sum(rows_), ref_sum(rows_) {
        uint32_t g = 99;
        for (auto& v : x) {
            g = g * 1664525u + 1013904223u;
            v = (float)((g >> 9) % 2000) / 1000.0f - 0.3f;  // mean ~0.7: a wrong total shows
        }
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < n; i++) ref_sum[r] += x[r * n + i];
    }
    // Number of wrong outputs (row sums and centred values; NaN counts as wrong).
    int wrong() const {
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            double mag = 0;
            for (int i = 0; i < n; i++) mag += fabs(x[r * n + i]);
            bad += !(fabs(sum[r] - ref_sum[r]) <= 1e-5 * mag);  // fp32 sums of <= 1000 terms
            const double mean = ref_sum[r] / n;
            for (int i = 0; i < n; i++) bad += !(fabs(y[r * n + i] - (x[r * n + i] - mean)) <= 1e-5 * (1 + fabs(mean)));
        }
        return bad;
    }
};

template <bool kPublishBarrier, bool kBoundCheck>
static int run_sample(Schedule s, bool poison, int block, uint64_t seed = 1) {
    beagle_emu::set_schedule(s, seed);
    beagle_emu::set_poison(poison);
    Rows d(24, 1000);
    center_rows<kPublishBarrier, kBoundCheck>(d.x.data(), d.y.data(), d.sum.data(), d.rows, d.n, block, 0);
    beagle_emu::set_schedule(Schedule::Forward);
    beagle_emu::set_poison(false);
    return cudaGetLastError() == cudaSuccess ? d.wrong() : -1;
}

static const char* sched_name(Schedule s) {
    return s == Schedule::Forward ? "forward" : s == Schedule::Reverse ? "reverse" : "random";
}

static void test_planted_bugs() {
    const Schedule all[] = {Schedule::Forward, Schedule::Reverse, Schedule::Random};
    for (int block : {32, 100, 256, 1024})
        for (Schedule s : all)
            for (bool poison : {false, true}) {
                const int bad = run_sample<true, true>(s, poison, block);
                CHECK(bad == 0, "correct kernel, block %d, %s, poison %d: %d wrong", block, sched_name(s), poison, bad);
            }
    // Missing publish barrier: threads read `total` before thread 0 writes it. The forward order
    // happens to run thread 0 first and hides the bug; reverse and random order expose it.
    for (int block : {32, 100, 256, 1024}) {
        const int fwd = run_sample<false, true>(Schedule::Forward, false, block);
        const int rev = run_sample<false, true>(Schedule::Reverse, false, block);
        const int rnd = run_sample<false, true>(Schedule::Random, false, block, 5);
        const int rev_poison = run_sample<false, true>(Schedule::Reverse, true, block);
        printf("missing barrier, block %4d: wrong outputs forward %d, reverse %d, random %d, reverse+poison %d\n", block,
               fwd, rev, rnd, rev_poison);
        CHECK(rev > 0 && rnd > 0 && rev_poison > 0, "the missing barrier is caught at block %d", block);
    }
    // Missing bound check (non-power-of-two blocks): the tree reads partial[tid + stride] past
    // blockDim.x, which nobody wrote. Poisoned shared memory turns that into NaN under every order.
    for (int block : {100, 1000})
        for (Schedule s : all) {
            const int bad = run_sample<true, false>(s, true, block);
            CHECK(bad > 0, "the missing bound check is caught with poisoning, block %d, %s", block, sched_name(s));
        }
}

int main() {
    beagle_emu::set_check_pointers(false);  // these kernels run on host vectors (legal in the emulator only)
    test_failures();
    test_abort_mode();
    test_crashes();
    test_schedules();
    test_poison();
    test_planted_bugs();
    return test_summary("test_emu_debug");
}
