// matmul.cpp: cpu_matmul (see matmul.h): checks, ISA choice, activation quantization into a reusable
// per-thread scratch buffer, the thread split over output rows, and the AVX2+FMA kernels.
// The AVX-512 kernels live in matmul_avx512.cpp and are only called after cpu_has_avx512_vnni().
//
// Batch invariance: the kernels compute a tile of R rows x C tokens (R, C <= 4) at a time so a
// weight row is loaded once per C tokens, but every (row, token) dot product has its own
// accumulator that goes through exactly the same instruction sequence whatever R, C, T or the thread
// split (written as explicit FMA intrinsics, so the compiler cannot contract differently), followed
// by the same horizontal sum. Tails (odd cols, odd block counts) are handled by zero padding inside the
// same loop, never by a separate scalar path.
#include "matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../core/common.h"
#include "cpu_ops.h"
#include "simd.h"

namespace beagle {

namespace {

constexpr int RT = 4;   // rows per tile
constexpr int CT = 2;   // tokens per tile (4 x 2 accumulators + operands fit the 16 ymm registers)
constexpr int KB = 32;  // blocks per chunk of precomputed scales (quantize.h pads nb_pad to a multiple)
static_assert(RT <= 4 && CT <= 4, "matmul_scratch_floats assumes tiles of at most 4 x 4");

// The one horizontal sum of the AVX2 path is simd.h's hsum8: (lo128 + hi128), then pairs, then the last two.

// Sums of 8 accumulators a[2q + l] with exactly hsum8's pairing (lanes i + i+4, then i + i+2, then
// i + i+1; float addition is commutative, so the bits are hsum8's), all at once. Result element 4l + q
// = sum of a[2q + l].
inline __m256 reduce8(const __m256* a) {
    __m256 c[4], g[2];
    for (int k = 0; k < 4; k++)  // 128-bit lane l = a(2k + l) lanes i + i+4
        c[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x31));
    for (int k = 0; k < 2; k++)  // lane l = [a(4k + l) x2, a(4k + 2 + l) x2], pairs i + i+2
        g[k] = _mm256_add_ps(_mm256_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // lane l = [a(l), a(2 + l), a(4 + l), a(6 + l)], pairs i + i+1
    return _mm256_add_ps(_mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// y[t0 + c, r0 + r] = sum of acc[r][c]: a full 4 x 2 tile through reduce8 (element 4c + r, so each
// 128-bit lane is 4 consecutive outputs of one token), anything else through hsum8 - the same bits.
template <int R, int C>
inline void store_sums(const MatmulJob& j, int64_t r0, int t0, __m256 (&acc)[R][C]) {
    if constexpr (R == 4 && C == 2) {
        __m256 a[8];
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 2; c++) a[2 * r + c] = acc[r][c];
        const __m256 s = reduce8(a);
        _mm_storeu_ps(j.y + (int64_t)t0 * j.rows + r0, _mm256_castps256_ps128(s));
        _mm_storeu_ps(j.y + (int64_t)(t0 + 1) * j.rows + r0, _mm256_extractf128_ps(s, 1));
    } else {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) j.y[(int64_t)(t0 + c) * j.rows + r0 + r] = hsum8(acc[r][c]);
    }
}

// ---------------------------------------------------------------------------------------------
// Float weights (F32, F16, BF16): acc[r][c] (8 lanes) += w[8 i..] * x[8 i..] over chunks of 8;
// the last partial chunk is zero padded (0 * 0 adds +0, which leaves any accumulator unchanged).

template <DType DT>
inline __m256 load8_w(const uint8_t* p) {
    if (DT == DType::F32) return _mm256_loadu_ps((const float*)p);
    __m128i h = _mm_loadu_si128((const __m128i*)p);
    if (DT == DType::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // BF16
}

template <DType DT>
inline __m256 load8_w_tail(const uint8_t* p, int rem) {
    if (DT == DType::F32) return _mm256_maskload_ps((const float*)p, tail_mask8(rem));
    alignas(32) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    memcpy(tmp, p, (size_t)rem * 2);
    return load8_w<DT>((const uint8_t*)tmp);
}

template <DType DT>
struct FloatKernel {
    static constexpr int ES = DT == DType::F32 ? 4 : 2;  // bytes per weight
    static void prepare(const MatmulJob&, int64_t, int, float*) {}

    template <int R, int C>
    static void tile(const MatmulJob& j, int64_t r0, int t0, float*) {
        const uint8_t* wr[R];
        const float* xc[C];
        for (int r = 0; r < R; r++) wr[r] = j.w + (uint64_t)(r0 + r) * j.row_bytes;
        for (int c = 0; c < C; c++) xc[c] = j.x + (int64_t)(t0 + c) * j.cols;
        __m256 acc[R][C];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
        const int64_t n8 = j.cols / 8 * 8;
        for (int64_t i = 0; i < n8; i += 8) {
            __m256 w[R];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                if (C == 1)  // decode streams the weights once: prefetch the rows two tiles ahead
                    _mm_prefetch((const char*)(wr[r] + 2 * RT * j.row_bytes + i * ES), _MM_HINT_T0);
                w[r] = load8_w<DT>(wr[r] + i * ES);
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                __m256 xv = _mm256_loadu_ps(xc[c] + i);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) acc[r][c] = _mm256_fmadd_ps(w[r], xv, acc[r][c]);
            }
        }
        const int rem = (int)(j.cols - n8);
        if (rem) {
            __m256 w[R];
            for (int r = 0; r < R; r++) w[r] = load8_w_tail<DT>(wr[r] + n8 * ES, rem);
            const __m256i m = tail_mask8(rem);
            for (int c = 0; c < C; c++) {
                __m256 xv = _mm256_maskload_ps(xc[c] + n8, m);
                for (int r = 0; r < R; r++) acc[r][c] = _mm256_fmadd_ps(w[r], xv, acc[r][c]);
            }
        }
        store_sums<R, C>(j, r0, t0, acc);
    }
};

// ---------------------------------------------------------------------------------------------
// Quantized weights. Per block b of 32: integer dot I = sum q_w * q_x as 8 int32 lanes, each the
// exact sum of 4 products, then acc (8 lanes) = fma(sc[b], float(I), acc) with sc[b] = d_w[b] * d_x[b]
// (one float product, computed 8 blocks at a time per chunk of KB blocks).
//  * int16 activations (BITS = 16, nibble order of quantize.h): weights widened to int16 (Q4 nibbles
//    zero-extended by dword shifts 0/4 and 8/12 + mask 0x000F000F; Q8_0 low/high bytes of each word
//    sign-extended by arithmetic shifts), I = madd(w01, x01) + madd(w23, x23). Bounds: a lane sums
//    4 products |q_w q_x| <= 128 * 32767 (Q8_0; Q4: 15 * 32767), so |I| <= 16,776,704 < 2^24: the int32
//    sums cannot overflow, and float(I) is exact.
//  * int8 activations (BITS = 8): I = madd(maddubs(|w| or nibbles, x with w's sign), 1), |I| <= 4 * 128 * 127.
// Q4_1 (x = d q + m) and Q4_0 (x = d (q - 8), i.e. m = -8 d) then add sum_b m[b] * s_x[b] into the same
// accumulator, 8 blocks per FMA over the zero-padded arrays m[] and s_x[]. Result = hsum8(acc) (or
// reduce8, the same bits).
//
// Scratch (floats, nbp = nb_pad): dbuf[RT][nbp] = d_w, mbuf[RT][nbp] = m_w (both filled by prepare()
// once per row tile, zero padded), then sc[R * C][KB] per chunk.

template <DType DT, int BITS>
struct QuantKernel {
    static constexpr int BS = DT == DType::Q8_0 ? 34 : DT == DType::Q4_0 ? 18 : 20;  // block bytes
    static constexpr int QOFF = DT == DType::Q4_1 ? 4 : 2;                          // offset of qs

