// cuda_emu_warp.cpp -> build/test/test_emu_warp: warp-level collectives of the CUDA emulator.
// Shuffles (idx/up/down/xor, widths 1..32, partial last warps, 32- and 64-bit and __half values)
// are checked against the rules of the CUDA Programming Guide, re-implemented here independently of
// the emulator (which follows the PTX shfl.sync pseudo-code); ballot/any/all/activemask with
// exited lanes; `if (warp == 0) warp_reduce()` block reductions at sizes 32..1024 and 100;
// __syncwarp ordering under every schedule; disjoint partial masks; match/reduce; and errors.
#include "testlib.h"

#include <vector>

// ---- reference: which lane a shuffle reads (CUDA Programming Guide, "Warp Shuffle Functions") ----
enum Mode { kIdx, kUp, kDown, kXor };
static const char* mode_name[] = {"shfl", "shfl_up", "shfl_down", "shfl_xor"};
// Returns the source lane, or the lane itself when the guide says "returns its own value".
static int ref_source(Mode m, int lane, int arg, int width) {
    const int seg = lane / width * width;  // first lane of the lane's width-sized group
    switch (m) {
    case kIdx: return seg + ((arg % width) + width) % width;
    case kUp: return lane - arg >= seg ? lane - arg : lane;
    case kDown: return lane + arg < seg + width ? lane + arg : lane;
    case kXor: {
        const int j = lane ^ arg;
        return j < seg + width ? j : lane;  // earlier groups are reachable, later ones are not
    }
    }
    return lane;
}

__global__ void shuffle_kernel(int mode, int arg, int width, const float* in, float* out, double* out64,
                               __half* out16) {
    const int t = threadIdx.x;
    const float v = in[t];
    const double d = 1000.0 + t;
    const __half h = __float2half((float)t);
    float r;
    double r64;
    __half r16;
    switch (mode) {
    case kIdx: r = __shfl_sync(0xffffffff, v, arg, width); r64 = __shfl_sync(0xffffffff, d, arg, width); r16 = __shfl_sync(0xffffffff, h, arg, width); break;
    case kUp: r = __shfl_up_sync(0xffffffff, v, arg, width); r64 = __shfl_up_sync(0xffffffff, d, arg, width); r16 = __shfl_up_sync(0xffffffff, h, arg, width); break;
    case kDown: r = __shfl_down_sync(0xffffffff, v, arg, width); r64 = __shfl_down_sync(0xffffffff, d, arg, width); r16 = __shfl_down_sync(0xffffffff, h, arg, width); break;
    default: r = __shfl_xor_sync(0xffffffff, v, arg, width); r64 = __shfl_xor_sync(0xffffffff, d, arg, width); r16 = __shfl_xor_sync(0xffffffff, h, arg, width); break;
    }
    out[t] = r;
    out64[t] = r64;
    out16[t] = r16;
}

