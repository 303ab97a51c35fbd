// bench.cpp: `beagle bench`: prefill and decode speed of the target on this machine, the read
// bandwidth of this machine, decode speed as a fraction of the bandwidth roofline (bandwidth / weight
// bytes read per token), and the verify cost curve: one target forward of T tokens relative to T = 1,
// which bounds what speculative decoding can gain here; on every matmul ISA path the CPU can run
// (cpu_matmul_set_isa), one object per path. On the CUDA backend (--backend cuda, the default of the
// CUDA builds) one path named "cuda": the device's speed and verify cost, no CPU roofline or CPU-time
// curve (they would describe the host). Writes one JSON object (-o FILE, atomically).
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../core/common.h"
#include "../core/threadpool.h"
#include "../decode/session.h"
#include "../decode/verify_cost.h"
#include "../backend/backend.h"
#include "../backend/cpu/matmul.h"
#include "../io/json_write.h"
#include "args.h"
#include "commands.h"

namespace beagle {

// Best-of-`reps` read bandwidth (bytes/s) over a buffer much larger than the caches, n threads. The buffer
// is alloc_large memory, as the packed weights are (2 MiB pages unless BEAGLE_HUGEPAGES=0), so the roofline
// is the stream the weights could have.
static double measure_read_bandwidth(int n_threads, size_t bytes, int reps) {
    size_t n = bytes / sizeof(float);
    float* buf = (float*)alloc_large(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);
    ThreadPool pool(n_threads);
    std::vector<float> sink(n_threads);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        pool.parallel_for((int64_t)(n / 64), [&](int64_t b, int64_t e, int th) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t i = b; i < e; i++) {
                const float* p = buf + i * 64;
                a0 = _mm256_add_ps(a0, _mm256_add_ps(_mm256_load_ps(p), _mm256_load_ps(p + 8)));
                a1 = _mm256_add_ps(a1, _mm256_add_ps(_mm256_load_ps(p + 16), _mm256_load_ps(p + 24)));
                a2 = _mm256_add_ps(a2, _mm256_add_ps(_mm256_load_ps(p + 32), _mm256_load_ps(p + 40)));
                a3 = _mm256_add_ps(a3, _mm256_add_ps(_mm256_load_ps(p + 48), _mm256_load_ps(p + 56)));
            }
            float tmp[8];
            _mm256_storeu_ps(tmp, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            sink[th] += tmp[0];
        });
        double dt = now_seconds() - t0;
        best = std::max(best, (double)(n / 64 * 64 * sizeof(float)) / dt);
    }
    free(buf);
    if (sink[0] == 12345.678f) fprintf(stderr, " ");  // keep the reads alive
    return best;
}

// Bytes of weights read to produce one token: every layer matrix, the norms, the LM head, and one
// embedding row.
static double weight_bytes_per_token(const ModelFile& mf) {
    const LlamaWeights& w = mf.weights;
    double b = 0;
    for (const LayerWeights& l : w.layers)
        for (const Tensor* t : l.all()) b += t->nbytes;
    b += w.out_norm.nbytes + w.lm_head.nbytes + w.tok_embd.row_bytes();
    return b;
}

