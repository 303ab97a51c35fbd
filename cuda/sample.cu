// sample.cu: rows of logits -> sampling distributions (temperature, top-k, top-p) and one draw from each,
// so a sampled draft chain and its verification stay on the device. Launched (launch_warp_rows,
// at the end) by the CUDA backend (src/backend/gpu/ops_cuda.cu: CudaOps::warp_rows); tested by
// test/kernels/cuda_emu_kernels_sample.cpp against a double-precision sort and against the host's warp_dense.
//
// warp_rows_kernel: per row r of x (rows x n_cols logits, row-major), p (rows x n_cols, the output, not x):
//   1. v_i = x_i / temperature (temperature > 0, a float division as the host's); m = max_i v_i;
//      e_i = expf(v_i - m) (NaN -> 0: a NaN logit gets p = 0); S = sum_i e_i; p_i = e_i / S.
//   2. tau_k: if 0 < top_k < n_cols, the largest float tau with #{i : p_i >= tau} >= top_k (the top_k-th
//      largest p); else 0. M_k = sum of the p_i >= tau_k.
//   3. tau: if 0 < top_p < 1, the largest float tau >= tau_k with sum_{p_i >= tau} p_i > top_p * M_k (none:
//      tau = tau_k); else tau_k.
//   4. K = {i : p_i >= tau}, Z = sum_K p_i; p[r][i] = p_i / Z in K, 0 elsewhere.
//   5. coins (with ids; both null or neither): u = coins[r] in [0, 1); ids[r] = the first column c (column
//      order) whose running sum p[r][0] + ... + p[r][c] exceeds u; if none (rounding), the last column
//      with p[r][c] > 0.
//   A row without a number (every logit NaN or -inf, or a +inf logit or x / temperature overflowing: S = 0)
//   gets p = 0 and id 0 (as topk_kernel's argmax of such a row).
// This is the host's warp_dense (src/decode/sampling.cpp, karpathy's run.c: sort, top-k renormalised,
// cumulative top-p walk) except (a) exact ties at a cut: every entry equal to the threshold is kept (run.c
// keeps the lower ids first), (b) the float summation order, and (c) the draw walks the columns in id
// order, not by decreasing p (same distribution, another column for the same coin). run.c's pre-filter
// (1 - top_p) / (n - 1) only saves its sort work: nothing below it can be in the nucleus. Speculative
// sampling stays lossless whatever these differences: the engine accepts with the p rows written here.
//
// Grid: one block per row (launch_warp_rows: 1024 threads for rows of 8,192+ columns, 256 below; any
// multiple of 32 works). Passes over the row, each thread on its strided columns c = tid + j blockDim
// (coalesced; a thread rewrites only its own columns, so the in-place passes need no barrier):
//   max of v (x read), e_i into p (x read), p_i = e_i / S in place, then the thresholds by bisection over
//   the float's bit pattern (p_i >= 0, so the bits are ordered as the values): each round is one read of
//   the thread's p's and ONE block reduction of (mass, count) of the p_i >= mid. The top-k bisection
//   stops as soon as exactly top_k entries are >= lo (that set is {p >= tau_k}; top_k = 1 starts there:
//   tau_k = p_max = 1 / S), the top-p one as soon as [lo, hi) holds one entry; at most ~30 rounds each (the
//   bits of p_max), 13-26 in all on the test's tie-free 49,152-column rows.
//   Z is the mass of the last kept set (no extra pass); the last pass writes p_i / Z or 0.
//   The draw: each thread owns a contiguous chunk of cdiv(n, blockDim) columns (48 of SmolLM2's 49,152 at
//   1024 threads): chunk sums, a warp shuffle scan and a scan of the warp totals give each chunk's offset
//   o_t; the running sum of column c in chunk t is o_t + (the chunk's own prefix up to c), monotone inside
//   a chunk, so the first chunk with o_t + sum_t > u (warp ballots) walks its chunk for the column.
// Why it is fast enough: no sort, no atomics, no shared memory beyond a few warp partials; the row
// (196 KB at 49,152 columns) is re-read from L1/L2 once per round by 1024 threads with 4 loads in flight
// each, and DRAM sees little more than x read and p written once (the byte model: docs/gpu-kernels.md;
// rows run in parallel on their own SMs).
// Deterministic: every sum has one order for a given block size (common.cuh's reductions, fixed
// per-thread orders; the launcher fixes the block size by n_cols), so the same bits every run.
// Run-tested under the emulator (block sizes 32..1024, reverse / random schedules with poisoned shared
// memory); no PTX paths.
#include "kernels.cuh"

constexpr int WARP_ROWS_UNROLL = 4;

