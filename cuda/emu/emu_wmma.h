// emu_wmma.h: nvcuda::wmma for the CPU emulator (included by emu.h; <mma.h> is empty under g++).
// A fragment holds the WHOLE tile, row-major, in every lane: CUDA leaves the lane layout
// unspecified, so kernels must loop `for (int i = 0; i < f.num_elements; i++)` and never assume 8.
// load/store/mma_sync are warp collectives (every non-exited lane of the warp must call them):
// load_matrix_sync waits for the warp first, so it sees the other lanes' shared-memory writes, and
// mma_sync computes the tile once per warp and copies it to the lanes whose inputs are identical.
// Shapes: m16n16k16, m32n8k16, m8n32k16 for __half / __nv_bfloat16 with float or __half
// accumulators and for signed char / unsigned char with int accumulators (exact integer products, as
// the hardware's s8/u8 mma), m16n16k8 for precision::tf32 (inputs rounded to tf32 on load).
#pragma once

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

namespace detail {
template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };
template <class T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };

template <class T> inline float to_float(T v) { return (float)v; }
template <> inline float to_float<__half>(__half v) { return __half2float(v); }
template <> inline float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> inline T from_float(float v) { return (T)v; }
template <> inline __half from_float<__half>(float v) { return __float2half(v); }
template <> inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// cvt.rna.tf32.f32: keep 10 mantissa bits, round to nearest, ties away from zero.
inline float round_tf32(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0x1000u) & 0xFFFFE000u;
    memcpy(&v, &u, 4);
    return v;
}

template <class Use, class T> struct checked;
template <class Use> struct checked<Use, __half> {};
template <class Use> struct checked<Use, __nv_bfloat16> {};
template <class Use> struct checked<Use, precision::tf32> {};
template <class Use> struct checked<Use, signed char> {};
template <class Use> struct checked<Use, unsigned char> {};
template <> struct checked<accumulator, float> {};
template <> struct checked<accumulator, int> {};

// kind: 0 = __half / bf16 input, 1 = tf32 input, 2 = accumulator (any of the shapes)
constexpr bool shape_ok(int M, int N, int K, int kind) {
    const bool k16 = (M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) || (M == 8 && N == 32 && K == 16);
    const bool k8 = M == 16 && N == 16 && K == 8;
    return kind == 0 ? k16 : kind == 1 ? k8 : (k16 || k8);
}

inline void warp_sync_for(int kind, beagle_emu::Site site) {
    beagle_emu::WarpOp op{};
    op.kind = kind;
    op.mask = beagle_emu::warp_live_mask();
    op.site = site;
    beagle_emu::warp_collective(op);
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
    static_assert(detail::shape_ok(M, N, K, std::is_same<Use, accumulator>::value ? 2 : std::is_same<T, precision::tf32>::value ? 1 : 0),
                  "wmma: unsupported shape for this element type");
    static_assert(sizeof(detail::checked<Use, T>) >= 0, "wmma: unsupported element type");

public:
    typedef T element_type;
    typedef typename detail::storage<T>::type storage_element_type;
    static constexpr int num_rows = detail::dims<Use, M, N, K>::rows;
    static constexpr int num_cols = detail::dims<Use, M, N, K>::cols;
    static constexpr int num_elements = num_rows * num_cols;
    storage_element_type x[num_elements];  // element (r, c) at x[r * num_cols + c]
};

template <class Use, int M, int N, int K, class T, class L, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
    typedef typename fragment<Use, M, N, K, T, L>::storage_element_type S;
    S s;
    if constexpr (std::is_integral<S>::value)
        s = (S)v;  // int accumulators, 8-bit inputs: no trip through float
    else
        s = detail::from_float<S>(detail::to_float(v));
    for (int i = 0; i < f.num_elements; i++) f.x[i] = s;
}

// matrix_a / matrix_b, layout from the fragment type.
template <class Use, int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f,
                             const typename fragment<Use, M, N, K, T, L>::storage_element_type* p,
                             unsigned ldm) {
    static_assert(std::is_same<L, row_major>::value || std::is_same<L, col_major>::value,
                  "wmma: matrix_a/matrix_b fragments need row_major or col_major");
    detail::warp_sync_for(beagle_emu::kOpWmmaLoad, BEAGLE_EMU_SITE("wmma::load_matrix_sync()"));
    typedef fragment<Use, M, N, K, T, L> F;
    const bool row = std::is_same<L, row_major>::value;
    for (int r = 0; r < F::num_rows; r++)
        for (int c = 0; c < F::num_cols; c++) {
            auto v = row ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
            if constexpr (std::is_same<T, precision::tf32>::value) v = detail::round_tf32(v);
            f.x[r * F::num_cols + c] = v;
        }
}

