// emu_math.h: device intrinsics for the CPU emulator (included by emu.h): fast-math and rounding
// intrinsics, bit tricks, min/max, the half/bf16 functions cuda_fp16.h only defines for the device,
// cache-hinted loads/stores, memory fences and atomics. Atomics are real (GCC __atomic builtins,
// relaxed order like CUDA's) because blocks of one launch run concurrently on several OS threads.
#pragma once

// ---- float intrinsics: the emulator computes them exactly (the GPU ones are approximations) ----
// glibc's <math.h> declares __expf, __logf, ... (C linkage, noexcept) but libm does not export them,
// so they are defined here, inline, matching that declaration. exp10f itself is a glibc function.
inline float __expf(float x) noexcept { return expf(x); }
inline float __exp10f(float x) noexcept { return exp10f(x); }
inline float __logf(float x) noexcept { return logf(x); }
inline float __log2f(float x) noexcept { return log2f(x); }
inline float __log10f(float x) noexcept { return log10f(x); }
inline float __sinf(float x) noexcept { return sinf(x); }
inline float __cosf(float x) noexcept { return cosf(x); }
inline float __tanf(float x) noexcept { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) noexcept { *s = sinf(x); *c = cosf(x); }
inline float __powf(float x, float y) noexcept { return powf(x, y); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline double __dadd_rn(double x, double y) { return x + y; }
inline double __dmul_rn(double x, double y) { return x * y; }
inline double __fma_rn(double x, double y, double z) { return fma(x, y, z); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }

// ---- conversions and reinterpretation ---------------------------------------------------------
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)truncf(x); }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline unsigned __float2uint_rz(float x) { return (unsigned)truncf(x); }
inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
inline long long __float2ll_rz(float x) { return (long long)truncf(x); }
inline float __int2float_rn(int i) { return (float)i; }
inline float __uint2float_rn(unsigned i) { return (float)i; }
inline float __ll2float_rn(long long i) { return (float)i; }
inline float __double2float_rn(double x) { return (float)x; }
inline int __double2int_rn(double x) { return (int)nearbyint(x); }

// ---- integer intrinsics -------------------------------------------------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    x = ((x >> 8) & 0x00FF00FFu) | ((x & 0x00FF00FFu) << 8);
    return (x >> 16) | (x << 16);
}
inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (shift & 31)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (shift & 31));
}
inline int __mul24(int x, int y) { return (int)((long long)(x << 8 >> 8) * (y << 8 >> 8)); }
inline unsigned __umul24(unsigned x, unsigned y) { return (x & 0xFFFFFFu) * (y & 0xFFFFFFu); }
inline int __mulhi(int x, int y) { return (int)(((long long)x * y) >> 32); }
inline unsigned __umulhi(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x * y) >> 32); }
inline long long __mul64hi(long long x, long long y) { return (long long)(((__int128)x * y) >> 64); }
inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return (unsigned long long)(((unsigned __int128)x * y) >> 64);
}
inline unsigned __usad(unsigned x, unsigned y, unsigned z) { return (x > y ? x - y : y - x) + z; }

// ---- min / max overloads the CUDA device library provides in the global namespace --------------
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// ---- __half / __nv_bfloat16 functions that cuda_fp16.h / cuda_bf16.h define only for the device --
// (arithmetic operators, comparisons and conversions come from the toolkit's host code)
// hexp, h2exp, hsqrt, ... computed in float and rounded back.
#define BEAGLE_EMU_H1(name, fn)                                                                      \
    inline __half h##name(__half x) { return __float2half(fn(__half2float(x))); }                    \
    inline __half2 h2##name(__half2 x) { return __floats2half2_rn(fn(__low2float(x)), fn(__high2float(x))); } \
    inline __nv_bfloat16 h##name(__nv_bfloat16 x) { return __float2bfloat16(fn(__bfloat162float(x))); } \
    inline __nv_bfloat162 h2##name(__nv_bfloat162 x) {                                               \
        return __floats2bfloat162_rn(fn(__low2float(x)), fn(__high2float(x)));                      \
    }
