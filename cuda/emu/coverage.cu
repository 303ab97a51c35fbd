// coverage.cu: one kernel that touches every device feature the emulator provides (shuffles with
// widths, votes, match/reduce, barriers with predicates, dynamic shared memory, atomics, math and
// half/bf16 intrinsics, wmma for every shape). It keeps the two sides of cuda/compat.cuh honest:
// test/cli/test_cuda_nvcc.sh compiles it with nvcc for sm_80 and sm_90, and test/kernels/cuda_emu_coverage.cpp
// runs it under the emulator and checks every slot of its output against host arithmetic.
#include "../compat.cuh"

// out[slot] for each checked value; 64 threads (two warps), one block.
enum CoverageSlot {
    kCovShfl, kCovShflW, kCovUp, kCovDown, kCovXor, kCovShflD, kCovShflH, kCovShflB, kCovShflLL,
    kCovBallot, kCovAny, kCovAll, kCovUni, kCovActive, kCovMatchAny, kCovMatchAll, kCovMatchPred,
    kCovRedAdd, kCovRedMin, kCovRedMax, kCovRedAnd, kCovRedOr, kCovRedXor,
    kCovCount, kCovAnd, kCovOr, kCovDyn, kCovStatic, kCovShflH2,
    kCovAtomicI, kCovAtomicU, kCovAtomicULL, kCovAtomicF, kCovAtomicD, kCovAtomicH, kCovAtomicB, kCovAtomicMax,
    kCovAtomicMin, kCovAtomicCAS, kCovAtomicExch, kCovAtomicInc, kCovAtomicBits,
    kCovMath, kCovHalf, kCovBf16, kCovBits, kCovWmmaH, kCovWmmaB, kCovWmma32x8, kCovWmma8x32,
    kCovSlots
};

struct CoverageAtomics {
    int i;
    unsigned u;
    unsigned long long ull;
    float f;
    double d;
    __half h;
    __nv_bfloat16 b;
    int imax, imin, cas, exch;
    unsigned inc, bits;
    long long llmax;
};

template <class T, int M, int N, int K, class TIn>
__device__ float wmma_corner(const TIn* a_src, const TIn* b_src) {
    // D = A * B with A = all a_src[0], B = all b_src[0]: every element is K * a * b.
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, M, N, K, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, M, N, K, T, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, M, N, K, float> c;
    wmma::fill_fragment(a, a_src[0]);
    wmma::fill_fragment(b, b_src[0]);
    wmma::fill_fragment(c, 0.0f);
    wmma::mma_sync(c, a, b, c);
    float s = 0.0f;
    for (int i = 0; i < c.num_elements; i++) s += c.x[i];
    return s / c.num_elements;  // any lane layout: the mean over the lane's elements is K * a * b
}