    static void prepare(const MatmulJob& j, int64_t r0, int n, float* scratch) {
        const int64_t nb = j.acts.nb, nbp = j.acts.nb_pad;
        float* dbuf = scratch;
        float* mbuf = scratch + RT * nbp;
        const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i offs = _mm256_mullo_epi32(iota, _mm256_set1_epi32(BS));
        for (int r = 0; r < n; r++) {
            const uint8_t* row = j.w + (uint64_t)(r0 + r) * j.row_bytes;
            for (int64_t b = (nb + 7) / 8 * 8; b < nbp; b++) dbuf[r * nbp + b] = mbuf[r * nbp + b] = 0.0f;
            for (int64_t b = 0; b < nb; b += 8) {
                // the first 4 bytes of 8 blocks: d in the low half, m (Q4_1) or the first qs in the high half
                const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nb - b < 8 ? nb - b : 8)), iota);
                const __m256i g = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int*)(row + b * BS), offs,
                                                              live, 1);
                // words [d0..d3, m0..m3 | d4..d7, m4..m7] -> [d0..d7 | m0..m7]
                __m256i dm = _mm256_packus_epi32(_mm256_and_si256(g, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(g, 16));
                dm = _mm256_permute4x64_epi64(dm, _MM_SHUFFLE(3, 1, 2, 0));
                const __m256 d8 = _mm256_cvtph_ps(_mm256_castsi256_si128(dm));
                _mm256_store_ps(dbuf + r * nbp + b, d8);
                if (DT == DType::Q4_1) _mm256_store_ps(mbuf + r * nbp + b, _mm256_cvtph_ps(_mm256_extracti128_si256(dm, 1)));
                if (DT == DType::Q4_0) _mm256_store_ps(mbuf + r * nbp + b, _mm256_mul_ps(d8, _mm256_set1_ps(-8.0f)));
            }
        }
    }

    // acc[r][c] += sc * float(I) for block b, int16 activations xq16[c] (nibble order, quantize.h).
    template <int R, int C>
    static inline void block16(const uint8_t* const* wr, int64_t b, const int16_t* const* xq16, const float* scb,
                               __m256 (&acc)[R][C]) {
        const __m256i low4w = _mm256_set1_epi32(0x000F000F);                     // one nibble per word
        const __m256i shift01 = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);      // nibble groups 0, 1
        const __m256i shift23 = _mm256_setr_epi32(8, 8, 8, 8, 12, 12, 12, 12);  // nibble groups 2, 3
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m256i w01, w23;  // int16 weights of nibble-order groups (0, 1) and (2, 3)
            if (DT == DType::Q8_0) {
                const __m256i v = _mm256_loadu_si256((const __m256i*)(wr[r] + b * BS));
                w01 = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);  // low bytes: even elements
                w23 = _mm256_srai_epi16(v, 8);                        // high bytes: odd elements
            } else {
                const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(wr[r] + b * BS)));
                w01 = _mm256_and_si256(_mm256_srlv_epi32(raw, shift01), low4w);
                w23 = _mm256_and_si256(_mm256_srlv_epi32(raw, shift23), low4w);
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const __m256i* xv = (const __m256i*)(xq16[c] + b * 32);
                const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(w01, _mm256_load_si256(xv)),
                                                   _mm256_madd_epi16(w23, _mm256_load_si256(xv + 1)));
                acc[r][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(scb + (r * C + c) * KB), _mm256_cvtepi32_ps(p), acc[r][c]);
            }
        }
    }

    // The same with int8 activations xq[c] (natural order).
    template <int R, int C>
    static inline void block8(const uint8_t* const* wr, int64_t b, const int8_t* const* xq, const float* scb,
                              __m256 (&acc)[R][C]) {
        const __m256i ones16 = _mm256_set1_epi16(1);
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        const __m256i shift_hi = _mm256_setr_epi64x(0, 0, 4, 4);
        __m256i wq[R];  // Q4: unsigned nibbles; Q8_0: |q| (the sign goes onto x)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            if (DT == DType::Q8_0) {
                wq[r] = _mm256_abs_epi8(_mm256_loadu_si256((const __m256i*)(wr[r] + b * BS)));
            } else {  // [qs, qs >> 4] & 15 = elements 0..15, 16..31 (bits shifted across bytes are masked)
                __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(wr[r] + b * BS)));
                wq[r] = _mm256_and_si256(_mm256_srlv_epi64(raw, shift_hi), low4);
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m256i xv = _mm256_load_si256((const __m256i*)(xq[c] + b * 32));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256i p;
                if (DT == DType::Q8_0)  // |w| * (x with w's sign): products fit maddubs (<= 2 * 128 * 127)
                    p = _mm256_maddubs_epi16(wq[r],
                                             _mm256_sign_epi8(xv, _mm256_loadu_si256((const __m256i*)(wr[r] + b * BS))));
                else
                    p = _mm256_maddubs_epi16(wq[r], xv);
                p = _mm256_madd_epi16(p, ones16);
                acc[r][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(scb + (r * C + c) * KB), _mm256_cvtepi32_ps(p), acc[r][c]);
            }
        }
    }

    template <int R, int C>
    static void tile(const MatmulJob& j, int64_t r0, int t0, float* scratch) {
        const QuantActs& a = j.acts;
        const int64_t nb = a.nb, nbp = a.nb_pad;
        const float* dbuf = scratch;
        const float* mbuf = scratch + RT * nbp;
        float* sc = scratch + 2 * RT * nbp;  // sc[(r * C + c) * KB + i] = d_w * d_x of block b0 + i
        const uint8_t* wr[R];
        const int8_t* xq[C];
        const int16_t* xq16[C];
        const float* xd[C];
        for (int r = 0; r < R; r++) wr[r] = j.w + (uint64_t)(r0 + r) * j.row_bytes + QOFF;
        for (int c = 0; c < C; c++) {
            xq[c] = qa_q(a, t0 + c);
            xq16[c] = qa_q16(a, t0 + c);
            xd[c] = qa_d(a, t0 + c);
        }
        __m256 acc[R][C];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();

        for (int64_t b0 = 0; b0 < nb; b0 += KB) {  // chunks of KB blocks (nb_pad is a multiple of KB)
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++)
                    for (int i = 0; i < KB; i += 8)
                        _mm256_store_ps(sc + (r * C + c) * KB + i, _mm256_mul_ps(_mm256_load_ps(dbuf + r * nbp + b0 + i),
                                                                                  _mm256_load_ps(xd[c] + b0 + i)));
            const int64_t bend = std::min<int64_t>(nb, b0 + KB);
            for (int64_t b = b0; b < bend; b++) {
                if (C == 1) {  // decode streams the weights once: prefetch the tile two tiles ahead
                    const uint8_t* pf = wr[0] + 2 * RT * j.row_bytes + b * (RT * BS);
                    _mm_prefetch((const char*)pf, _MM_HINT_T0);
                    _mm_prefetch((const char*)pf + 64, _MM_HINT_T0);
                }
                const float* scb = sc + (b - b0);
                if constexpr (BITS == 16)
                    block16<R, C>(wr, b, xq16, scb, acc);
                else
                    block8<R, C>(wr, b, xq, scb, acc);
            }
        }
        if (DT != DType::Q8_0) {  // + sum_b m[b] * s_x[b], into the same accumulator
            const int64_t nb8 = (nb + 7) / 8 * 8;
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const float* xs = qa_s(a, t0 + c);
                for (int64_t b = 0; b < nb8; b += 8) {
                    const __m256 sv = _mm256_load_ps(xs + b);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++)
                        acc[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(mbuf + r * nbp + b), sv, acc[r][c]);
                }
            }
        }
        store_sums<R, C>(j, r0, t0, acc);
    }
};

