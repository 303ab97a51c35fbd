// bench_matmul.cpp: micro-benchmark of cpu_matmul (src/backend/cpu/matmul.cpp): decode (T = 1) GB/s
// against measured read bandwidth, and prefill (T = 128, ...) GFLOP/s, per ISA, activation width
// (int16 / int8, quantized weights only) and thread count, for single SmolLM2-135M shapes and the whole
// model's weight set (30 layers + Q8_0 lm_head, ~98 MB); "packed" variants use the row-group copy of
// the ISA (cpu_pack_weight). --sweep: per variant, the whole model's matmuls at T = 1, 2, 4, 8, 16 with
// each matrix timed alone in model order and the best of the rounds kept per matrix, then summed (a
// busy machine preempts whole rounds, rarely one 10-100 us call: the sum estimates a quiet machine).
// --sizes: decode (T = 1) of sets of SmolLM2 layers in Q4_1 and in Q8_0, packed, from 5 to 90 layers (11-340
// MB), each against the read probe over the same bytes: where the set stops fitting the machine's
// share of its last-level cache, both fall to the DRAM rate (bench-types' ratios between files of
// different sizes include that step, not only the kernels').
// Build and run: bash scripts/bench_matmul.sh [--quick] [--threads N] [--model-only] [--sweep] [--sizes]
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/common.h"

using namespace beagle;

struct Mat {
    DType dt;
    int64_t rows, cols;
    std::vector<uint8_t> bytes;
    Weight W;
};

static Mat make_mat(DType dt, int64_t rows, int64_t cols, std::mt19937& g) {
    Mat m{dt, rows, cols, {}, {}};
    m.bytes.resize(dtype_row_bytes(dt, cols) * rows);
    for (auto& b : m.bytes) b = (uint8_t)g();
    // sane fp16 scales: put a small positive half at every block start
    size_t bs = dt == DType::Q8_0 ? 34 : dt == DType::Q4_0 ? 18 : dt == DType::Q4_1 ? 20 : 0;
    if (bs)
        for (size_t o = 0; o + bs <= m.bytes.size(); o += bs) {
            uint16_t h = f32_to_f16(0.01f);
            memcpy(&m.bytes[o], &h, 2);
            if (dt == DType::Q4_1) memcpy(&m.bytes[o + 2], &h, 2);
        }
    // float weights: small normal numbers (random bytes would be NaN/denormal-heavy and slow)
    for (size_t i = 0; dt == DType::F32 && i < m.bytes.size() / 4; i++)
        ((float*)m.bytes.data())[i] = (float)((int)(g() % 2001) - 1000) * 1e-5f;
    for (size_t i = 0; (dt == DType::F16 || dt == DType::BF16) && i < m.bytes.size() / 2; i++) {
        float v = (float)((int)(g() % 2001) - 1000) * 1e-5f;
        uint16_t h = dt == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
        memcpy(&m.bytes[2 * i], &h, 2);
    }
    m.W.data = m.bytes.data();
    m.W.dtype = dt;
    m.W.rows = rows;
    m.W.cols = cols;
    return m;
}

// Re-lay the quantized matrices of `mats` in row groups of the current ISA (packed) or drop them.
static void set_packed(std::vector<Mat>& mats, bool packed, std::vector<std::vector<uint8_t>>& store) {
    store.clear();
    store.reserve(mats.size());
    for (Mat& m : mats) {
        m.W.packed = nullptr;
        m.W.packed_rows = 0;
        if (!packed || !cpu_can_pack(m.dt)) continue;
        store.push_back(cpu_pack_weight(m.W, cpu_pack_rows()));
        m.W.packed = store.back().data();
        m.W.packed_rows = cpu_pack_rows();
    }
}

// Seconds of the whole set at T tokens: each matrix timed alone, in order, best of `reps` per matrix, summed.
static double time_set_per_matrix(std::vector<Mat>& mats, int T, ThreadPool& pool, int reps) {
    int64_t maxc = 0, maxr = 0;
    for (auto& m : mats) maxc = std::max(maxc, m.cols), maxr = std::max(maxr, m.rows);
    std::vector<float> x((size_t)T * maxc), y((size_t)T * maxr);
    std::mt19937 g(1);
    for (auto& v : x) v = (float)((int)(g() % 2001) - 1000) / 1000.0f;
    auto clock = [&]() {
        if (pool.size() > 1) return now_seconds();
        timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    };
    std::vector<double> best(mats.size(), 1e30);
    for (int r = 0; r < reps; r++)
        for (size_t i = 0; i < mats.size(); i++) {
            double t0 = clock();
            cpu_matmul(y.data(), x.data(), mats[i].W, T, pool);
            best[i] = std::min(best[i], clock() - t0);
        }
    double sum = 0;
    for (double b : best) sum += b;
    return sum;
}