__global__ void coverage_kernel(float* out, CoverageAtomics* at, const __half* hin, const __nv_bfloat16* bin,
                                const float* fin) {
    DYN_SMEM(float, dyn);
    static __shared__ float stat[64];
    const int t = threadIdx.x, lane = t % 32;
    const unsigned full = 0xffffffffu;
    dyn[t] = (float)t;
    stat[t] = 2.0f * t;
    const int c = __syncthreads_count(t % 4 == 0);
    const int a = __syncthreads_and(t < 64);
    const int o = __syncthreads_or(t == 63);
    const float from_dyn = dyn[63 - t];
    const float from_static = stat[63 - t];

    const float f = (float)t;
    const float s0 = __shfl_sync(full, f, 5);
    const float s1 = __shfl_sync(full, f, 3, 8);
    const float su = __shfl_up_sync(full, f, 1);
    const float sd = __shfl_down_sync(full, f, 2, 16);
    const float sx = __shfl_xor_sync(full, f, 4);
    const double dd = __shfl_sync(full, (double)t * 0.5, 1);
    const __half hh = __shfl_xor_sync(full, __float2half(f), 1);
    const __nv_bfloat16 bb = __shfl_down_sync(full, __float2bfloat16(f), 1, 32);
    const long long ll = __shfl_up_sync(full, (long long)t << 33, 1, 4);
    const __half2 h2 = __shfl_xor_sync(full, __floats2half2_rn(f, 2.0f * f), 1);
    const unsigned ballot = __ballot_sync(full, lane & 1);
    const int any = __any_sync(full, lane == 7);
    const int all = __all_sync(full, lane < 32);
    const int uni = __uni_sync(full, 1);
    const unsigned active = __activemask();
    __syncwarp();
    __syncwarp(full);
    const unsigned many = __match_any_sync(full, lane / 8);
    int pred = 0;
    const unsigned mall = __match_all_sync(full, 42, &pred);
    const int radd = __reduce_add_sync(full, lane);
    const unsigned rmin = __reduce_min_sync(full, (unsigned)lane + 1u);
    const int rmax = __reduce_max_sync(full, -lane);
    const unsigned rand_ = __reduce_and_sync(full, 0xF0u | (unsigned)lane);
    const unsigned ror = __reduce_or_sync(full, 1u << (lane % 4));
    const unsigned rxor = __reduce_xor_sync(full, 1u);

    atomicAdd(&at->i, 1);
    atomicAdd(&at->u, 2u);
    atomicAdd(&at->ull, 3ull);
    atomicAdd(&at->f, 0.5f);
    atomicAdd(&at->d, 0.25);
    atomicAdd(&at->h, __float2half(1.0f));
    atomicAdd(&at->b, __float2bfloat16(1.0f));
    atomicMax(&at->imax, t);
    atomicMin(&at->imin, -t);
    atomicMax(&at->llmax, (long long)t << 40);
    atomicCAS(&at->cas, 0, t + 1);  // exactly one thread wins
    atomicExch(&at->exch, 7);
    atomicInc(&at->inc, 1000u);
    atomicOr(&at->bits, 1u << (t % 32));
    atomicAnd(&at->bits, 0xFFFFFFFFu);
    atomicXor(&at->bits, 0u);
    atomicSub(&at->u, 1u);

    const float math = rsqrtf(4.0f) + __expf(0.0f) + __fdividef(1.0f, 4.0f) + fmaxf(-1.0f, 0.5f) + __saturatef(2.0f) +
                       __logf(1.0f) + sqrtf(9.0f) + tanhf(0.0f) + fminf(3.0f, (float)min(2, 7)) + (float)max(1u, 0u) +
                       __ldg(fin) + __frcp_rn(2.0f) + __fsqrt_rn(16.0f) + __fmaf_rn(2.0f, 3.0f, 1.0f) +
                       __powf(2.0f, 3.0f);
    float sn, cs;
    __sincosf(0.0f, &sn, &cs);
    const float half = __half2float(__hadd(hin[0], hin[1])) + __half2float(hexp(__float2half(0.0f))) +
                       __half2float(__hfma(hin[0], hin[1], hin[0])) + __low2float(__floats2half2_rn(0.25f, 8.0f));
    const float bf16 = __bfloat162float(__hmul(bin[0], bin[1])) + __bfloat162float(hsqrt(__float2bfloat16(4.0f)));
    const float bits = (float)(__popc(0xF0F0u) + __clz(1) + __ffs(8) + (__brev(1u) >> 31) + __float_as_int(0.0f) +
                               (int)__int_as_float(0) + __float2int_rn(2.5f));

    const float w16 = wmma_corner<__half, 16, 16, 16>(hin, hin);
    const float wb = wmma_corner<__nv_bfloat16, 16, 16, 16>(bin, bin);
    const float w32 = wmma_corner<__half, 32, 8, 16>(hin, hin);
    const float w8 = wmma_corner<__half, 8, 32, 16>(hin, hin);
    {  // tf32: A = fin[1..128] as 16 x 8, B = the same values as 8 x 16, D stored per warp
        using namespace nvcuda;
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> ta;
        wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> tb;
        wmma::fragment<wmma::accumulator, 16, 16, 8, float> tc;
        wmma::load_matrix_sync(ta, fin + 1, 8);
        wmma::load_matrix_sync(tb, fin + 1, 16);
        for (int i = 0; i < ta.num_elements; i++) ta.x[i] = wmma::__float_to_tf32(ta.x[i]);
        wmma::fill_fragment(tc, 0.0f);
        wmma::mma_sync(tc, ta, tb, tc);
        wmma::store_matrix_sync(out + kCovSlots + 256 * (t / 32), tc, 16, wmma::mem_row_major);
    }

    if (t == 33) {  // lane 1 of warp 1
        const float v[] = {s0, s1, su, sd, sx, (float)dd, __half2float(hh), __bfloat162float(bb), (float)(ll >> 33),
                           (float)ballot, (float)any, (float)all, (float)uni, (float)active, (float)many, (float)mall,
                           (float)pred, (float)radd, (float)rmin, (float)rmax, (float)rand_, (float)ror, (float)rxor,
                           (float)c, (float)a, (float)o, from_dyn, from_static,
                           __low2float(h2) + __high2float(h2)};
        for (int k = 0; k < (int)(sizeof v / sizeof v[0]); k++) out[k] = v[k];
        out[kCovMath] = math + sn + cs;
        out[kCovHalf] = half;
        out[kCovBf16] = bf16;
        out[kCovBits] = bits;
        out[kCovWmmaH] = w16;
        out[kCovWmmaB] = wb;
        out[kCovWmma32x8] = w32;
        out[kCovWmma8x32] = w8;
    }
}

// Host launcher: out needs kCovSlots + 512 floats, fin 129 floats; 64 floats of dynamic shared memory.
inline void coverage_launch(float* out, CoverageAtomics* at, const __half* hin, const __nv_bfloat16* bin,
                            const float* fin, cudaStream_t stream) {
    cudaFuncSetAttribute(coverage_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    KLAUNCH(1, 64, 64 * sizeof(float), stream, coverage_kernel)(out, at, hin, bin, fin);
}