// One ISA path's measurements (the matmul kernels cpu_matmul_set_isa chose; the model is loaded after
// the choice, so its weights are packed for that path): prefill and decode speed, decode as a fraction
// of the roofline, and the verify cost curve.
static Json bench_path(const std::string& model, const std::string& tok_path, int threads, int n_prompt, int n_gen,
                       int reps, double bw, double bw1, double wb, bool device) {
    const char* isa = device ? "cuda" : cpu_matmul_isa();
    // A real English prompt, repeated to length.
    const char* text =
        "The history of the city begins with a small settlement on the river, where traders met to exchange grain, "
        "salt and wool. Over the centuries the market grew into a town with walls, a cathedral and a university. ";
    std::vector<double> prefill_tps, decode_tps_n, decode_tps_1;
    size_t huge_bytes = 0;
    std::vector<int> verify_T;  // 1..16, then the larger trees
    for (int T = 1; T <= 16; T++) verify_T.push_back(T);
    for (int T : {24, 32, 48, 64}) verify_T.push_back(T);
    std::vector<double> verify_s(verify_T.size(), 1e30), verify_cpu_1t(16, 1e30);
    SamplingParams greedy;
    greedy.temperature = 0;
    for (int pass = 0; pass < (device ? 1 : 2); pass++) {
        int nt = pass == 0 ? threads : 1;
        Session s(model, tok_path, nt, n_prompt + std::max(n_gen, 64) + 8, 64);
        if (pass == 0) huge_bytes = anon_huge_bytes();
        std::string p;
        std::vector<int> ids;
        while ((int)ids.size() < n_prompt) {
            p += text;
            ids = s.tokenize_prompt(p, false, "");
        }
        ids.resize(n_prompt);
        for (int r = 0; r < reps; r++) {
            GenStats st;
            s.generate_plain(ids, n_gen, greedy, nullptr, &st);
            if (st.gen_tokens < 2) fail("bench: generation stopped after %d tokens", st.gen_tokens);
            // decode rate over the tokens produced by single-token forwards
            double dec = st.target_passes / st.decode_s;
            if (pass == 0) {
                prefill_tps.push_back(st.prompt_tokens / st.prefill_s);
                decode_tps_n.push_back(dec);
            } else {
                decode_tps_1.push_back(dec);
            }
            fprintf(stderr, "bench: %s threads %d rep %d: prefill %.1f tok/s, decode %.2f tok/s\n", isa, nt, r,
                    st.prompt_tokens / st.prefill_s, dec);
        }
        // Verify cost: one forward of T tree tokens (a chain: causal tree mask) after the prompt, as a
            // speculative round's verify pass is. Best of reps + 2 (the short ones are noisy).
        // With one thread the same curve (T <= 16) in the thread's CPU time: on a busy machine, where wall
        // times of two threads mostly measure the scheduler, this is the number that holds.
        Llama& m = *s.llama;
        m.truncate(0);
        m.prefill(ids.data(), (int)ids.size(), nullptr);
        for (size_t k = 0; k < verify_T.size(); k++) {
            int T = verify_T[k];
            if (T > m.max_batch() || (pass == 1 && T > 16)) break;
            std::vector<int> toks(T);
            for (int i = 0; i < T; i++) toks[i] = ids[i % ids.size()];
            if (pass == 0)
                verify_s[k] = time_verify(m, toks.data(), T, reps + 2);
            else
                verify_cpu_1t[T - 1] = time_verify(m, toks.data(), T, reps + 2, thread_cpu_seconds);
        }
    }
    double best_pf = *std::max_element(prefill_tps.begin(), prefill_tps.end());
    double best_dn = *std::max_element(decode_tps_n.begin(), decode_tps_n.end());
    double roof = bw / wb;
    // "cost": verify(T) / verify(1) = the mean acceptance length tau a T-token verify needs to break even
    // with a free draft; "max_speedup": T / cost, what a draft whose every token is accepted would reach.
    Json js;
    js["isa"] = isa;
    js["prefill_tok_s"] = rounded(best_pf, 3);
    js["decode_tok_s"] = rounded(best_dn, 3);
    if (!device) {
        double best_d1 = *std::max_element(decode_tps_1.begin(), decode_tps_1.end());
        js["decode_tok_s_1t"] = rounded(best_d1, 3);
        js["roofline_tok_s"] = rounded(roof, 3);
        js["roofline_fraction"] = rounded(best_dn / roof, 4);
        js["roofline_fraction_1t"] = rounded(best_d1 / (bw1 / wb), 4);
        js["huge_page_bytes"] = (int64_t)huge_bytes;  // the process's memory in 2 MiB pages with the model loaded
    }
    js["verify_cost"] = Json::array();
    for (size_t k = 0; k < verify_T.size() && verify_s[k] < 1e29; k++)
        js["verify_cost"].push_back({{"T", verify_T[k]}, {"ms", rounded(verify_s[k] * 1e3, 3)},
                                     {"cost", rounded(verify_s[k] / verify_s[0], 3)},
                                     {"max_speedup", rounded(verify_T[k] * verify_s[0] / verify_s[k], 3)}});
    if (device) return js;
    js["decode_tok_s_1t_cpu"] = rounded(1.0 / verify_cpu_1t[0], 3);  // one forward of 1 token, CPU time
    js["verify_cost_1t_cpu"] = Json::array();
    for (int T = 1; T <= 16 && verify_cpu_1t[T - 1] < 1e29; T++)
        js["verify_cost_1t_cpu"].push_back({{"T", T}, {"ms", rounded(verify_cpu_1t[T - 1] * 1e3, 3)},
                                            {"cost", rounded(verify_cpu_1t[T - 1] / verify_cpu_1t[0], 3)}});
    return js;
}