// Block sums of a float and an int in one pass of barriers (common.cuh's block_sum, two values).
__device__ __forceinline__ void block_sum_fi(float& v, int& n, float* red, int* ired) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
        n += __shfl_xor_sync(0xffffffffu, n, o);
    }
    __syncthreads();  // red / ired may still be read by a previous call
    if (lane == 0) {
        red[warp] = v;
        ired[warp] = n;
    }
    __syncthreads();
    if (warp == 0) {
        float w = lane < nw ? red[lane] : 0.0f;
        int m = lane < nw ? ired[lane] : 0;
        for (int o = 16; o > 0; o >>= 1) {
            w += __shfl_xor_sync(0xffffffffu, w, o);
            m += __shfl_xor_sync(0xffffffffu, m, o);
        }
        if (lane == 0) {
            red[32] = w;
            ired[32] = m;
        }
    }
    __syncthreads();
    v = red[32];
    n = ired[32];
}

// The mass and the count of the row's p_i >= t (t >= 0), one order for every t: each thread adds its
// strided columns in column order, then block_sum_fi. The same set of entries gives the same bits.
__device__ __forceinline__ void mass_count_ge(const float* pr, int n_cols, float t, float& mass, int& count, float* red,
                                              int* ired) {
    float s = 0.0f;
    int k = 0;
    for (int c0 = threadIdx.x; c0 < n_cols; c0 += WARP_ROWS_UNROLL * blockDim.x) {
        float v[WARP_ROWS_UNROLL];
        UNROLL for (int u = 0; u < WARP_ROWS_UNROLL; u++) {
            const int c = c0 + u * blockDim.x;
            v[u] = c < n_cols ? pr[c] : -1.0f;  // past the row: below every t
        }
        UNROLL for (int u = 0; u < WARP_ROWS_UNROLL; u++) {
            if (v[u] >= t) {
                s += v[u];
                k++;
            }
        }
    }
    mass = s;
    count = k;
    block_sum_fi(mass, count, red, ired);
}

// The lowest (first = true) or highest thread of the block with pred, or -1; every thread must call it.
// bal: shared scratch of 32 words.
__device__ __forceinline__ int block_find(bool pred, bool first, unsigned* bal) {
    const unsigned b = __ballot_sync(0xffffffffu, pred);
    __syncthreads();  // bal may still be read by a previous call
    if (threadIdx.x % 32 == 0) bal[threadIdx.x / 32] = b;
    __syncthreads();
    const int nw = blockDim.x / 32;
    for (int i = 0; i < nw; i++) {
        const int w = first ? i : nw - 1 - i;
        if (bal[w]) return 32 * w + (first ? __ffs((int)bal[w]) - 1 : 31 - __clz((int)bal[w]));
    }
    return -1;
}