namespace beagle_emu {
inline float rcp(float x) { return 1.0f / x; }
inline float rsqrt_f(float x) { return 1.0f / sqrtf(x); }
}  // namespace beagle_emu
BEAGLE_EMU_H1(exp, expf)
BEAGLE_EMU_H1(exp2, exp2f)
BEAGLE_EMU_H1(exp10, exp10f)
BEAGLE_EMU_H1(log, logf)
BEAGLE_EMU_H1(log2, log2f)
BEAGLE_EMU_H1(log10, log10f)
BEAGLE_EMU_H1(sqrt, sqrtf)
BEAGLE_EMU_H1(rsqrt, beagle_emu::rsqrt_f)
BEAGLE_EMU_H1(rcp, beagle_emu::rcp)
BEAGLE_EMU_H1(sin, sinf)
BEAGLE_EMU_H1(cos, cosf)
BEAGLE_EMU_H1(tanh, tanhf)
BEAGLE_EMU_H1(floor, floorf)
BEAGLE_EMU_H1(ceil, ceilf)
BEAGLE_EMU_H1(trunc, truncf)
BEAGLE_EMU_H1(rint, rintf)
#undef BEAGLE_EMU_H1
inline __half __hfma(__half a, __half b, __half c) {
    return __float2half(fmaf(__half2float(a), __half2float(b), __half2float(c)));
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
    return __floats2half2_rn(fmaf(__low2float(a), __low2float(b), __low2float(c)),
                             fmaf(__high2float(a), __high2float(b), __high2float(c)));
}
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __float2bfloat16(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
inline __half __hfma_relu(__half a, __half b, __half c) {
    float r = fmaf(__half2float(a), __half2float(b), __half2float(c));
    return __float2half(r > 0.0f ? r : 0.0f);
}

// ---- cache-hinted loads and stores: plain memory accesses here ---------------------------------
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }

// ---- fences -------------------------------------------------------------------------------------
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- atomics ------------------------------------------------------------------------------------
namespace beagle_emu {
// Read-modify-write through a compare-and-swap on the bits of T (float, double, half, bf16, ...).
template <class T, class U, class F>
inline T atomic_cas_loop(T* addr, F f) {
    static_assert(sizeof(T) == sizeof(U), "atomic_cas_loop: size mismatch");
    U* p = reinterpret_cast<U*>(addr);
    U old_bits = __atomic_load_n(p, __ATOMIC_RELAXED);
    for (;;) {
        T old_val, new_val;
        memcpy((void*)&old_val, &old_bits, sizeof(T));
        new_val = f(old_val);
        U new_bits;
        memcpy(&new_bits, (const void*)&new_val, sizeof(T));
        if (__atomic_compare_exchange_n(p, &old_bits, new_bits, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return old_val;
    }
}
}  // namespace beagle_emu

// Exactly the overloads the toolkit declares (sm_20/sm_32/sm_60 atomic headers), no more, so code
// that compiles here also compiles with nvcc.
#define BEAGLE_EMU_ATOMIC_ADD(T)                                                                        \
    inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
#define BEAGLE_EMU_ATOMIC_EXCH_CAS(T)                                                                   \
    inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }              \
    inline T atomicCAS(T* p, T compare, T v) {                                                          \
        __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);          \
        return compare;                                                                                 \
    }
#define BEAGLE_EMU_ATOMIC_BITS_MINMAX(T)                                                                \
    inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }                \
    inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }                  \
    inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }                \
    inline T atomicMin(T* p, T v) { return beagle_emu::atomic_cas_loop<T, T>(p, [v](T o) { return v < o ? v : o; }); } \
    inline T atomicMax(T* p, T v) { return beagle_emu::atomic_cas_loop<T, T>(p, [v](T o) { return v > o ? v : o; }); }