// ---- drivers: row tiles of RT, token tiles of CT, tails by smaller instantiations
template <class K, int R>
void tokens_loop(const MatmulJob& j, int64_t r0, float* scratch) {
    int t = 0;
    for (; t + CT <= j.T; t += CT) K::template tile<R, CT>(j, r0, t, scratch);
    switch (j.T - t) {
        case 1: K::template tile<R, 1>(j, r0, t, scratch); break;
        case 2: K::template tile<R, 2>(j, r0, t, scratch); break;
        case 3: K::template tile<R, 3>(j, r0, t, scratch); break;
        default: break;
    }
}

template <class K>
void rows_loop(const MatmulJob& j, int64_t r0, int64_t r1, float* scratch) {
    for (int64_t r = r0; r < r1; r += RT) {
        int n = (int)std::min<int64_t>(RT, r1 - r);
        K::prepare(j, r, n, scratch);
        switch (n) {
            case 4: tokens_loop<K, 4>(j, r, scratch); break;
            case 3: tokens_loop<K, 3>(j, r, scratch); break;
            case 2: tokens_loop<K, 2>(j, r, scratch); break;
            default: tokens_loop<K, 1>(j, r, scratch); break;
        }
    }
}

// ---- ISA selection
enum { ISA_UNSET = -1, ISA_AVX2 = 0, ISA_AVX512 = 1 };
std::atomic<int> g_isa{ISA_UNSET};