// Best-of read bandwidth over `bytes` with the pool's threads (GB/s).
static double read_bandwidth(ThreadPool& pool, size_t bytes) {
    std::vector<uint8_t> buf(bytes, 1);
    double best = 1e30;
    std::vector<long long> sink(pool.size());
    for (int it = 0; it < 10; it++) {
        double t0 = now_seconds();
        pool.parallel_for((int64_t)(bytes / 4096), [&](int64_t b, int64_t e, int tid) {
            __m256i a0 = _mm256_setzero_si256(), a1 = a0;
            for (int64_t i = b * 4096; i < e * 4096; i += 64) {
                a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i*)(buf.data() + i)));
                a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i*)(buf.data() + i + 32)));
            }
            sink[tid] += _mm256_extract_epi64(_mm256_add_epi64(a0, a1), 0);
        });
        double s = now_seconds() - t0;
        if (s < best) best = s;
    }
    return bytes / best / 1e9;
}

// Seconds per call over the matrices (best of `reps` rounds, each round calls every matrix once).
static double time_set(std::vector<Mat>& mats, int T, ThreadPool& pool, int reps) {
    int64_t maxc = 0, maxr = 0;
    for (auto& m : mats) maxc = std::max(maxc, m.cols), maxr = std::max(maxr, m.rows);
    std::vector<float> x((size_t)T * maxc), y((size_t)T * maxr);
    std::mt19937 g(1);
    for (auto& v : x) v = (float)((int)(g() % 2001) - 1000) / 1000.0f;
    for (auto& m : mats) cpu_matmul(y.data(), x.data(), m.W, T, pool);  // warm up
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        for (auto& m : mats) cpu_matmul(y.data(), x.data(), m.W, T, pool);
        best = std::min(best, now_seconds() - t0);
    }
    return best;
}