__global__ void warp_rows_kernel(float* p, int* ids, const float* coins, const float* x, int n_cols, float temperature,
                                 int top_k, float top_p) {
    __shared__ float red[33];
    __shared__ int ired[33];
    __shared__ float wsum[32];
    __shared__ unsigned bal[32];
    const long long row = blockIdx.x;
    const float* xr = x + row * n_cols;
    float* pr = p + row * n_cols;
    const int tid = threadIdx.x, B = blockDim.x, lane = tid % 32, warp = tid / 32;

    // 1. softmax(x / temperature): max, e_i into p, p_i = e_i / S in place
    float mx = -INFINITY;
    for (int c = tid; c < n_cols; c += B) mx = fmaxf(mx, xr[c] / temperature);  // fmaxf skips NaN
    mx = block_max(mx, red);
    float s = 0.0f;
    for (int c = tid; c < n_cols; c += B) {
        float e = expf(xr[c] / temperature - mx);
        e = e == e ? e : 0.0f;  // a NaN logit (or no finite max: inf - inf) gets nothing
        pr[c] = e;
        s += e;
    }
    const float S = block_sum(s, red);
    if (!(S > 0.0f)) {  // a row without a number: p = 0, id 0
        for (int c = tid; c < n_cols; c += B) pr[c] = 0.0f;
        if (coins && tid == 0) ids[row] = 0;
        return;  // the whole block: S is the same in every thread
    }
    for (int c = tid; c < n_cols; c += B) pr[c] = pr[c] / S;

    // 2-3. thresholds by bisection over bit patterns: invariant (lo's set passes, hi's does not)
    unsigned lo = 0;  // p_i >= 0: every entry
    float mass_lo;
    int count_lo;
    mass_count_ge(pr, n_cols, 0.0f, mass_lo, count_lo, red, ired);
    const unsigned top = __float_as_uint(1.0f / S) + 1;  // above p_max = e_max / S = 1 / S: no entry
    if (top_k > 0 && top_k < n_cols) {
        unsigned hi = top;  // count(hi) = 0 < top_k
        if (top_k == 1) {   // tau_k = p_max = 1 / S (e = expf(0) = 1 at the max): one round
            lo = top - 1;
            mass_count_ge(pr, n_cols, __uint_as_float(lo), mass_lo, count_lo, red, ired);
        }
        while (hi - lo > 1 && count_lo != top_k) {  // count_lo == top_k: {p >= lo} = {p >= tau_k} already
            const unsigned mid = lo + (hi - lo) / 2;
            float m;
            int k;
            mass_count_ge(pr, n_cols, __uint_as_float(mid), m, k, red, ired);
            if (k >= top_k) {
                lo = mid;
                mass_lo = m;
                count_lo = k;
            } else {
                hi = mid;
            }
        }
    }
    if (top_p > 0.0f && top_p < 1.0f) {
        const float target = top_p * mass_lo;  // top_p * M_k
        if (mass_lo > target) {                // else no tau above tau_k passes: tau = tau_k
            unsigned hi = top;                 // mass(hi) = 0 <= target
            int count_hi = 0;
            while (hi - lo > 1 && count_lo - count_hi > 1) {  // one entry in [lo, hi): tau is it, K = {p >= lo}
                const unsigned mid = lo + (hi - lo) / 2;
                float m;
                int k;
                mass_count_ge(pr, n_cols, __uint_as_float(mid), m, k, red, ired);
                if (m > target) {
                    lo = mid;
                    mass_lo = m;
                    count_lo = k;
                } else {
                    hi = mid;
                    count_hi = k;
                }
            }
        }
    }

    // 4. renormalise over K = {p >= lo}: Z = mass_lo (the same sum over the same set)
    const float tau = __uint_as_float(lo), Z = mass_lo;
    for (int c = tid; c < n_cols; c += B) {
        const float v = pr[c];
        pr[c] = v >= tau ? v / Z : 0.0f;
    }
    if (!coins) return;

    // 5. the draw: contiguous chunks, their sums, offsets by a scan; the first chunk whose end exceeds u
    __syncthreads();  // the chunks read columns other threads wrote
    const int chunk = cdiv(n_cols, B);
    const int c_begin = min(n_cols, tid * chunk), c_end = min(n_cols, c_begin + chunk);
    float sum = 0.0f;
    int last_pos = -1;  // the chunk's last column with p > 0
    for (int c = c_begin; c < c_end; c++) {
        const float v = pr[c];
        sum += v;
        if (v > 0.0f) last_pos = c;
    }
    float incl = sum;  // inclusive scan inside the warp
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    float excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) excl = 0.0f;
    if (lane == 31) wsum[warp] = incl;
    __syncthreads();
    if (warp == 0) {  // inclusive scan of the warp totals
        float w = lane < B / 32 ? wsum[lane] : 0.0f;
        for (int o = 1; o < 32; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        if (lane < B / 32) wsum[lane] = w;
    }
    __syncthreads();
    const float offset = (warp > 0 ? wsum[warp - 1] : 0.0f) + excl;  // o_t: the chunks before this one
    const float u = coins[row];
    const int first = block_find(offset + sum > u, true, bal);
    if (first >= 0) {
        if (tid == first) {
            float run = 0.0f;
            for (int c = c_begin; c < c_end; c++) {
                run += pr[c];
                if (offset + run > u) {  // found: at c_end - 1 offset + run is offset + sum > u
                    ids[row] = c;
                    break;
                }
            }
        }
        return;
    }
    const int last = block_find(last_pos >= 0, false, bal);  // u past the rounded total: the last kept column
    if (tid == last) ids[row] = last_pos;
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_warp_rows(float* p, int* ids, const float* coins, const float* x, int rows, int n_cols, float temperature,
                      int top_k, float top_p, KernelRunner& kr) {
    kcheck(kr, temperature > 0.0f, "warp_rows: temperature %g must be > 0 (greedy is argmax: launch_topk)",
           temperature);
    kcheck(kr, (ids == nullptr) == (coins == nullptr), "warp_rows: ids and coins must be both null or both set");
    kcheck(kr, (const float*)p != x, "warp_rows: p must not alias x");
    // a vocabulary-wide row gets 1024 threads (48 columns each for SmolLM2's 49,152), as launch_topk
    if (rows > 0 && n_cols > 0)
        KRUN(kr, rows, n_cols >= 8192 ? 1024 : 256, 0, warp_rows_kernel, p, ids, coins, x, n_cols, temperature, top_k,
             top_p);
}