int parse_isa(const char* name) {
    std::string s = name ? name : "auto";
    if (s == "" || s == "auto") return cpu_has_avx512_vnni() ? ISA_AVX512 : ISA_AVX2;
    if (s == "avx2") return ISA_AVX2;
    if (s == "avx512") {
        if (!cpu_has_avx512_vnni())
            fail("matmul ISA 'avx512' requested but this CPU lacks avx512f/avx512bw/avx512vl/avx512vnni");
        return ISA_AVX512;
    }
    fail("matmul ISA: expected 'auto', 'avx2' or 'avx512' (e.g. in BEAGLE_ISA), found '%s'", s.c_str());
}

int current_isa() {
    int v = g_isa.load(std::memory_order_relaxed);
    if (v == ISA_UNSET) {
        v = parse_isa(getenv("BEAGLE_ISA"));
        g_isa.store(v);
    }
    return v;
}

// Activation bits: 0 = not chosen yet (read BEAGLE_ACT_BITS on first use).
std::atomic<int> g_act_bits{0};

int parse_act_bits(const char* s) {
    std::string v = s ? s : "";
    if (v == "" || v == "16") return 16;
    if (v == "8") return 8;
    fail("matmul activation bits: expected 8 or 16 (e.g. in BEAGLE_ACT_BITS), found '%s'", v.c_str());
}

int current_act_bits() {
    int v = g_act_bits.load(std::memory_order_relaxed);
    if (v == 0) {
        v = parse_act_bits(getenv("BEAGLE_ACT_BITS"));
        g_act_bits.store(v);
    }
    return v;
}

// Reusable scratch of the calling thread (activations + per-worker row-scale buffers): no malloc
// per call once it has grown, and concurrent callers on different threads never share it.
uint8_t* scratch_bytes(size_t n) {
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < n + 64) buf.resize(n + 64);
    uintptr_t p = (uintptr_t)buf.data();
    return (uint8_t*)((p + 63) / 64 * 64);
}

}  // namespace

bool cpu_has_avx512_vnni() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

void cpu_matmul_set_isa(const char* name) { g_isa.store(parse_isa(name)); }

const char* cpu_matmul_isa() { return current_isa() == ISA_AVX512 ? "avx512" : "avx2"; }
bool cpu_isa_avx512() { return current_isa() == ISA_AVX512; }

void cpu_matmul_set_act_bits(int bits) {
    if (bits != 8 && bits != 16) fail("cpu_matmul_set_act_bits: expected 8 or 16, found %d", bits);
    g_act_bits.store(bits);
}

int cpu_matmul_act_bits() { return current_act_bits(); }

int64_t matmul_scratch_floats(const MatmulJob& job) {
    // dbuf, mbuf: 4 rows each; sc: 4 x 4 (row, token) pairs; the same bound serves both ISAs (tiles <= 4 x 4)
    if (!dtype_is_quantized(job.dtype)) return 16;
    if (cpu_is_kquant(job.dtype)) return matmul_kquant_scratch_floats(job);
    return (2 * 4 + 4 * 4) * job.acts.nb_pad;
}

void matmul_rows_avx2(const MatmulJob& j, int64_t r0, int64_t r1, float* scratch) {
    switch (j.dtype) {
        case DType::F32: rows_loop<FloatKernel<DType::F32>>(j, r0, r1, scratch); break;
        case DType::F16: rows_loop<FloatKernel<DType::F16>>(j, r0, r1, scratch); break;
        case DType::BF16: rows_loop<FloatKernel<DType::BF16>>(j, r0, r1, scratch); break;
        case DType::Q8_0:
            if (j.acts.bits == 16) rows_loop<QuantKernel<DType::Q8_0, 16>>(j, r0, r1, scratch);
            else rows_loop<QuantKernel<DType::Q8_0, 8>>(j, r0, r1, scratch);
            break;
        case DType::Q4_0:
            if (j.acts.bits == 16) rows_loop<QuantKernel<DType::Q4_0, 16>>(j, r0, r1, scratch);
            else rows_loop<QuantKernel<DType::Q4_0, 8>>(j, r0, r1, scratch);
            break;
        case DType::Q4_1:
            if (j.acts.bits == 16) rows_loop<QuantKernel<DType::Q4_1, 16>>(j, r0, r1, scratch);
            else rows_loop<QuantKernel<DType::Q4_1, 8>>(j, r0, r1, scratch);
            break;
        default: fail("matmul_rows_avx2: unsupported dtype %s", dtype_name(j.dtype));
    }
}

bool cpu_can_pack(DType t) {
    switch (t) {
        case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
        case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
            return true;
        default:
            return false;
    }
}

int cpu_pack_rows() { return current_isa() == ISA_AVX512 ? 16 : 8; }

static void check_packable(const Weight& W, int G) {
    const char* name = W.host ? W.host->name.c_str() : "(unnamed weight)";
    if (!cpu_can_pack(W.dtype))
        fail("cpu_pack_weight: %s: dtype %s cannot be packed (expected Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K)", name, dtype_name(W.dtype));
    const int64_t be = dtype_block_elems(W.dtype);
    if (W.rows < 1 || W.cols < be || W.cols % be != 0 || !W.data)
        fail("cpu_pack_weight: %s: shape %lld x %lld, expected rows >= 1 and columns a positive multiple of %lld", name,
             (long long)W.rows, (long long)W.cols, (long long)be);
    if (G != 8 && G != 16) fail("cpu_pack_weight: %s: rows per group must be 8 or 16, found %d", name, G);
}

