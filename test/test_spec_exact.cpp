// test_spec_exact.cpp: greedy speculative decoding is token-identical to plain greedy decoding.
// stories260K, 50 prompts x 256 tokens: --spec lookup (several n-gram/gamma settings) against the
// plain decoding loop; drafters with a Beagle draft are added in test_spec_exact_draft.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "decode/session.h"
#include "decode/speculative.h"
#include "testlib.h"

using namespace beagle;

int main() {
    const char* sh = getenv("BEAGLE_SHARED");
    std::string M = std::string(sh ? sh : "../shared") + "/data/models/";
    const char* root = getenv("BEAGLE_ROOT");
    std::ifstream pf(std::string(root ? root : ".") + "/test/data/stories_prompts.txt");
    std::vector<std::string> prompts;
    for (std::string l; std::getline(pf, l);)
        if (!l.empty()) prompts.push_back(l);
    CHECK(prompts.size() == 50, "expected 50 prompts, read %zu", prompts.size());
    try {
        Session s(M + "stories260K.bin", M + "tok512.bin", 2, 512, 64);
        SamplingParams greedy;
        greedy.temperature = 0;
        int total_tokens = 0, total_passes = 0, mismatches = 0;
        for (size_t i = 0; i < prompts.size(); i++) {
            std::vector<int> ids = s.encode_prompt(prompts[i], false, "");
            GenStats pst;
            std::vector<int> plain;
            s.generate_plain(ids, 256, greedy, nullptr, &pst, &plain);
            struct { int ngram, gamma, max_tree; } cfgs[] = {{3, 5, 64}, {1, 8, 64}, {2, 3, 2}};
            for (auto& c : cfgs) {
                std::unique_ptr<Drafter> d = make_lookup_drafter(c.ngram, c.gamma);
                SpecParams spp;
                spp.max_tree = c.max_tree;
                SpecStats st;
                std::vector<int> got;
                generate_speculative(s, *d, ids, 256, greedy, spp, nullptr, &st, &got);
                bool same = got == plain;
                if (!same) mismatches++;
                CHECK(same, "prompt %zu ('%s') lookup ngram %d gamma %d: %zu vs %zu tokens, differ", i, prompts[i].c_str(),
                      c.ngram, c.gamma, got.size(), plain.size());
                total_tokens += st.gen_tokens;
                total_passes += st.target_passes;
            }
        }
        printf("lookup: %d tokens in %d target passes (tau %.3f), %d mismatches\n", total_tokens, total_passes,
               total_passes ? (double)total_tokens / total_passes : 0.0, mismatches);
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("spec_exact");
}
