// tool_verify_loop.cpp: one target forward of T tokens (a verify pass: a chain with its tree mask) after
// a 128-token context, repeated N times, for a profiler (perf record) to see where a verify pass spends
// its time on the CPU; prints the best and mean milliseconds and the matmul ISA path (BEAGLE_ISA).
// usage: tool_verify_loop MODEL T N [THREADS]   (docs/benchmarks/cpu.md, notes)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/common.h"
#include "decode/session.h"
#include "decode/verify_cost.h"

using namespace beagle;

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: tool_verify_loop MODEL T N [THREADS]\n");
        return 2;
    }
    try {
        const int T = atoi(argv[2]), reps = atoi(argv[3]), threads = argc > 4 ? atoi(argv[4]) : 2;
        if (T < 1 || T > 64 || reps < 1 || threads < 1) fail("tool_verify_loop: T in 1..64, N >= 1, THREADS >= 1");
        Session s(argv[1], "", threads, 256, 64);
        const int n_ctx = 128;
        std::vector<int> ctx(n_ctx);
        for (int i = 0; i < n_ctx; i++) ctx[i] = (1000 + 7 * i) % s.llama->config().vocab_size;
        Llama& m = *s.llama;
        m.truncate(0);
        m.prefill(ctx.data(), n_ctx, nullptr);
        double best = 1e30, sum = 0;
        for (int r = 0; r < reps; r++) {
            const double t = time_verify(m, ctx.data(), T, 1);  // leaves the cache at n_ctx
            sum += t;
            if (t < best) best = t;
        }
        printf("T=%d isa=%s threads=%d: best %.3f ms, mean %.3f ms over %d passes\n", T, cpu_matmul_isa(), threads,
               best * 1e3, sum / reps * 1e3, reps);
        return 0;
    } catch (const Error& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