uint64_t cpu_packed_bytes(const Weight& W, int G) {
    check_packable(W, G);
    return (uint64_t)((W.rows + G - 1) / G) * pack_group_bytes(W.dtype, G, W.cols);
}

std::vector<uint8_t> cpu_pack_weight(const Weight& W, int G) {
    std::vector<uint8_t> out((size_t)cpu_packed_bytes(W, G));
    cpu_pack_weight_into(W, G, out.data());
    return out;
}

// Where the packed layouts put each element of a block (matmul.h): chunk byte 2l + e of chunk k holds
// elements nib_lo[2k + e] (low nibble) and nib_hi[2k + e] (high nibble); bit plane_shift[p] of a plane word
// is element plane_elem[p]'s bit.
struct PackTables {
    int nib_lo[16], nib_hi[16], plane_elem[32], plane_shift[32];
    PackTables() {
        for (int k = 0; k < 8; k++)
            for (int e = 0; e < 2; e++) {
                nib_lo[2 * k + e] = q16_element(4 * k + e);
                nib_hi[2 * k + e] = q16_element(4 * k + 2 + e);
            }
        int n = 0;
        for (int k = 0; k < 8; k++)
            for (int i = 0; i < 2; i++)
                for (int e = 0; e < 2; e++, n++) {
                    plane_elem[n] = q16_element(4 * k + 2 * i + e);
                    plane_shift[n] = 16 * e + 2 * k + i;
                }
    }
};
static const PackTables& pack_tables() {
    static const PackTables t;
    return t;
}

// The low 4 bits of one block's 32 q (element e: q[e]) as the 8 chunks of row l, and bit `bit` of each as
// the plane h[l] (matmul.h).
static void pack_nibbles(const int* q, int G, int l, uint8_t* chunks) {
    const PackTables& t = pack_tables();
    for (int c = 0; c < 16; c++)  // c = 2k + e: byte 2l + e of chunk k
        chunks[2 * (uint64_t)G * (c / 2) + 2 * l + c % 2] = (uint8_t)((q[t.nib_lo[c]] & 15) | (q[t.nib_hi[c]] & 15) << 4);
}
static void pack_plane(const int* q, int bit, int l, uint8_t* plane) {
    const PackTables& t = pack_tables();
    uint32_t h = 0;
    for (int n = 0; n < 32; n++) h |= (uint32_t)((q[t.plane_elem[n]] >> bit) & 1) << t.plane_shift[n];
    memcpy(plane + 4 * l, &h, 4);
}

// Q6_K's bits 4-5 of one block's q for row l: two planes of 2G words at `planes` (chunks 0-3) and planes + 4G
// (chunks 4-7); in word e of the plane of chunk k, bits 2f, 2f + 1 with f = 2 (k % 4) + i hold element
// 4k + 2i + e's (i = 0: the low nibble's position, 1: the high one's; positions as pack_nibbles').
static void pack_q6_high(const int* q, int G, int l, uint8_t* planes) {
    uint16_t w[2][2] = {};
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < 2; i++)
            for (int e = 0; e < 2; e++)
                w[k / 4][e] |= (uint16_t)(((q[q16_element(4 * k + 2 * i + e)] >> 4) & 3) << (2 * (2 * (k % 4) + i)));
    memcpy(planes + 4 * l, w[0], 4);
    memcpy(planes + 4 * (uint64_t)G + 4 * l, w[1], 4);
}

// Q4_K, Q5_K, Q6_K: row r's super-blocks into its group's (layout in matmul.h).
static void pack_kquant_row(const Weight& W, int G, int64_t r, uint8_t* out) {
    const DType dt = W.dtype;
    const PackKind kind = pack_kind(dt);
    const int64_t nsb = W.cols / QK_K;
    const uint64_t HB = pack_header_bytes(kind, G), BB = pack_block_bytes(kind, G), SB = HB + 8 * BB;
    const int64_t g = r / G, l = r % G;
    const uint8_t* row = (const uint8_t*)W.data + (uint64_t)r * dtype_row_bytes(dt, (uint64_t)W.cols);
    uint8_t* grp = out + (uint64_t)g * pack_group_bytes(dt, G, W.cols);
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t* src = row + (uint64_t)s * dtype_block_bytes(dt);
        uint8_t* sb = grp + (uint64_t)s * SB;
        int q[256];
        if (dt == DType::Q6_K) {
            const BlockQ6_K* blk = (const BlockQ6_K*)src;
            memcpy(sb + 2 * l, &blk->d, 2);
            for (int i = 0; i < 16; i++) sb[2 * G + i * G + l] = (uint8_t)blk->scales[i];
            for (int e = 0; e < 256; e++) q[e] = q6k_value(blk->ql, blk->qh, e);
        } else {
            memcpy(sb + 2 * l, src, 2);          // d
            memcpy(sb + 2 * G + 2 * l, src + 2, 2);  // dmin
            for (int j = 0; j < 8; j++) {
                int sc, mn;
                kquant_scale_min(src + 4, j, &sc, &mn);
                sb[4 * G + j * G + l] = (uint8_t)sc;
                sb[12 * G + j * G + l] = (uint8_t)mn;
            }
            for (int e = 0; e < 256; e++)
                q[e] = dt == DType::Q5_K ? q5k_value(src + 16, src + 48, e) : q4k_value(src + 16, e);
        }
        for (int j = 0; j < 8; j++) {
            uint8_t* blk = sb + HB + j * BB;
            pack_nibbles(q + 32 * j, G, (int)l, blk);
            if (kind == PackKind::Q5K) pack_plane(q + 32 * j, 4, (int)l, blk + 16 * G);
            if (kind == PackKind::Q6K) pack_q6_high(q + 32 * j, G, (int)l, blk + 16 * G);
        }
    }
}