int cmd_bench(int argc, char** argv) {
    std::string model, tok_path, out, isas = "all", backend;
    long threads = 2, n_prompt = 128, n_gen = 64, reps = 3;
    Args a("bench", "-m MODEL [options]",
           "Measure prefill and decode speed, the machine's read bandwidth, the decode roofline fraction and the\n"
           "verify cost of T = 1..16 (and 24..64) tokens, on every matmul ISA path this CPU can run (AVX2, and\n"
           "AVX-512 VNNI where present). Prints one JSON object (and writes it to -o FILE): \"paths\" holds one\n"
           "object per path; the top-level speed fields repeat the path this CPU uses by default.\n"
           "Environment: BEAGLE_ISA=avx2 makes avx2 the default path; BEAGLE_HUGEPAGES=0 keeps weights, caches and\n"
           "the bandwidth probe in 4 KiB pages (default: 2 MiB pages where the kernel allows, reported as huge_pages).");
    a.str("-m,--model", &model, "model file");
    a.str("-z,--tokenizer", &tok_path, "tokenizer file if the model has none");
    a.str("-o,--output", &out, "write the JSON here too");
    a.integer("-t,--threads", &threads, "threads for the main measurement (decode is also run with 1)");
    a.integer("--prompt-tokens", &n_prompt, "prefill length");
    a.integer("--gen-tokens", &n_gen, "tokens decoded per measurement");
    a.integer("--reps", &reps, "repetitions (best is reported)");
    a.str("--isa", &isas, "matmul paths to measure: all (every path this CPU runs), auto (the default one), avx2, avx512, or a comma list");
    a.str("--backend", &backend, strfmt("cpu | cuda (default: %s in this build); cuda measures one path, the device", default_backend()).c_str());
    if (!a.parse(argc, argv)) return 0;
    if (!backend.empty()) select_backend(backend);
    const bool device = selected_backend() == "cuda";
    if (model.empty()) fail("beagle bench: -m MODEL is required (see --help)");
    if (threads < 1 || n_prompt < 1 || n_gen < 1 || reps < 1) fail("beagle bench: -t, --prompt-tokens, --gen-tokens, --reps must be >= 1");

    // the paths: each name checked by cpu_matmul_set_isa (Error for an unknown one or one this CPU lacks)
    const std::string chosen = cpu_matmul_isa();  // the default path (BEAGLE_ISA, else the best this CPU has)
    std::vector<std::string> paths;
    if (device) {
        paths.push_back(chosen);  // the host's ISA for what runs on the host; the matmuls run on the device
    } else if (isas == "all") {
        paths.push_back("avx2");
        if (cpu_has_avx512_vnni()) paths.push_back("avx512");
    } else {
        for (size_t b = 0; b <= isas.size();) {
            size_t e = isas.find(',', b);
            if (e == std::string::npos) e = isas.size();
            std::string name = isas.substr(b, e - b);
            cpu_matmul_set_isa(name.c_str());
            if (std::find(paths.begin(), paths.end(), cpu_matmul_isa()) == paths.end()) paths.push_back(cpu_matmul_isa());
            b = e + 1;
        }
    }
    // the host's read bandwidth: the CPU paths' roofline (the CUDA path reports none)
    double bw = device ? 0 : measure_read_bandwidth((int)threads, (size_t)512 << 20, 5);
    double bw1 = device ? 0 : measure_read_bandwidth(1, (size_t)512 << 20, 5);
    double wb;
    {
        std::unique_ptr<ModelFile> mf = load_model(model);
        wb = weight_bytes_per_token(*mf);
    }
    Json js;
    js["model"] = model;
    js["backend"] = device ? "cuda" : "cpu";
    js["threads"] = threads;
    js["prompt_tokens"] = n_prompt;
    js["gen_tokens"] = n_gen;
    if (!device) {
        js["bandwidth_gb_s"] = rounded(bw / 1e9, 3);
        js["bandwidth_gb_s_1t"] = rounded(bw1 / 1e9, 3);
        js["huge_pages"] = huge_pages_enabled();  // BEAGLE_HUGEPAGES (alloc_large in common.h)
    }
    js["weight_bytes_per_token"] = (int64_t)std::llround(wb);
    js["paths"] = Json::array();
    for (const std::string& isa : paths) {
        cpu_matmul_set_isa(isa.c_str());
        Json p = bench_path(model, tok_path, (int)threads, (int)n_prompt, (int)n_gen, (int)reps, bw, bw1, wb, device);
        const Json& vc = p["verify_cost"];
        auto cost = [&](const Json& c, int T) {
            for (const Json& v : c)
                if (v["T"] == T) return v["cost"].get<double>();
            return 0.0;
        };
        if (device) {
            fprintf(stderr, "bench: cuda   decode %.1f tok/s, prefill %.1f tok/s, verify cost T = 2/4/8/16/64: "
                    "%.2f/%.2f/%.2f/%.2f/%.2f decode steps\n", p["decode_tok_s"].get<double>(),
                    p["prefill_tok_s"].get<double>(), cost(vc, 2), cost(vc, 4), cost(vc, 8), cost(vc, 16), cost(vc, 64));
            for (const char* k : {"isa", "prefill_tok_s", "decode_tok_s", "verify_cost"}) js[k] = p[k];
            js["paths"].push_back(p);
            continue;
        }
        const Json& vc1 = p["verify_cost_1t_cpu"];
        fprintf(stderr, "bench: %-6s decode %.1f tok/s (%.2f of the roofline %.0f tok/s), prefill %.1f tok/s, verify cost "
                "T = 2/4/8/16: %.2f/%.2f/%.2f/%.2f decode steps; 1 thread, CPU time: decode %.1f tok/s, verify cost "
                "%.2f/%.2f/%.2f/%.2f\n", isa.c_str(), p["decode_tok_s"].get<double>(), p["roofline_fraction"].get<double>(),
                p["roofline_tok_s"].get<double>(), p["prefill_tok_s"].get<double>(), cost(vc, 2), cost(vc, 4), cost(vc, 8),
                cost(vc, 16), p["decode_tok_s_1t_cpu"].get<double>(), cost(vc1, 2), cost(vc1, 4), cost(vc1, 8), cost(vc1, 16));
        if (isa == chosen)
            for (const char* k : {"isa", "prefill_tok_s", "decode_tok_s", "decode_tok_s_1t", "roofline_tok_s",
                                  "roofline_fraction", "roofline_fraction_1t", "verify_cost"})
                js[k] = p[k];
        js["paths"].push_back(p);
    }
    cpu_matmul_set_isa(chosen.c_str());
    if (!js.contains("isa")) js["isa"] = js["paths"][0]["isa"];  // the default path was not asked for: the first one
    if (!js.contains("decode_tok_s"))
        for (const char* k : {"prefill_tok_s", "decode_tok_s", "decode_tok_s_1t", "roofline_tok_s", "roofline_fraction",
                              "roofline_fraction_1t", "verify_cost"})
            js[k] = js["paths"][0][k];
    js["peak_rss_bytes"] = peak_rss_bytes();
    const std::string report = json_text(js, 2) + "\n";
    fputs(report.c_str(), stdout);
    if (!out.empty()) write_file_atomic(out, report.data(), report.size());
    return 0;
}

}  // namespace beagle