BEAGLE_EMU_ATOMIC_ADD(int)
BEAGLE_EMU_ATOMIC_ADD(unsigned)
BEAGLE_EMU_ATOMIC_ADD(unsigned long long)
BEAGLE_EMU_ATOMIC_EXCH_CAS(int)
BEAGLE_EMU_ATOMIC_EXCH_CAS(unsigned)
BEAGLE_EMU_ATOMIC_EXCH_CAS(unsigned long long)
BEAGLE_EMU_ATOMIC_BITS_MINMAX(int)
BEAGLE_EMU_ATOMIC_BITS_MINMAX(unsigned)
BEAGLE_EMU_ATOMIC_BITS_MINMAX(long long)
BEAGLE_EMU_ATOMIC_BITS_MINMAX(unsigned long long)
#undef BEAGLE_EMU_ATOMIC_ADD
#undef BEAGLE_EMU_ATOMIC_EXCH_CAS
#undef BEAGLE_EMU_ATOMIC_BITS_MINMAX
inline int atomicSub(int* p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicSub(unsigned* p, unsigned v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline unsigned short atomicCAS(unsigned short* p, unsigned short compare, unsigned short v) {
    __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;
}
// atomicInc/atomicDec wrap at `limit` like the hardware does.
inline unsigned atomicInc(unsigned* p, unsigned limit) {
    return beagle_emu::atomic_cas_loop<unsigned, unsigned>(p, [limit](unsigned o) { return o >= limit ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned* p, unsigned limit) {
    return beagle_emu::atomic_cas_loop<unsigned, unsigned>(p, [limit](unsigned o) { return (o == 0 || o > limit) ? limit : o - 1; });
}
inline float atomicExch(float* p, float v) {
    return beagle_emu::atomic_cas_loop<float, uint32_t>(p, [v](float) { return v; });
}
inline float atomicAdd(float* p, float v) {
    return beagle_emu::atomic_cas_loop<float, uint32_t>(p, [v](float o) { return o + v; });
}
inline double atomicAdd(double* p, double v) {
    return beagle_emu::atomic_cas_loop<double, uint64_t>(p, [v](double o) { return o + v; });
}
inline __half atomicAdd(__half* p, __half v) {
    return beagle_emu::atomic_cas_loop<__half, uint16_t>(p, [v](__half o) { return __float2half(__half2float(o) + __half2float(v)); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    return beagle_emu::atomic_cas_loop<__nv_bfloat16, uint16_t>(p, [v](__nv_bfloat16 o) {
        return __float2bfloat16(__bfloat162float(o) + __bfloat162float(v));
    });
}
inline __half2 atomicAdd(__half2* p, __half2 v) {
    return beagle_emu::atomic_cas_loop<__half2, uint32_t>(p, [v](__half2 o) {
        return __floats2half2_rn(__low2float(o) + __low2float(v), __high2float(o) + __high2float(v));
    });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
    return beagle_emu::atomic_cas_loop<__nv_bfloat162, uint32_t>(p, [v](__nv_bfloat162 o) {
        return __floats2bfloat162_rn(__low2float(o) + __low2float(v), __high2float(o) + __high2float(v));
    });
}
// Scoped variants (_block, _system) behave like the plain ones here.
#define BEAGLE_EMU_SCOPED(name)                                                                \
    template <class T, class... A> inline T name##_block(T* p, A... a) { return name(p, a...); } \
    template <class T, class... A> inline T name##_system(T* p, A... a) { return name(p, a...); }
BEAGLE_EMU_SCOPED(atomicAdd)
BEAGLE_EMU_SCOPED(atomicSub)
BEAGLE_EMU_SCOPED(atomicExch)
BEAGLE_EMU_SCOPED(atomicMin)
BEAGLE_EMU_SCOPED(atomicMax)
BEAGLE_EMU_SCOPED(atomicInc)
BEAGLE_EMU_SCOPED(atomicDec)
BEAGLE_EMU_SCOPED(atomicCAS)
BEAGLE_EMU_SCOPED(atomicAnd)
BEAGLE_EMU_SCOPED(atomicOr)
BEAGLE_EMU_SCOPED(atomicXor)
#undef BEAGLE_EMU_SCOPED