static void test_shuffles(bool poison) {
    beagle_emu::set_poison(poison);
    int bad = 0, checked = 0, undefined_ok = 0, undefined = 0;
    for (int block : {32, 64, 100, 50}) {  // 100 and 50: the last warp has 4 / 18 lanes
        std::vector<float> in(block), out(block);
        std::vector<double> out64(block);
        std::vector<__half> out16(block);
        for (int t = 0; t < block; t++) in[t] = 0.5f + t;
        for (int mode = 0; mode < 4; mode++)
            for (int width : {1, 2, 4, 8, 16, 32})
                for (int arg : {0, 1, 2, 3, 5, 7, 8, 13, 16, 31, -1, -9}) {
                    if (mode != kIdx && mode != kXor && arg < 0) continue;  // delta is unsigned
                    KLAUNCH(1, block, 0, 0, shuffle_kernel)(mode, arg, width, in.data(), out.data(), out64.data(),
                                                            out16.data());
                    if (mode == kXor && arg < 0) continue;  // lane masks are 5-bit in PTX; skip negative ones
                    for (int t = 0; t < block; t++) {
                        const int lane = t % 32, warp_base = t - lane;
                        const int lanes_in_warp = std::min(32, block - warp_base);
                        const int src = ref_source((Mode)mode, lane, arg, width);
                        if (src >= lanes_in_warp) {  // reads a lane past the end of a partial warp: undefined
                            undefined++;
                            uint32_t bits;
                            memcpy(&bits, &out[t], 4);
                            // The emulator returns 0xFF bytes (NaN) with poisoning, else the caller's value.
                            undefined_ok += poison ? bits == 0xFFFFFFFFu : out[t] == in[t];
                            continue;
                        }
                        checked++;
                        const int s = warp_base + src;
                        const bool ok = out[t] == in[s] && out64[t] == 1000.0 + s && __half2float(out16[t]) == (float)s;
                        if (!ok && bad++ < 10)
                            fprintf(stderr, "%s block %d width %d arg %d thread %d: got %g want %g\n", mode_name[mode],
                                    block, width, arg, t, out[t], in[s]);
                    }
                }
    }
    printf("poison %d: %d shuffle results checked against the guide's rules, %d undefined reads\n", poison, checked,
           undefined);
    CHECK(bad == 0, "poison %d: %d of %d shuffle results wrong", poison, bad, checked);
    CHECK(undefined > 0 && undefined_ok == undefined, "poison %d: %d of %d undefined reads as documented", poison,
          undefined_ok, undefined);
    beagle_emu::set_poison(false);
}

// ---- two half-warps shuffling with disjoint masks at the same time ------------------------------
__global__ void half_warp_masks(int* out) {
    const int lane = threadIdx.x;
    int v = lane * 10;
    if (lane < 16) v = __shfl_down_sync(0x0000ffffu, v, 1, 16);
    else v = __shfl_up_sync(0xffff0000u, v, 2, 16);
    out[lane] = v;
}

static void test_partial_masks() {
    std::vector<int> out(32);
    KLAUNCH(1, 32, 0, 0, half_warp_masks)(out.data());
    int bad = 0;
    for (int l = 0; l < 32; l++) {
        const int want = l < 16 ? (l < 15 ? (l + 1) * 10 : l * 10) : (l - 16 >= 2 ? (l - 2) * 10 : l * 10);
        bad += out[l] != want;
    }
    CHECK(bad == 0, "%d wrong", bad);
}

// ---- votes with exited lanes and partial warps -----------------------------------------------------
__global__ void votes_kernel(unsigned* ballot, int* any_exited_only, int* all_live, int* all_even, unsigned* active,
                             int* uni) {
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    if (lane % 3 == 0) return;  // these lanes exit before the votes
    const unsigned b = __ballot_sync(0xffffffff, lane % 2);
    const int a = __any_sync(0xffffffff, lane % 3 == 0);  // true only on lanes that exited
    const int l = __all_sync(0xffffffff, 1);
    const int e = __all_sync(0xffffffff, lane % 2 == 0);
    const unsigned m = __activemask();
    const int u = __uni_sync(0xffffffff, warp);
    if (lane == 1) ballot[warp] = b, any_exited_only[warp] = a, all_live[warp] = l, all_even[warp] = e, active[warp] = m, uni[warp] = u;
}

static void test_votes() {
    for (int block : {32, 64, 72}) {  // 72: the last warp has lanes 0..7
        const int warps = (block + 31) / 32;
        std::vector<unsigned> ballot(warps), active(warps);
        std::vector<int> any(warps, -1), all_live(warps), all_even(warps), uni(warps);
        KLAUNCH(1, block, 0, 0, votes_kernel)(ballot.data(), any.data(), all_live.data(), all_even.data(),
                                              active.data(), uni.data());
        for (int w = 0; w < warps; w++) {
            const int lanes = std::min(32, block - 32 * w);
            unsigned want_ballot = 0, want_active = 0;
            for (int l = 0; l < lanes; l++)
                if (l % 3 != 0) {
                    want_active |= 1u << l;
                    if (l % 2) want_ballot |= 1u << l;
                }
            CHECK(ballot[w] == want_ballot, "block %d warp %d ballot %08x want %08x", block, w, ballot[w], want_ballot);
            CHECK(any[w] == 0, "block %d warp %d: __any_sync saw an exited lane's predicate", block, w);
            CHECK(all_live[w] == 1, "block %d warp %d: __all_sync(1) over live lanes", block, w);
            CHECK(all_even[w] == 0, "block %d warp %d: __all_sync(even)", block, w);
            CHECK(active[w] == want_active, "block %d warp %d activemask %08x want %08x", block, w, active[w], want_active);
            CHECK(uni[w] == 1, "block %d warp %d __uni_sync", block, w);
        }
    }
}

