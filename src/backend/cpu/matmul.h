// matmul.h: the CPU backend's matrix multiply y = x W^T (the hot loop of inference), called by
// CpuOps::matmul (matmul.cpp), the tests (test/unit/test_matmul*.cpp) and the bench (test/tools/bench_matmul.cpp).
// Kernels: matmul.cpp (dispatch, threading, AVX2+FMA), matmul_avx512.cpp (AVX-512 VNNI), and for packed
// quantized weights matmul_groups_avx2.cpp / matmul_groups_avx512.cpp.
#pragma once
#include <xmmintrin.h>

#include <cstdint>
#include <vector>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "quantize.h"

namespace beagle {

// y[t * W.rows + o] = sum_i W[o, i] * x[t * W.cols + i], for t < T, o < W.rows.
// Weights: F32, F16, BF16 (converted on the fly, FMA with f32 x) and Q8_0, Q4_0, Q4_1 (x quantized
// to int16 blocks by default, or int8, see quantize.h and cpu_matmul_set_act_bits; exact integer block
// dot products scaled by d_w * d_x), and Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (int16 activations always,
// matmul_kquant.cpp). Quantized weights need W.cols a multiple of the block size, 32 or 256 (else Error).
// Batch invariant: y[t, o] is bit-identical whatever T, the thread count or the tiling, for a given
// ISA (the AVX2 and AVX-512 paths may differ from each other in the last bits).
void cpu_matmul(float* y, const float* x, const Weight& W, int T, ThreadPool& pool);
// ys[i] = x Ws[i]^T for i < n, the same bits as n cpu_matmul calls. When every W carries this ISA's
// packed copy and all have the same cols, x is quantized once and one split of all the matrices' row
// groups over the threads serves the set (one thread barrier instead of n: Q/K/V, gate/up).
void cpu_matmul_n(int n, float* const* ys, const float* x, const Weight* const* Ws, int T, ThreadPool& pool);
// h = silu(gate) * up (cpu_swiglu, T x W.cols; h may be gate), then y = h W^T: the same bits as those two
// calls. With W packed, each thread computes and quantizes its share of h's blocks, then one barrier, then
// the multiply: the MLP's elementwise step leaves the serial path between two parallel ones.
void cpu_swiglu_matmul(float* y, float* h, const float* gate, const float* up, const Weight& W, int T,
                       ThreadPool& pool);

// Force the kernel set: "auto" (AVX-512 VNNI if the CPU has it, else AVX2), "avx2", "avx512"
// (Error if the CPU lacks avx512f/bw/vl/vnni). Default: env BEAGLE_ISA, else "auto".
void cpu_matmul_set_isa(const char* name);
const char* cpu_matmul_isa();         // "avx2" or "avx512": what cpu_matmul uses now
bool cpu_isa_avx512();                // cpu_matmul_isa() is "avx512" (matmul_f32.cpp's tiles follow it too)
bool cpu_has_avx512_vnni();           // runtime CPU check (cpuid + OS support)

// Activation precision of the quantized-weight kernels: 16 (default; per-element error <= d_x/2 with
// d_x = max|x_block|/32767, close to float) or 8 (ggml q8_0/q8_1 style, 258x coarser: flips greedy
// tokens of SmolLM2-135M; ~1.1-1.2x faster prefill on AVX-512, same decode speed; kept for comparison).
// Default: env BEAGLE_ACT_BITS ("8" or "16"), else 16; anything else is an Error.
void cpu_matmul_set_act_bits(int bits);
int cpu_matmul_act_bits();            // what cpu_matmul uses now

// Row-group packing (16-bit activations): a Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K matrix re-laid so that one
// vector register holds G output rows, one int32 lane per row: G = 16 on the AVX-512 path (512-bit vectors,
// matmul_groups_avx512.cpp), G = 8 on the AVX2 path (256-bit, matmul_groups_avx2.cpp); cpu_pack_rows()
// says which the current ISA uses. Group g (rows Gg..Gg+G-1, zero rows past the end) is pack_group_bytes
// at g times that; in it, for the 32-weight types, block b is pack_block_bytes at b times that:
//   Q4_0/Q4_1: d[G] f16, m[G] f16 (Q4_0: m = -8 d, exact in f16), then 8 chunks of 2G bytes; byte 2l + e
//              of chunk k = row l's element at position 4k + e (low nibble) and 4k + 2 + e (high
//              nibble), positions in the int16 nibble order of quantize.h (element q16_element(p));
//   Q5_0/Q5_1: three 5-bit q to a word, in triples of blocks (pack_q5_triple_bytes, below), not blocks;
//   Q8_0:      d[G] f16, then 16 chunks of 2G int8; byte 2l + e of chunk p = row l, position 2p + e;
//   Q4_K, Q5_K, Q6_K: per super-block of 256 weights (8 activation blocks) a header, then the 8 blocks laid
//              out as Q4 blocks without d and m: Q4_K 8 chunks; Q5_K 8 chunks and a plane of 2G words
//              with bit 4 of q (bit 2k + i of word e: position 4k + 2i + e, i = 0 for the chunk's low
//              nibble, 1 for its high); Q6_K 8 chunks and two planes of 2G words with bits 4-5 of q:
//              word e of the plane of chunks 0-3 (then 4-7) holds at bits 2f, 2f + 1 position
//              4k + 2i + e's, f = 2 (k % 4) + i, so one shift and one and per half chunk place both
//              bits. Header: Q4_K / Q5_K d[G] f16, dmin[G] f16, sc[8][G] u8, mn[8][G] u8 (the 6-bit
//              scales and mins of the 8 blocks); Q6_K d[G] f16, sc[16][G] i8 (one per 16 weights).
//   Q5 triple t (blocks 3t, 3t + 1, 3t + 2; the last one zero-padded): d[3][G] f16, m[3][G] f16 (Q5_0:
//              m = -16 d), then 16 vectors of 2G words; word 2l + e of vector v holds row l's q of the
//              three slots s = 3v + f at bits 5f..5f+4 (f = 0, 1, 2), where slot s is position 2i + e of
//              block 3t + s / 16, i = s % 16. One and or one shift per slot turns a vector into the 2G
//              words of one slot, with no byte widening and no fifth-bit planes: 5.33 bits a weight
//              (5 + 1/3: each word's top bit is spare) for about half the integer instructions of
//              nibbles plus planes, which decide the speed of passes of many tokens (verify, prefill).
// So zero-extending a chunk to 2G words (Q5: masking a slot out of a vector) gives, per row lane, the weights of two consecutive activation
// positions: one vpdpwssd (AVX-512) or vpmaddwd (AVX2) with the activation pair broadcast to all lanes
// gives G rows x 2 products. The bytes per 32 weights are the original's (Q4: 20, Q8_0: 34, Q6_K: 26.25)
// or a little more (Q5_0 / Q5_1: 25.33 for 22 / 24; Q4_K: 18.5 for 18, Q5_K: 22.5 for 22, the unpacked
// 6-bit scales). Both kernels compute per (row, token) y = sum_b [fl(d_w d_x) * float(I_b) + m s_x]
// in block order with the same float steps (I_b exact, |I_b| <= 32 * 15 * 32767 for Q4 and Q4_K; Q5, Q5_K
// up to 32 * 31 * 32767 and Q8_0 up to 32 * 128 * 32767 round once in float), where for the k-quants
// d_w = d sc and m = -(dmin mn), both exact, and Q6_K's q is signed (q - 32, no m) with one I and d_w per
// half block (positions of elements 0..15 first): batch invariant, and the two packed kernels give the
// same bits as each other.
enum class PackKind { Q8, Q4, Q5, Q4K, Q5K, Q6K };  // the packed layouts (Q4_0 / Q4_1 alike, Q5_0 / Q5_1 alike)
inline PackKind pack_kind(DType t) {
    switch (t) {
        case DType::Q8_0: return PackKind::Q8;
        case DType::Q5_0: case DType::Q5_1: return PackKind::Q5;
        case DType::Q4_K: return PackKind::Q4K;
        case DType::Q5_K: return PackKind::Q5K;
        case DType::Q6_K: return PackKind::Q6K;
        default: return PackKind::Q4;
    }
}
constexpr bool pack_is_kquant(PackKind k) { return k == PackKind::Q4K || k == PackKind::Q5K || k == PackKind::Q6K; }
// Bytes of one block of 32 weights x G rows (the 32-weight types; for the k-quants one block of a
// super-block, after its header), of a super-block header, and of one whole row group of `cols` columns.
// (pack_block_bytes is not defined for Q5, whose unit is the triple.)
constexpr uint64_t pack_q5_triple_bytes(int G) { return 76ull * (uint64_t)G; }  // 12 G of scales, 16 x 4 G
constexpr uint64_t pack_block_bytes(PackKind k, int G) {
    return (k == PackKind::Q8 ? 34ull : k == PackKind::Q5 ? 24ull : k == PackKind::Q4 ? 20ull
            : k == PackKind::Q4K ? 16ull : k == PackKind::Q5K ? 20ull : 24ull) * (uint64_t)G;
}
constexpr uint64_t pack_header_bytes(PackKind k, int G) { return (k == PackKind::Q6K ? 18ull : 20ull) * (uint64_t)G; }
inline uint64_t pack_group_bytes(DType t, int G, int64_t cols) {
    const PackKind k = pack_kind(t);
    if (pack_is_kquant(k)) return (uint64_t)(cols / 256) * (pack_header_bytes(k, G) + 8 * pack_block_bytes(k, G));
    if (k == PackKind::Q5) return (uint64_t)((cols / 32 + 2) / 3) * pack_q5_triple_bytes(G);
    return (uint64_t)(cols / 32) * pack_block_bytes(k, G);
}
bool cpu_can_pack(DType t);                              // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
int cpu_pack_rows();                                     // G of the current ISA: 16 (avx512) or 8 (avx2)
// Error for other dtypes, cols % 32 != 0 or G other than 8 or 16. _into writes the cpu_packed_bytes(W, G)
// bytes to `out` (the CPU backend packs into its huge-page arena, cpu_ops.h).
std::vector<uint8_t> cpu_pack_weight(const Weight& W, int G);
uint64_t cpu_packed_bytes(const Weight& W, int G);
void cpu_pack_weight_into(const Weight& W, int G, uint8_t* out, ThreadPool* pool = nullptr);  // pool: split by groups

// ---- internal: shared by matmul.cpp and matmul_avx512.cpp
struct MatmulJob {
    float* y = nullptr;
    const float* x = nullptr;      // float weights: the f32 activations
    const uint8_t* w = nullptr;    // weight bytes, rows of row_bytes
    DType dtype = DType::F32;
    int64_t rows = 0, cols = 0;
    uint64_t row_bytes = 0;
    int T = 0;
    QuantActs acts;                // quantized weights: the int16 or int8 activations (acts.bits)
};
// Floats of per-thread scratch the row kernels need (per-row block scales and mins of a row tile).
int64_t matmul_scratch_floats(const MatmulJob& job);
// Compute y for rows [r0, r1) and all T tokens. scratch: matmul_scratch_floats(job) floats, 64-aligned.
void matmul_rows_avx2(const MatmulJob& job, int64_t r0, int64_t r1, float* scratch);
void matmul_rows_avx512(const MatmulJob& job, int64_t r0, int64_t r1, float* scratch);
// The 5-bit and k-quant types (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; matmul_kquant.cpp): one kernel for both
// ISAs, plain int16 activations (16-bit whatever cpu_matmul_act_bits says), rows [r0, r1).
bool cpu_is_kquant(DType t);
int64_t matmul_kquant_scratch_floats(const MatmulJob& job);
void matmul_rows_kquant(const MatmulJob& job, int64_t r0, int64_t r1, float* scratch);
// Packed weights (job.w = cpu_pack_weight bytes, job.acts int16 non-interleaved): row groups [g0, g1).
void matmul_groups_avx512(const MatmulJob& job, int64_t g0, int64_t g1);  // G = 16
void matmul_groups_avx2(const MatmulJob& job, int64_t g0, int64_t g1);    // G = 8

// Software prefetch of the packed weights this many bytes ahead of the block being multiplied (hint only:
// the arithmetic and its order are unchanged), one burst per block or triple. A thread's weights are one
// contiguous stream, but the hardware prefetchers stop at each 4 KiB page, so every page starts with
// demand misses. The distance is tuned by SmolLM2-135M decode on both paths: nearer leaves misses, further
// wastes the prefetches past a small matrix's share of rows (the sweep is in the commit that set it).
constexpr uint64_t PACKED_PREFETCH_BYTES = 4096;
// Prefetch the cache lines of `bytes` bytes at p + PACKED_PREFETCH_BYTES (past the end it reads nothing).
inline void prefetch_packed(const uint8_t* p, uint64_t bytes) {
    for (uint64_t o = 0; o < bytes; o += 64) _mm_prefetch((const char*)(p + PACKED_PREFETCH_BYTES + o), _MM_HINT_T0);
}

// What a row-group tile of C tokens from t0 reads: group g's packed blocks (pack_block_bytes(dtype, G)
// each) and, per token c, the int16 activations as int32 pairs (int32 i of block b = positions 2i,
// 2i + 1), the block scales d and the sums s (quantize.h).
template <int C>
struct GroupTileInputs {
    const uint8_t* w;
    uint64_t block_bytes;
    const int32_t* xq[C];
    const float* xd[C];
    const float* xs[C];
    GroupTileInputs(const MatmulJob& j, int G, int64_t g, int t0) {
        block_bytes = pack_block_bytes(pack_kind(j.dtype), G);
        w = j.w + (uint64_t)g * pack_group_bytes(j.dtype, G, j.cols);
        for (int c = 0; c < C; c++) {
            xq[c] = (const int32_t*)qa_q16(j.acts, t0 + c);
            xd[c] = qa_d(j.acts, t0 + c);
            xs[c] = qa_s(j.acts, t0 + c);
        }
    }
};

// (These drivers are static: each kernel file gets its own copy compiled with its ISA's flags, never a
// weak symbol that the linker could share between the AVX2 and AVX-512 objects.)
// The last tile of a group: `left` tokens from t, 1 <= left <= C (one instantiation per tile size <= C).
template <template <PackKind, int> class Tile, PackKind K, int C>
static inline void last_tile(const MatmulJob& j, int64_t g, int t, int left) {
    if constexpr (C > 1)
        if (left < C) return last_tile<Tile, K, C - 1>(j, g, t, left);
    Tile<K, C>::run(j, g, t);
}
// The row-group kernels' driver: per group, tiles of CMAX tokens (each widened weight vector serves all of
// them), then one tile of the 1..CMAX-1 left. CMAX = 4 (AVX2: 16 ymm registers) or 8 (AVX-512: 32 zmm).
// Tile<K, C>::run(job, g, t0) computes tokens t0..t0+C-1 of group g, K the packed layout. `who` names the kernel in the error for other dtypes. The tiling changes which tokens share a
// weight load, never a token's arithmetic (each kernel's float steps per (row, token) do not depend on C).
template <template <PackKind, int> class Tile, PackKind K, int CMAX>
static inline void groups_tiles(const MatmulJob& j, int64_t g0, int64_t g1) {
    static_assert(CMAX == 4 || CMAX == 8, "token tiles of 4 or 8");
    for (int64_t g = g0; g < g1; g++) {
        int t = 0;
        for (; t + CMAX <= j.T; t += CMAX) Tile<K, CMAX>::run(j, g, t);
        if (t < j.T) last_tile<Tile, K, CMAX - 1>(j, g, t, j.T - t);
    }
}
template <template <PackKind, int> class Tile, int CMAX>
static inline void groups_run(const MatmulJob& j, int64_t g0, int64_t g1, const char* who) {
    switch (j.dtype) {
        case DType::Q8_0: groups_tiles<Tile, PackKind::Q8, CMAX>(j, g0, g1); break;
        case DType::Q4_0: case DType::Q4_1: groups_tiles<Tile, PackKind::Q4, CMAX>(j, g0, g1); break;
        case DType::Q5_0: case DType::Q5_1: groups_tiles<Tile, PackKind::Q5, CMAX>(j, g0, g1); break;
        case DType::Q4_K: groups_tiles<Tile, PackKind::Q4K, CMAX>(j, g0, g1); break;
        case DType::Q5_K: groups_tiles<Tile, PackKind::Q5K, CMAX>(j, g0, g1); break;
        case DType::Q6_K: groups_tiles<Tile, PackKind::Q6K, CMAX>(j, g0, g1); break;
        default: fail("%s: packed weights must be Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K (code %d)", who,
                      (int)j.dtype);
    }
}

}  // namespace beagle