// The 32-weight types: rows [r0, r1) into their groups.
static void pack_rows(const Weight& W, int G, uint8_t* out, int64_t r0, int64_t r1) {
    const char* name = W.host ? W.host->name.c_str() : "(unnamed weight)";
    const DType dt = W.dtype;
    const int64_t nb = W.cols / QK;
    const bool five = dt == DType::Q5_0 || dt == DType::Q5_1;
    const uint64_t BB = five ? 0 : pack_block_bytes(pack_kind(dt), G), src_row = dtype_row_bytes(dt, (uint64_t)W.cols);
    const uint64_t src_blk = dtype_row_bytes(dt, QK);  // bytes of one stored block
    const uint64_t chunk = 2 * (uint64_t)G;            // bytes of one chunk (G rows x 2 positions)
    const uint64_t group = pack_group_bytes(dt, G, W.cols), TB = pack_q5_triple_bytes(G);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t g = r / G, l = r % G;
        const uint8_t* row = (const uint8_t*)W.data + (uint64_t)r * src_row;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t* src = row + (uint64_t)b * src_blk;
            // Q5: block b's d and m sit in its triple's header (slot b % 3), its q in the triple's vectors
            uint8_t* tri = out + (uint64_t)g * group + (uint64_t)(b / 3) * TB;
            uint8_t* blk = five ? tri + 2 * G * (b % 3) : out + (uint64_t)(g * nb + b) * BB;
            memcpy(blk + 2 * l, src, 2);  // d
            if (dt == DType::Q8_0) {
                const int8_t* qs = (const int8_t*)(src + 2);
                for (int p = 0; p < 16; p++)
                    for (int e = 0; e < 2; e++) blk[chunk + chunk * p + 2 * l + e] = (uint8_t)qs[q16_element(2 * p + e)];
                continue;
            }
            // x = d q + m: Q4_1 and Q5_1 store m; Q4_0 (x = d (q - 8)) and Q5_0 (d (q - 16)) get m = -8 d or
            // -16 d, exact in f16 unless it overflows
            const bool has_m = dt == DType::Q4_1 || dt == DType::Q5_1;
            uint16_t m16;
            if (has_m) {
                memcpy(&m16, src + 2, 2);
            } else {
                uint16_t d16;
                memcpy(&d16, src, 2);
                const float m = (five ? -16.0f : -8.0f) * f16_to_f32(d16);
                m16 = f32_to_f16(m);
                if (!(f16_to_f32(m16) == m || m != m))
                    fail("cpu_pack_weight: %s: row %lld block %lld: scale %g too large to pack (%d d overflows f16)", name,
                         (long long)r, (long long)b, f16_to_f32(d16), five ? 16 : 8);
            }
            const uint8_t* qs = src + (has_m ? 4 : 2) + (five ? 4 : 0);
            int q[32];
            for (int e = 0; e < 32; e++) q[e] = five ? q5_value(src + (has_m ? 4 : 2), qs, e) : e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
            if (!five) {
                memcpy(blk + chunk + 2 * l, &m16, 2);
                pack_nibbles(q, G, (int)l, blk + 2 * chunk);
                continue;
            }
            memcpy(blk + 6 * G + 2 * l, &m16, 2);  // m[b % 3][l]
            for (int i = 0; i < 16; i++)
                for (int e = 0; e < 2; e++) {  // slot s of the triple: position 2i + e of block b
                    const int s = 16 * (int)(b % 3) + i;
                    uint8_t* at = tri + 12 * G + 4 * (uint64_t)G * (s / 3) + 2 * (2 * l + e);
                    uint16_t word;
                    memcpy(&word, at, 2);
                    word = (uint16_t)(word | q[q16_element(2 * i + e)] << (5 * (s % 3)));
                    memcpy(at, &word, 2);
                }
        }
    }
}

void cpu_pack_weight_into(const Weight& W, int G, uint8_t* out, ThreadPool* pool) {
    const uint64_t n = cpu_packed_bytes(W, G);  // (the checks)
    memset(out, 0, (size_t)n);                  // the padding rows of the last group
    const bool k = pack_is_kquant(pack_kind(W.dtype));
    auto groups = [&](int64_t g0, int64_t g1, int) {  // groups write disjoint bytes: any split
        const int64_t r0 = g0 * G, r1 = std::min<int64_t>(W.rows, g1 * G);
        if (!k) return pack_rows(W, G, out, r0, r1);
        for (int64_t r = r0; r < r1; r++) pack_kquant_row(W, G, r, out);
    };
    const int64_t ngroups = (W.rows + G - 1) / G;
    if (pool)
        pool->parallel_for(ngroups, groups, (int64_t)G * W.cols * 8);
    else
        groups(0, ngroups, 0);
}