// ---- block reduction: warp shuffles, smem partials, then `if (warp == 0) warp_reduce()` -----------
__device__ float warp_reduce(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}
__global__ void block_reduce_warps(const float* x, float* out, int n) {
    __shared__ float warp_sums[32];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int nwarps = (blockDim.x + 31) / 32;
    float v = 0;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) v += x[i];
    // A partial last warp must not add lanes that do not exist: reduce with a shrinking mask instead.
    const int lanes = min(32, (int)blockDim.x - warp * 32);
    if (lanes == 32) v = warp_reduce(v);
    else {
        const unsigned mask = (1u << lanes) - 1;
        for (int offset = 16; offset > 0; offset /= 2) {
            const float o = __shfl_down_sync(mask, v, offset);
            if (lane + offset < lanes) v += o;
        }
    }
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < nwarps ? warp_sums[lane] : 0.0f;
        s = warp_reduce(s);
        if (lane == 0) out[blockIdx.x] = s;
    }
}

static void test_warp0_reduce() {
    for (int block : {32, 64, 100, 256, 1000, 1024}) {
        const int blocks = 5, n = 12345;
        std::vector<float> x(n), out(blocks, -1.0f);
        double mag = 0;
        for (int i = 0; i < n; i++) x[i] = (float)((i * 37) % 101) / 17.0f - 2.0f, mag += fabs(x[i]);
        KLAUNCH(blocks, block, 0, 0, block_reduce_warps)(x.data(), out.data(), n);
        CHECK(cudaGetLastError() == cudaSuccess, "block %d launch", block);
        for (int b = 0; b < blocks; b++) {
            double ref = 0;
            for (int i = b * block; i < n; i += block * blocks)
                for (int t = 0; t < block && i + t < n; t++) ref += x[i + t];
            CHECK(fabs(out[b] - ref) <= 1e-6 * mag, "block %d index %d: got %.9g want %.9g", block, b, out[b], ref);
        }
    }
}

// ---- __syncwarp orders shared-memory traffic inside a warp ----------------------------------------
__global__ void rotate_in_warp(int* out) {
    __shared__ int buf[256];
    const int t = threadIdx.x, lane = t % 32, base = t - lane;
    buf[t] = t * 3;
    __syncwarp();
    const int v = buf[base + (lane + 1) % 32];
    __syncwarp();
    buf[t] = v + 1;
    __syncwarp();
    out[t] = buf[base + (lane + 31) % 32];
}

static void test_syncwarp() {
    for (auto mode : {beagle_emu::Schedule::Forward, beagle_emu::Schedule::Reverse, beagle_emu::Schedule::Random}) {
        beagle_emu::set_schedule(mode, 7);
        std::vector<int> out(256, -1);
        KLAUNCH(1, 256, 0, 0, rotate_in_warp)(out.data());
        int bad = 0;
        for (int t = 0; t < 256; t++) bad += out[t] != t * 3 + 1;  // rotate left then right: back home
        CHECK(bad == 0, "schedule %d: %d wrong", (int)mode, bad);
    }
    beagle_emu::set_schedule(beagle_emu::Schedule::Forward);
}