int main(int argc, char** argv) {
    bool quick = false, model_only = false, sweep = false, sizes = false;
    std::vector<int> thread_counts = {1, 2};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = true;
        else if (strcmp(argv[i], "--model-only") == 0) model_only = true;
        else if (strcmp(argv[i], "--sweep") == 0) sweep = true;
        else if (strcmp(argv[i], "--sizes") == 0) sizes = true;
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) thread_counts = {atoi(argv[++i])};
        else {
            fprintf(stderr, "usage: %s [--quick] [--threads N] [--model-only] [--sweep] [--sizes]\n", argv[0]);
            return 2;
        }
    }
    std::mt19937 g(123);
    std::vector<const char*> isas = {"avx2"};
    if (cpu_has_avx512_vnni()) isas.push_back("avx512");
    struct Variant { const char* isa; int bits; bool packed; };  // ISA x activation bits x row groups
    std::vector<Variant> variants;
    for (const char* isa : isas) {
        for (int bits : {16, 8}) variants.push_back({isa, bits, false});
        variants.push_back({isa, 16, true});
    }

    struct Shape { const char* name; DType dt; int64_t rows, cols; };
    std::vector<Shape> shapes = {{"ffn_down Q4_1 576x1536", DType::Q4_1, 576, 1536},
                                 {"ffn_up   Q4_1 1536x576", DType::Q4_1, 1536, 576},
                                 {"lm_head  Q8_0 49152x576", DType::Q8_0, 49152, 576},
                                 {"ffn_up   Q4_0 1536x576", DType::Q4_0, 1536, 576},
                                 {"ffn_up   F16  1536x576", DType::F16, 1536, 576},
                                 {"ffn_up   BF16 1536x576", DType::BF16, 1536, 576},
                                 {"ffn_up   F32  1536x576", DType::F32, 1536, 576}};
    const int64_t layer_shapes[7][2] = {{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}};
    if (sizes) {
        for (int nt : thread_counts) {
            ThreadPool pool(nt);
            for (const char* isa : isas) {
                cpu_matmul_set_isa(isa);
                cpu_matmul_set_act_bits(16);
                for (int L : {5, 10, 20, 30, 40, 60, 90})
                    for (DType dt : {DType::Q4_1, DType::Q8_0}) {
                        std::vector<Mat> set;
                        for (int l = 0; l < L; l++)
                            for (auto& s : layer_shapes) set.push_back(make_mat(dt, s[0], s[1], g));
                        size_t bytes = 0;
                        for (auto& m : set) bytes += m.bytes.size();
                        std::vector<std::vector<uint8_t>> store;
                        set_packed(set, true, store);
                        const double sec = time_set(set, 1, pool, quick ? 5 : 20);
                        const double probe = read_bandwidth(pool, bytes);
                        printf("sizes t%d %-6s %2d layers %-4s %6.1f MB: decode %5.1f GB/s, read probe %5.1f GB/s (%.2f)\n", nt,
                               isa, L, dtype_name(dt), bytes / 1e6, bytes / sec / 1e9, probe, bytes / sec / 1e9 / probe);
                        fflush(stdout);
                    }
            }
        }
        cpu_matmul_set_isa("auto");
        return 0;
    }
    // whole SmolLM2-135M weight set: 30 x (q, k, v, o, gate, up, down) in Q4_1 + lm_head Q8_0
    std::vector<Mat> model;
    size_t model_bytes = 0;
    for (int l = 0; l < 30; l++) {
        for (auto& s : layer_shapes) model.push_back(make_mat(DType::Q4_1, s[0], s[1], g));
    }
    model.push_back(make_mat(DType::Q8_0, 49152, 576, g));
    for (auto& m : model) model_bytes += m.bytes.size();
    std::vector<std::vector<uint8_t>> packs;

    if (sweep) {
        for (int nt : thread_counts) {
            ThreadPool pool(nt);
            for (const Variant& v : variants) {
                if (v.bits != 16) continue;
                cpu_matmul_set_isa(v.isa);
                cpu_matmul_set_act_bits(16);
                set_packed(model, v.packed, packs);
                std::vector<double> sec;
                for (int T : {1, 2, 4, 8, 16}) sec.push_back(time_set_per_matrix(model, T, pool, quick ? 5 : 15));
                printf("sweep t%d %-6s %-8s T=1 %.2f ms (%.1f GB/s); cost T=2/4/8/16 %.2f/%.2f/%.2f/%.2f x T=1\n", nt,
                       v.isa, v.packed ? "packed" : "unpacked", sec[0] * 1e3, model_bytes / sec[0] / 1e9, sec[1] / sec[0],
                       sec[2] / sec[0], sec[3] / sec[0], sec[4] / sec[0]);
                fflush(stdout);
            }
        }
        cpu_matmul_set_isa("auto");
        return 0;
    }

    for (int nt : thread_counts) {
        ThreadPool pool(nt);
        double bw = read_bandwidth(pool, model_bytes);
        printf("threads %d: read bandwidth over %.1f MB: %.1f GB/s\n", nt, model_bytes / 1e6, bw);
        for (const Variant& v : variants) {
            cpu_matmul_set_isa(v.isa);
            cpu_matmul_set_act_bits(v.bits);
            char tag[32];
            snprintf(tag, sizeof tag, "%s int%d%s", v.isa, v.bits, v.packed ? " packed" : "");
            for (auto& s : shapes) {
                if (model_only || (v.bits == 8 && !dtype_is_quantized(s.dt))) continue;  // float weights: no bits
                std::vector<Mat> one;
                one.push_back(make_mat(s.dt, s.rows, s.cols, g));
                std::vector<std::vector<uint8_t>> one_pack;
                set_packed(one, v.packed, one_pack);
                double bytes = (double)one[0].bytes.size();
                for (int T : {1, 128}) {
                    if (quick && T == 128 && s.dt != DType::Q4_1) continue;
                    double sec = time_set(one, T, pool, T == 1 ? 50 : 5);
                    double gflops = 2.0 * s.rows * s.cols * T / sec / 1e9;
                    printf("  %-12s t%d %-24s T=%-3d %9.1f us  %6.1f GFLOP/s  %5.1f GB/s of weights\n", tag, nt, s.name,
                           T, sec * 1e6, gflops, bytes / sec / 1e9);
                }
            }
            set_packed(model, v.packed, packs);
            double dec = time_set(model, 1, pool, quick ? 3 : 10);
            printf("  %-12s t%d whole model T=1 (decode): %.2f ms/token, %.1f GB/s = %.0f%% of read bandwidth\n", tag, nt,
                   dec * 1e3, model_bytes / dec / 1e9, 100.0 * model_bytes / dec / 1e9 / bw);
            for (int T : {16, 64, 128, 512}) {
                if (quick && T != 128) continue;
                double sec = time_set(model, T, pool, T <= 128 ? 4 : 2);
                double flops = 0;
                for (auto& m : model) flops += 2.0 * m.rows * m.cols * T;
                printf("  %-12s t%d whole model T=%-3d (prefill): %.2f ms/token, %.1f GFLOP/s\n", tag, nt, T,
                       sec * 1e3 / T, flops / sec / 1e9);
            }
        }
    }
    cpu_matmul_set_isa("auto");
    cpu_matmul_set_act_bits(16);
    return 0;
}
