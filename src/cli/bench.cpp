// bench.cpp: `beagle bench`: prefill and decode speed of the target on this machine, the read
// bandwidth measured here, decode speed as a fraction of the bandwidth roofline (bandwidth / weight
// bytes read per token), and the verify cost curve: one target forward of T tokens relative to T = 1,
// which bounds what speculative decoding can gain here. Writes one JSON object (-o FILE, atomically).
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
#include "../io/json_write.h"
#include "args.h"
#include "commands.h"

namespace beagle {

// Best-of-`reps` read bandwidth (bytes/s) over a buffer much larger than the caches, n threads.
static double measure_read_bandwidth(int n_threads, size_t bytes, int reps) {
    size_t n = bytes / sizeof(float);
    float* buf = nullptr;
    if (posix_memalign((void**)&buf, 64, n * sizeof(float)) != 0) fail("out of memory for the bandwidth buffer");
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
        for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
            b += t->nbytes;
    b += w.out_norm.nbytes + w.lm_head.nbytes + w.tok_embd.row_bytes();
    return b;
}

int cmd_bench(int argc, char** argv) {
    std::string model, tok_path, out;
    long threads = 2, n_prompt = 128, n_gen = 64, reps = 3;
    Args a("bench", "-m MODEL [options]",
           "Measure prefill and decode speed, the machine's read bandwidth and the decode roofline fraction.\n"
           "Prints one JSON object (and writes it to -o FILE).");
    a.str("-m,--model", &model, "model file");
    a.str("-z,--tokenizer", &tok_path, "tokenizer file if the model has none");
    a.str("-o,--output", &out, "write the JSON here too");
    a.integer("-t,--threads", &threads, "threads for the main measurement (decode is also run with 1)");
    a.integer("--prompt-tokens", &n_prompt, "prefill length");
    a.integer("--gen-tokens", &n_gen, "tokens decoded per measurement");
    a.integer("--reps", &reps, "repetitions (best is reported)");
    if (!a.parse(argc, argv)) return 0;
    if (model.empty()) fail("beagle bench: -m MODEL is required (see --help)");
    if (threads < 1 || n_prompt < 1 || n_gen < 1 || reps < 1) fail("beagle bench: -t, --prompt-tokens, --gen-tokens, --reps must be >= 1");

    // A real English prompt, repeated to length.
    const char* text =
        "The history of the city begins with a small settlement on the river, where traders met to exchange grain, "
        "salt and wool. Over the centuries the market grew into a town with walls, a cathedral and a university. ";
    std::vector<double> prefill_tps, decode_tps_n, decode_tps_1;
    const std::vector<int> verify_T = {1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64};
    std::vector<double> verify_s(verify_T.size(), 1e30);
    SamplingParams greedy;
    greedy.temperature = 0;
    for (int pass = 0; pass < 2; pass++) {
        int nt = pass == 0 ? (int)threads : 1;
        Session s(model, tok_path, nt, (int)(n_prompt + std::max(n_gen, 64L) + 8), 64);
        std::string p;
        std::vector<int> ids;
        while ((long)ids.size() < n_prompt) {
            p += text;
            ids = s.tokenize_prompt(p, false, "");
        }
        ids.resize(n_prompt);
        for (int r = 0; r < reps; r++) {
            GenStats st;
            s.generate_plain(ids, (int)n_gen, greedy, nullptr, &st);
            if (st.gen_tokens < 2) fail("bench: generation stopped after %d tokens", st.gen_tokens);
            // decode rate over the tokens produced by single-token forwards
            double dec = st.target_passes / st.decode_s;
            if (pass == 0) {
                prefill_tps.push_back(st.prompt_tokens / st.prefill_s);
                decode_tps_n.push_back(dec);
            } else {
                decode_tps_1.push_back(dec);
            }
            fprintf(stderr, "bench: threads %d rep %d: prefill %.1f tok/s, decode %.2f tok/s\n", nt, r,
                    st.prompt_tokens / st.prefill_s, dec);
        }
        if (pass == 0) {
            // Verify cost: one forward of T tree tokens (a chain: causal tree mask) after the prompt, as a
            // speculative round's verify pass is. Best of reps + 2 (the short ones are noisy).
            Llama& m = *s.llama;
            m.truncate(0);
            m.prefill(ids.data(), (int)ids.size(), nullptr);
            for (size_t k = 0; k < verify_T.size(); k++) {
                int T = verify_T[k];
                if (T > m.max_batch()) break;
                std::vector<int> toks(T);
                for (int i = 0; i < T; i++) toks[i] = ids[i % ids.size()];
                verify_s[k] = time_verify(m, toks.data(), T, (int)reps + 2);
                fprintf(stderr, "bench: threads %d verify T %2d: %.2f ms (%.2f x T = 1)\n", nt, T, verify_s[k] * 1e3,
                        verify_s[k] / verify_s[0]);
            }
        }
    }
    double bw = measure_read_bandwidth((int)threads, (size_t)512 << 20, 5);
    double bw1 = measure_read_bandwidth(1, (size_t)512 << 20, 5);
    std::unique_ptr<ModelFile> mf = load_model(model);
    double wb = weight_bytes_per_token(*mf);
    double best_pf = *std::max_element(prefill_tps.begin(), prefill_tps.end());
    double best_dn = *std::max_element(decode_tps_n.begin(), decode_tps_n.end());
    double best_d1 = *std::max_element(decode_tps_1.begin(), decode_tps_1.end());
    double roof = bw / wb;
    // "cost": verify(T) / verify(1) = the mean acceptance length tau a T-token verify needs to break even
    // with a free draft; "max_speedup": T / cost, what a draft whose every token is accepted would reach.
    Json js;
    js["model"] = model;
    js["threads"] = threads;
    js["prompt_tokens"] = n_prompt;
    js["gen_tokens"] = n_gen;
    js["prefill_tok_s"] = rounded(best_pf, 3);
    js["decode_tok_s"] = rounded(best_dn, 3);
    js["decode_tok_s_1t"] = rounded(best_d1, 3);
    js["bandwidth_gb_s"] = rounded(bw / 1e9, 3);
    js["bandwidth_gb_s_1t"] = rounded(bw1 / 1e9, 3);
    js["weight_bytes_per_token"] = (int64_t)std::llround(wb);
    js["roofline_tok_s"] = rounded(roof, 3);
    js["roofline_fraction"] = rounded(best_dn / roof, 4);
    js["roofline_fraction_1t"] = rounded(best_d1 / (bw1 / wb), 4);
    js["verify_cost"] = Json::array();
    for (size_t k = 0; k < verify_T.size() && verify_s[k] < 1e29; k++)
        js["verify_cost"].push_back({{"T", verify_T[k]}, {"ms", rounded(verify_s[k] * 1e3, 3)},
                                     {"cost", rounded(verify_s[k] / verify_s[0], 3)},
                                     {"max_speedup", rounded(verify_T[k] * verify_s[0] / verify_s[k], 3)}});
    js["peak_rss_bytes"] = peak_rss_bytes();
    const std::string report = json_text(js, 2) + "\n";
    fputs(report.c_str(), stdout);
    if (!out.empty()) write_file_atomic(out, report.data(), report.size());
    return 0;
}

}  // namespace beagle