// accumulator, layout given at run time.
template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t layout) {
    detail::warp_sync_for(beagle_emu::kOpWmmaLoad, BEAGLE_EMU_SITE("wmma::load_matrix_sync()"));
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            f.x[r * N + c] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <int M, int N, int K, class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
    detail::warp_sync_for(beagle_emu::kOpWmmaStore, BEAGLE_EMU_SITE("wmma::store_matrix_sync()"));
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            T& dst = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
            dst = f.x[r * N + c];
        }
}

namespace detail {
// d = a * b + c with float accumulation in k order (one fmaf per product).
template <class FD, class FA, class FB, class FC, int M, int N, int K>
inline void mma_tile(FD& d, const FA& a, const FB& b, const FC& c, bool satf) {
    typedef typename FD::storage_element_type SD;
    if constexpr (std::is_same<SD, int>::value) {  // 8-bit inputs: exact integer accumulation
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                int acc = c.x[i * N + j];
                for (int k = 0; k < K; k++) acc += (int)a.x[i * K + k] * (int)b.x[k * N + j];
                d.x[i * N + j] = acc;
            }
        return;
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = to_float(c.x[i * N + j]);
            for (int k = 0; k < K; k++) acc = fmaf(to_float(a.x[i * K + k]), to_float(b.x[k * N + j]), acc);
            if (satf && !std::is_same<SD, float>::value) {
                const float big = 65504.0f;
                acc = acc > big ? big : (acc < -big ? -big : acc);
            }
            d.x[i * N + j] = from_float<SD>(acc);
        }
}
// Group action of mma_sync: compute once, reuse for lanes with identical inputs.
template <class FD, class FA, class FB, class FC, int M, int N, int K, bool kSatf>
void mma_group(beagle_emu::WarpOp* const* ops, int n) {
    const FA* a0 = static_cast<const FA*>(ops[0]->in);
    const FB* b0 = static_cast<const FB*>(ops[0]->in2);
    const FC* c0 = static_cast<const FC*>(ops[0]->in3);
    FD d0;
    mma_tile<FD, FA, FB, FC, M, N, K>(d0, *a0, *b0, *c0, kSatf);
    for (int l = 1; l < n; l++) {
        const FA* a = static_cast<const FA*>(ops[l]->in);
        const FB* b = static_cast<const FB*>(ops[l]->in2);
        const FC* c = static_cast<const FC*>(ops[l]->in3);
        FD* d = static_cast<FD*>(ops[l]->out);
        if (memcmp(a, a0, sizeof(FA)) == 0 && memcmp(b, b0, sizeof(FB)) == 0 && memcmp(c, c0, sizeof(FC)) == 0) {
            *d = d0;
        } else {
            FD t;
            mma_tile<FD, FA, FB, FC, M, N, K>(t, *a, *b, *c, kSatf);
            *d = t;
        }
    }
    *static_cast<FD*>(ops[0]->out) = d0;
}
}  // namespace detail

template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC, class TD>
inline void mma_sync(fragment<accumulator, M, N, K, TD>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
                     bool satf = false) {
    static_assert(std::is_same<TA, TB>::value, "wmma::mma_sync: matrix_a and matrix_b element types differ");
    constexpr bool in8 = std::is_same<TA, signed char>::value || std::is_same<TA, unsigned char>::value;
    static_assert(in8 == (std::is_same<TC, int>::value && std::is_same<TD, int>::value),
                  "wmma::mma_sync: 8-bit inputs go with int accumulators, and only they");
    typedef fragment<accumulator, M, N, K, TD> FD;
    typedef fragment<matrix_a, M, N, K, TA, LA> FA;
    typedef fragment<matrix_b, M, N, K, TB, LB> FB;
    typedef fragment<accumulator, M, N, K, TC> FC;
    beagle_emu::WarpOp op{};
    op.kind = beagle_emu::kOpWmmaMma;
    op.mask = beagle_emu::warp_live_mask();
    op.in = &a;
    op.in2 = &b;
    op.in3 = &c;
    op.out = &d;
    op.action = satf ? &detail::mma_group<FD, FA, FB, FC, M, N, K, true> : &detail::mma_group<FD, FA, FB, FC, M, N, K, false>;
    op.site = BEAGLE_EMU_SITE("wmma::mma_sync()");
    beagle_emu::warp_collective(op);
}

// Rounding to tf32 (the conversion kernels apply to tf32 fragment elements).
inline float __float_to_tf32(float v) { return detail::round_tf32(v); }

}  // namespace wmma
}  // namespace nvcuda
