// cuda_emu_kernels_gemm.cpp -> build/test/test_emu_kernels_gemm: the dense GEMM kernels of cuda/gemm.cu
// run in the CPU emulator against a double reference: gemm_f32_kernel and the tensor-core kernels
// gemm_wmma_bf16_kernel / gemm_wmma_f16_kernel and the few-rows gemv_f32_kernel (also bit-identical to
// gemm_f32_kernel), on ragged shapes (M, N, K not multiples of the tiles,
// M = 1 decode rows), in the three layouts of a linear layer (y = x W^T, dx = dy W, dW += dy^T x) with
// and without accumulation, under poisoned shared memory and reverse/random thread orders, plus batch
// invariance (a row computed alone equals the same row inside a batch, bit for bit).
// Tolerances: fp32 - atol 1e-6 K, rtol 1e-5 (a K-term fp32 fma chain of products of magnitude <= 1 is
// off by at most ~K 2^-24 sum|a b|); wmma - the reference uses the bf16/fp16-rounded A (and B as
// stored), so only fp32 accumulation error remains: same tolerance.
#include "cuda_kernel_test.h"
#include "core/dtype.h"
#include "gemm.cu"

enum Layout { FWD, BWD_X, BWD_W };  // y = x W^T;  dx = dy W;  dW += dy^T x
static const char* layout_name(Layout l) { return l == FWD ? "y=xW^T" : l == BWD_X ? "dx=dyW" : "dW+=dy^Tx"; }

// Build GemmArgs for C (M x N) with the operand A (as a row-major buffer laid out as the layer has it)
// and B's strides; returns A(m, k) and B(k, n) accessors for the reference.
struct Problem {
    int M, N, K;
    Layout lay;
    std::vector<float> A, Bf, C0;  // A buffer, B as floats (for the fp32 kernel / reference), C start
    GemmArgs args(float* C, bool acc) const {
        GemmArgs g;
        g.M = M; g.N = N; g.K = K;
        g.A = A.data();
        g.C = C;
        g.c_m = N;
        g.accumulate = acc;
        if (lay == FWD) { g.a_m = K; g.a_k = 1; g.b_k = 1; g.b_n = K; }        // A = x (M x K), B[k,n] = W[n,k] (W: N x K)
        else if (lay == BWD_X) { g.a_m = K; g.a_k = 1; g.b_k = N; g.b_n = 1; } // A = dy (M x K), B = W (K x N)
        else { g.a_m = 1; g.a_k = M; g.b_k = N; g.b_n = 1; }                   // A[m,k] = dy[k,m] (dy: K x M), B = x (K x N)
        return g;
    }
    double a(int m, int k) const { GemmArgs g = args(nullptr, false); return A[m * g.a_m + k * g.a_k]; }
    double b(const std::vector<float>& B, int k, int n) const { GemmArgs g = args(nullptr, false); return B[k * g.b_k + n * g.b_n]; }
};

static Problem make_problem(int M, int N, int K, Layout lay) {
    Problem p{M, N, K, lay, {}, {}, {}};
    p.A = kt_vec((size_t)M * K);
    p.Bf = kt_vec((size_t)K * N);
    p.C0 = kt_vec((size_t)M * N);
    return p;
}

static std::vector<double> reference(const Problem& p, const std::vector<float>& B, bool acc, bool round_a,
                                     float (*rnd)(float)) {
    std::vector<double> ref((size_t)p.M * p.N);
    for (int m = 0; m < p.M; m++)
        for (int n = 0; n < p.N; n++) {
            double s = acc ? p.C0[(size_t)m * p.N + n] : 0.0;
            for (int k = 0; k < p.K; k++) {
                double av = p.a(m, k);
                if (round_a) av = rnd((float)av);
                s += av * p.b(B, k, n);
            }
            ref[(size_t)m * p.N + n] = s;
        }
    return ref;
}

static float ident(float v) { return v; }
static float round_bf16(float v) { return beagle::bf16_to_f32(beagle::f32_to_bf16(v)); }
static float round_f16(float v) { return beagle::f16_to_f32(beagle::f32_to_f16(v)); }