namespace {

// cpu_matmul's argument checks (Error on bad ones); false when there is nothing to compute (T = 0, no
// rows, or no columns: then y = 0 is written here).
bool matmul_args_ok(float* y, const float* x, const Weight& W, int T) {
    const char* name = W.host ? W.host->name.c_str() : "(unnamed weight)";
    if (T < 0) fail("cpu_matmul: %s: token count T must be >= 0, found %d", name, T);
    if (W.rows < 0 || W.cols < 0)
        fail("cpu_matmul: %s: negative shape %lld x %lld", name, (long long)W.rows, (long long)W.cols);
    switch (W.dtype) {
        case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0: case DType::Q4_1:
        case DType::Q5_0: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
            break;
        default:
            fail("cpu_matmul: %s: weight dtype %s is not supported (expected F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                 "Q5_1, Q4_K, Q5_K or Q6_K)", name, dtype_name(W.dtype));
    }
    if (W.cols % dtype_block_elems(W.dtype) != 0)
        fail("cpu_matmul: %s: %s weight has %lld columns, expected a multiple of %d", name, dtype_name(W.dtype),
             (long long)W.cols, dtype_block_elems(W.dtype));
    if (T == 0 || W.rows == 0) return false;
    if (!y || !x) fail("cpu_matmul: %s: null input or output buffer", name);
    if (W.cols == 0) {
        memset(y, 0, sizeof(float) * (size_t)T * (size_t)W.rows);
        return false;
    }
    if (!W.data) fail("cpu_matmul: %s: weight has no data", name);
    return true;
}

MatmulJob make_job(float* y, const float* x, const Weight& W, int T) {
    MatmulJob job;
    job.y = y;
    job.x = x;
    job.w = (const uint8_t*)W.data;
    job.dtype = W.dtype;
    job.rows = W.rows;
    job.cols = W.cols;
    job.row_bytes = dtype_row_bytes(W.dtype, (uint64_t)W.cols);
    job.T = T;
    return job;
}

// The original row layout (matmul_rows_avx2 / matmul_rows_avx512): every dtype, 8- or 16-bit activations.
void matmul_unpacked(float* y, const float* x, const Weight& W, int T, ThreadPool& pool) {
    if (!matmul_args_ok(y, x, W, T)) return;
    const int isa = current_isa();
    MatmulJob job = make_job(y, x, W, T);
    size_t act_bytes = 0;
    if (dtype_is_quantized(W.dtype)) {
        const bool kq = cpu_is_kquant(W.dtype);  // its own kernel: plain int16 on both ISAs
        const int bits = kq ? 16 : current_act_bits();
        const bool interleaved = isa == ISA_AVX512 && !kq;
        quant_acts_layout(job.acts, W.cols, bits, interleaved,
                          /*with_corr=*/bits == 8 && interleaved && W.dtype == DType::Q8_0);
        act_bytes = job.acts.stride * (size_t)T;
    }
    const size_t per_thread = ((size_t)matmul_scratch_floats(job) * sizeof(float) + 63) / 64 * 64;
    uint8_t* scratch = scratch_bytes(act_bytes + per_thread * (size_t)pool.size());
    if (dtype_is_quantized(W.dtype)) {
        job.acts.base = scratch;
        pool.parallel_for(T, [&](int64_t b, int64_t e, int) {
            for (int64_t t = b; t < e; t++) quantize_act_row(job.acts, x + t * W.cols, t);
        }, 8 * W.cols);  // cost hint: ~8 operations per value; a few rows stay on the caller
    }
    float* thread_scratch = (float*)(scratch + act_bytes);
    const int64_t ntiles = (W.rows + RT - 1) / RT;
    pool.parallel_for(ntiles, [&](int64_t b, int64_t e, int tid) {
        float* s = (float*)((uint8_t*)thread_scratch + per_thread * (size_t)tid);
        int64_t r0 = b * RT, r1 = std::min<int64_t>(e * RT, W.rows);
        if (cpu_is_kquant(W.dtype))
            matmul_rows_kquant(job, r0, r1, s);
        else if (isa == ISA_AVX512)
            matmul_rows_avx512(job, r0, r1, s);
        else
            matmul_rows_avx2(job, r0, r1, s);
    }, (int64_t)RT * W.cols * T);  // cost hint: tiny matrices run on the caller alone
}

}  // namespace

void cpu_matmul(float* y, const float* x, const Weight& W, int T, ThreadPool& pool) {
    const Weight* w = &W;
    cpu_matmul_n(1, &y, x, &w, T, pool);
}

// What a packed set multiplies: x itself, or (cpu_swiglu_matmul) h = silu(gate) * up, written to h block by
// block by the thread that quantizes those blocks (x = h then).
struct SetInput {
    const float* x = nullptr;
    float* h = nullptr;
    const float* gate = nullptr;
    const float* up = nullptr;
};

// True when the row-group kernels (matmul_groups_*.cpp) serve the set: every matrix carries this ISA's packed
// copy, they share x's width, and activations are 16-bit.
static bool packed_set_ok(int n, const Weight* const* Ws) {
    const int G = current_isa() == ISA_AVX512 ? 16 : 8;
    bool packed = n >= 1 && current_act_bits() == 16;
    for (int i = 0; i < n && packed; i++)
        packed = Ws[i]->packed && Ws[i]->packed_rows == G && Ws[i]->cols == Ws[0]->cols;
    return packed;
}

