// testlib.h: the tiny assertion library of the C++ tests. A test binary exits 0 iff every CHECK
// held; each failed CHECK prints file:line and the message. A part that cannot run (a file missing)
// is reported with SKIP_PART and makes the test exit 77 (SKIP to scripts/run_tests.sh), not 0.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/common.h"

static int g_checks = 0, g_failures = 0, g_skips = 0;

// A part of the test that could not run, e.g. "model X not found (make model)": printed as a SKIP
// line; test_summary then returns 77 unless a check failed.
#define SKIP_PART(...)            \
    do {                          \
        g_skips++;                \
        printf("SKIP: " __VA_ARGS__); \
        printf("\n");            \
    } while (0)

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        g_checks++;                                                         \
        if (!(cond)) {                                                      \
            g_failures++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, " " __VA_ARGS__);                               \
            fprintf(stderr, "\n");                                          \
        }                                                                   \
    } while (0)

// |got - want| <= atol + rtol * |want|; an optional string literal names the value.
#define CHECK_CLOSE(got, want, atol, rtol, ...)                                                  \
    do {                                                                                         \
        double g_ = (got), w_ = (want);                                                          \
        CHECK(std::fabs(g_ - w_) <= (atol) + (rtol) * std::fabs(w_), "%s: got %.9g want %.9g", "" __VA_ARGS__, g_, w_); \
    } while (0)

// Expect the expression to throw beagle::Error whose message contains `needle`.
#define CHECK_THROWS(expr, needle)                                                          \
    do {                                                                                    \
        g_checks++;                                                                         \
        bool thrown_ = false;                                                               \
        try { expr; } catch (const beagle::Error& e_) {                                     \
            thrown_ = true;                                                                 \
            if (!strstr(e_.what(), needle)) {                                               \
                g_failures++;                                                               \
                fprintf(stderr, "FAIL %s:%d: message '%s' lacks '%s'\n", __FILE__, __LINE__, e_.what(), needle); \
            }                                                                               \
        }                                                                                   \
        if (!thrown_) { g_failures++; fprintf(stderr, "FAIL %s:%d: %s did not throw\n", __FILE__, __LINE__, #expr); } \
    } while (0)

// True in the ASan + UBSan build (make test-asan, -O1: 5 to 20 times slower). There a test whose cost is
// repetitions (samples of a distribution, seeds of an equivalence) runs every path with fewer of them:
// the sanitizers look for a bad access on each path, the -O2 build of `make test` keeps the statistical power.
static inline bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return true;
#endif
#endif
    return false;
}

// 0 if every check held, 1 if one failed (or none ran), 77 if all held but a part was skipped.
static inline int test_summary(const char* name) {
    printf("%s: %d checks, %d failed, %d parts skipped\n", name, g_checks, g_failures, g_skips);
    if (g_failures != 0 || g_checks == 0) return 1;
    return g_skips ? 77 : 0;
}

// Where the tests find their files: the repository root (BEAGLE_ROOT, as scripts/run_tests.sh sets it;
// else the working directory), its data/models folder with a trailing '/', and the 50 stories prompts
// (test/data/stories_prompts.txt, one per non-empty line).
static inline std::string test_root() {
    const char* root = getenv("BEAGLE_ROOT");
    return root ? root : ".";
}
static inline std::string test_data_dir() { return test_root() + "/data/"; }
static inline std::string test_models_dir() { return test_data_dir() + "models/"; }
static inline std::vector<std::string> test_stories_prompts() {
    std::ifstream pf(test_root() + "/test/data/stories_prompts.txt");
    std::vector<std::string> prompts;
    for (std::string l; std::getline(pf, l);)
        if (!l.empty()) prompts.push_back(l);
    return prompts;
}

// A copy of the llama2.c model file src at dst with every weight scaled by 1 + rel u, u uniform in [-1, 1)
// (xorshift64* from seed, one draw per float): a model of the same shape and vocabulary that agrees with
// the original often but not always (a stand-in draft model). Throws beagle::Error if src cannot be read.
static inline void write_perturbed_llama2c(const std::string& src, const std::string& dst, float rel, uint64_t seed) {
    std::ifstream in(src, std::ios::binary);
    std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (b.size() < 28 + 4) beagle::fail("write_perturbed_llama2c: cannot read %s", src.c_str());
    uint64_t x = seed ? seed : 1;
    for (size_t at = 28; at + 4 <= b.size(); at += 4) {  // after the 7-int header
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        const float u = (float)((x * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1 << 24) * 2 - 1;
        float w;
        memcpy(&w, &b[at], 4);
        w *= 1 + rel * u;
        memcpy(&b[at], &w, 4);
    }
    std::ofstream out(dst, std::ios::binary);
    out.write(b.data(), (std::streamsize)b.size());
    if (!out) beagle::fail("write_perturbed_llama2c: cannot write %s", dst.c_str());
}