static void run_f32(const Problem& p, bool acc, const std::string& tag, std::vector<float>* out = nullptr) {
    std::vector<float> C = p.C0;
    GemmArgs g = p.args(C.data(), acc);
    dim3 grid(cdiv(p.N, GEMM_BN), cdiv(p.M, GEMM_BM));
    TLAUNCH(grid, GEMM_THREADS, 0, gemm_f32_kernel)(g, p.Bf.data());
    std::vector<double> ref = reference(p, p.Bf, acc, false, ident);
    std::string what = kt_fmt("%s M%d N%d K%d%s %s", layout_name(p.lay), p.M, p.N, p.K, acc ? " acc" : "", tag.c_str());
    kt_compare("gemm_f32_kernel", C, ref, 1e-6 * p.K, 1e-5, what);
    if (p.M <= GEMV_MAX_M) {  // the few-rows kernel: same reference, and the same bits as the tiled one
        for (int block : {32, 128}) {
            std::vector<float> C2 = p.C0;
            GemmArgs g2 = p.args(C2.data(), acc);
            TLAUNCH(cdiv(p.N, block), block, 0, gemv_f32_kernel)(g2, p.Bf.data());
            kt_compare("gemv_f32_kernel", C2, ref, 1e-6 * p.K, 1e-5, what + kt_fmt(" block%d", block));
            CHECK(!memcmp(C2.data(), C.data(), C.size() * sizeof(float)),
                  "gemv_f32_kernel and gemm_f32_kernel differ in bits (%s)", what.c_str());
        }
    }
    if (out) *out = C;
}

// B stored as 16-bit bits of type T (bf16 or f16)
template <class T>
static void run_wmma(const Problem& p, bool acc, bool bf16, const std::string& tag) {
    std::vector<uint16_t> Bh(p.Bf.size());
    std::vector<float> Bq(p.Bf.size());  // the stored values as floats
    for (size_t i = 0; i < Bh.size(); i++) {
        Bh[i] = bf16 ? beagle::f32_to_bf16(p.Bf[i]) : beagle::f32_to_f16(p.Bf[i]);
        Bq[i] = bf16 ? beagle::bf16_to_f32(Bh[i]) : beagle::f16_to_f32(Bh[i]);
    }
    std::vector<float> C = p.C0;
    GemmArgs g = p.args(C.data(), acc);
    dim3 grid(cdiv(p.N, WMMA_BN), cdiv(p.M, WMMA_BM));
    const char* name;
    if (bf16) {
        name = "gemm_wmma_bf16_kernel";
        TLAUNCH(grid, WMMA_THREADS, 0, gemm_wmma_bf16_kernel)(g, reinterpret_cast<const __nv_bfloat16*>(Bh.data()));
    } else {
        name = "gemm_wmma_f16_kernel";
        TLAUNCH(grid, WMMA_THREADS, 0, gemm_wmma_f16_kernel)(g, reinterpret_cast<const __half*>(Bh.data()));
    }
    std::vector<double> ref = reference(p, Bq, acc, true, bf16 ? round_bf16 : round_f16);
    kt_compare(name, C, ref, 1e-6 * p.K, 1e-5,
               kt_fmt("%s M%d N%d K%d%s %s", layout_name(p.lay), p.M, p.N, p.K, acc ? " acc" : "", tag.c_str()));
}

int main() {
    const int shapes[][3] = {{1, 1, 1}, {1, 37, 64}, {5, 70, 33}, {67, 65, 129}, {64, 64, 16}, {130, 31, 7}, {3, 129, 200},
                             {8, 300, 70}};
    for (auto& s : shapes)
        for (Layout lay : {FWD, BWD_X, BWD_W})
            for (bool acc : {false, true}) {
                if (acc != (lay == BWD_W) && s[0] > 64) continue;  // keep the big shapes to the layer's own mode
                Problem p = make_problem(s[0], s[1], s[2], lay);
                run_f32(p, acc, "");
                run_wmma<__nv_bfloat16>(p, acc, true, "");
                run_wmma<__half>(p, acc, false, "");
            }
    // K = 0: C = 0 (or unchanged when accumulating)
    for (bool acc : {false, true}) {
        Problem p = make_problem(3, 5, 0, FWD);
        run_f32(p, acc, "K=0");
    }
    // shared-memory poisoning and shuffled thread orders
    kt_debug_modes([](const char* mode) {
        Problem p = make_problem(19, 70, 45, FWD);
        run_f32(p, false, mode);
        run_wmma<__nv_bfloat16>(p, true, true, mode);
        run_wmma<__half>(p, false, false, mode);
    });
    // batch invariance: row r of a 77-row product equals the 1-row product of x[r] bit for bit
    {
        Problem big = make_problem(77, 90, 150, FWD);
        std::vector<float> Cbig;
        run_f32(big, false, "batch", &Cbig);
        int bad = 0;
        for (int r : {0, 1, 40, 63, 64, 76}) {
            Problem one = big;
            one.M = 1;
            one.A.assign(big.A.begin() + (size_t)r * big.K, big.A.begin() + (size_t)(r + 1) * big.K);
            one.C0.assign(big.C0.begin() + (size_t)r * big.N, big.C0.begin() + (size_t)(r + 1) * big.N);
            std::vector<float> C1;
            run_f32(one, false, "batch row", &C1);
            bad += memcmp(C1.data(), Cbig.data() + (size_t)r * big.N, big.N * sizeof(float)) != 0;
        }
        CHECK(bad == 0, "gemm_f32_kernel: %d rows differ between batch and single-row products", bad);
    }
    return kt_finish("test_emu_kernels_gemm");
}