// A packed set in one parallel region: the threads split the blocks of 32 columns of every input row (for
// swiglu_matmul: compute them), quantize them, meet at one barrier, then split all the set's row groups
// (one barrier for Q/K/V or gate/up, not one per matrix). Quantization is per block and each row group's
// output is the kernels' alone, so the split never changes a bit.
static void packed_set(int n, float* const* ys, const SetInput& in, const Weight* const* Ws, int T, ThreadPool& pool) {
    const int isa = current_isa(), G = isa == ISA_AVX512 ? 16 : 8;
    for (int i = 0; i < n; i++)
        if (!matmul_args_ok(ys[i], in.x, *Ws[i], T)) return;  // packed: rows, cols >= 1, so only T = 0 gets here
    const int64_t cols = Ws[0]->cols;
    std::vector<MatmulJob> jobs(n);
    std::vector<int64_t> first(n + 1, 0);  // matrix i owns groups [first[i], first[i + 1]) of the set
    for (int i = 0; i < n; i++) {
        jobs[i] = make_job(ys[i], in.x, *Ws[i], T);
        jobs[i].w = Ws[i]->packed;
        first[i + 1] = first[i] + (Ws[i]->rows + G - 1) / G;
    }
    // x quantized once for the set: plain int16 activation rows, no per-thread scratch
    QuantActs acts;
    quant_acts_layout(acts, cols, 16, /*interleaved=*/false, /*with_corr=*/false);
    acts.base = scratch_bytes(acts.stride * (size_t)T);
    for (MatmulJob& j : jobs) j.acts = acts;
    auto quantize = [&](int64_t b0, int64_t b1) {  // blocks [b0, b1) of every row
        if (b0 >= b1) return;
        for (int t = 0; t < T; t++) {
            const size_t row = (size_t)t * cols + 32 * b0;
            if (in.gate) cpu_swiglu(in.h + row, in.gate + row, in.up + row, 32 * (size_t)(b1 - b0));
            quantize_act_blocks(acts, in.x + (size_t)t * cols, t, b0, b1);
        }
    };
    auto multiply = [&](int64_t b, int64_t e) {  // groups [b, e) of the set
        for (int i = 0; i < n; i++) {
            const int64_t g0 = std::max(b, first[i]) - first[i], g1 = std::min(e, first[i + 1]) - first[i];
            if (g0 >= g1) continue;
            if (isa == ISA_AVX512)
                matmul_groups_avx512(jobs[i], g0, g1);
            else
                matmul_groups_avx2(jobs[i], g0, g1);
        }
    };
    const int64_t nb = acts.nb, ngroups = first[n];
    const int nt = pool.threads_for(ngroups, (int64_t)G * cols * T);
    if (nt == 1) {  // a tiny set (or a one-thread pool): the caller alone
        quantize(0, nb);
        multiply(0, ngroups);
        return;
    }
    SpinBarrier quantized(nt);
    pool.run_on_all([&](int t) {
        if (t >= nt) return;  // beyond the pool's limit: woken, no share
        quantize(nb * t / nt, nb * (t + 1) / nt);
        quantized.wait();
        multiply(ngroups * t / nt, ngroups * (t + 1) / nt);
    });
}

void cpu_matmul_n(int n, float* const* ys, const float* x, const Weight* const* Ws, int T, ThreadPool& pool) {
    if (!packed_set_ok(n, Ws)) {
        for (int i = 0; i < n; i++) {
            if (n > 1) cpu_matmul_n(1, ys + i, x, Ws + i, T, pool);  // one of them may be packed
            else matmul_unpacked(ys[i], x, *Ws[i], T, pool);
        }
        return;
    }
    SetInput in;
    in.x = x;
    packed_set(n, ys, in, Ws, T, pool);
}

void cpu_swiglu_matmul(float* y, float* h, const float* gate, const float* up, const Weight& W, int T,
                       ThreadPool& pool) {
    const Weight* w = &W;
    BEAGLE_CHECK(T < 1 || (h && gate && up), "swiglu_matmul: null input buffer");
    if (!packed_set_ok(1, &w) || T < 1) {
        cpu_swiglu(h, gate, up, (size_t)T * (size_t)W.cols);
        matmul_unpacked(y, h, W, T, pool);
        return;
    }
    SetInput in;
    in.x = h;
    in.h = h;
    in.gate = gate;
    in.up = up;
    packed_set(1, &y, in, &w, T, pool);
}

// ---- the op interface: matmul of a model Weight, and its weights packed in row groups of the current ISA
CpuOps::PackChunk::~PackChunk() { free(base); }

Weight CpuOps::matmul_weight(const Tensor& t) {
    Weight w = weight(t);
    if (!cpu_can_pack(w.dtype) || w.cols % QK != 0 || w.rows < 1) return w;
    const int G = cpu_pack_rows();
    packs_.erase(std::remove_if(packs_.begin(), packs_.end(), [](const Pack& p) { return p.copy.expired(); }),
                 packs_.end());
    std::shared_ptr<const Packed> copy;
    for (const Pack& p : packs_)  // tied weights (lm_head = tok_embd) are packed once
        if (p.data == t.data && p.nbytes == t.nbytes && p.dtype == w.dtype && p.rows == w.rows && p.cols == w.cols &&
            p.group_rows == G && (copy = p.copy.lock()))
            break;
    if (!copy) {
        const uint64_t n = (cpu_packed_bytes(w, G) + 63) / 64 * 64;
        if (!chunk_ || chunk_->cap - chunk_->used < n) {  // a new chunk: 64 MiB, or this matrix's size
            const uint64_t huge = (uint64_t)2 << 20, cap = std::max<uint64_t>((uint64_t)64 << 20, (n + huge - 1) / huge * huge);
            chunk_ = std::make_shared<PackChunk>();
            chunk_->base = (uint8_t*)alloc_large((size_t)cap);
            chunk_->cap = cap;
        }
        uint8_t* bytes = chunk_->base + chunk_->used;
        cpu_pack_weight_into(w, G, bytes, &pool_);
        chunk_->used += n;
        copy = std::make_shared<const Packed>(Packed{chunk_, bytes});
        packs_.push_back({t.data, t.nbytes, w.dtype, w.rows, w.cols, G, copy});
    }
    w.packed = copy->bytes;
    w.packed_rows = G;
    w.keep = copy;
    return w;
}

void CpuOps::matmul(float* y, const float* x, const Weight& W, int T) { cpu_matmul(y, x, W, T, pool_); }

void CpuOps::matmul_n(int n, float* const* ys, const float* x, const Weight* const* Ws, int T) {
    cpu_matmul_n(n, ys, x, Ws, T, pool_);
}

void CpuOps::swiglu_matmul(float* y, float* h, const float* gate, const float* up, const Weight& W, int T) {
    cpu_swiglu_matmul(y, h, gate, up, W, T, pool_);
}

}  // namespace beagle