// ---- match and reduce ------------------------------------------------------------------------------
__global__ void match_reduce(unsigned* any_mask, unsigned* all_mask, int* all_pred, int* radd, unsigned* rmin,
                             int* rmax, unsigned* ror) {
    const int lane = threadIdx.x;
    const int key = lane % 5;
    any_mask[lane] = __match_any_sync(0xffffffff, key);
    int pred = -1;
    all_mask[lane] = __match_all_sync(0xffffffff, lane < 40 ? 7 : lane, &pred);
    all_pred[lane] = pred;
    radd[lane] = __reduce_add_sync(0xffffffff, lane - 10);
    rmin[lane] = __reduce_min_sync(0xffffffff, (unsigned)(lane + 3));
    rmax[lane] = __reduce_max_sync(0xffffffff, -lane);
    ror[lane] = __reduce_or_sync(0xffffffff, 1u << (lane % 8));
}

static void test_match_reduce() {
    std::vector<unsigned> any(32), all(32), rmin(32), ror(32);
    std::vector<int> pred(32), radd(32), rmax(32);
    KLAUNCH(1, 32, 0, 0, match_reduce)(any.data(), all.data(), pred.data(), radd.data(), rmin.data(), rmax.data(),
                                       ror.data());
    int bad = 0;
    for (int l = 0; l < 32; l++) {
        unsigned want = 0;
        for (int q = 0; q < 32; q++)
            if (q % 5 == l % 5) want |= 1u << q;
        bad += any[l] != want || all[l] != 0xffffffffu || pred[l] != 1;
        bad += radd[l] != 496 - 320 || rmin[l] != 3u || rmax[l] != 0 || ror[l] != 0xFFu;
    }
    CHECK(bad == 0, "%d wrong", bad);
}

// ---- other warps are not held up by a warp collective ----------------------------------------------
__global__ void warp_then_block(int* out) {
    const int t = threadIdx.x, warp = t / 32;
    int v = t;
    if (warp == 1) v = __shfl_xor_sync(0xffffffff, v, 1);
    __syncthreads();
    if (warp == 2) v = __shfl_sync(0xffffffff, v, 0);
    out[t] = v;
}

static void test_warp_independence() {
    std::vector<int> out(96);
    KLAUNCH(1, 96, 0, 0, warp_then_block)(out.data());
    int bad = 0;
    for (int t = 0; t < 96; t++) bad += out[t] != (t < 32 ? t : t < 64 ? (t ^ 1) : 64);
    CHECK(bad == 0 && cudaGetLastError() == cudaSuccess, "%d wrong", bad);
}

// ---- errors: lane not in its own mask, bad width --------------------------------------------------
__global__ void lane_not_in_mask(int* out) { out[threadIdx.x] = __shfl_sync(0x1u, (int)threadIdx.x, 0); }
__global__ void bad_width(int* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffff, (int)threadIdx.x, 1, 12); }

static void test_errors() {
    beagle_emu::set_quiet(true);
    std::vector<int> out(32);
    KLAUNCH(1, 32, 0, 0, lane_not_in_mask)(out.data());
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure, "lane outside its mask fails the launch");
    std::string d = beagle_emu::last_error_detail();
    CHECK(d.find("lane_not_in_mask") != std::string::npos && d.find("does not contain the calling lane 1") != std::string::npos,
          "message: %s", d.c_str());
    KLAUNCH(1, 32, 0, 0, bad_width)(out.data());
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure, "width 12");
    d = beagle_emu::last_error_detail();
    CHECK(d.find("not a power of two") != std::string::npos, "message: %s", d.c_str());
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure, "the next synchronize reports the launch failure");
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "once");
    beagle_emu::set_quiet(false);
}

int main() {
    beagle_emu::set_check_pointers(false);  // these kernels run on host vectors (legal in the emulator only)
    test_shuffles(false);
    test_shuffles(true);
    test_partial_masks();
    test_votes();
    test_warp0_reduce();
    test_syncwarp();
    test_match_reduce();
    test_warp_independence();
    test_errors();
    return test_summary("test_emu_warp");
}
