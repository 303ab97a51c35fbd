// remote.h: client-server speculative decoding (seed 003 section 4.2, appendix A.2): the draft runs on
// the client, the target on the server. The client sends each draft tree (token ids + parents); the
// server verifies it in its batched rounds and answers the accepted path, the committed tokens and the
// target's true states of the path, which the client's draft needs for its next round. Greedy: the
// text equals local greedy decoding. Protocol (JSON over HTTP, states as base64 little-endian f32):
//   POST /beagle/v1/remote/start  {"prompt": [ids]}                      -> {"session", "token", "ctx", "dim", "states"}
//   POST /beagle/v1/remote/verify {"session", "tokens": [...], "parents": [...]} -> {"path", "tokens", "states"}
//   POST /beagle/v1/remote/end    {"session"}
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "../decode/speculative.h"

namespace beagle {

std::string base64_encode(const void* data, size_t n);
bool base64_decode(const std::string& s, std::vector<unsigned char>* out);  // false: not base64

// Server side: a Drafter whose tree is the client's (set before each round) and which keeps what the
// answer needs (the prompt's states after begin(); the path and its states after accept()).
class ClientTree : public Drafter {
public:
    const char* name() const override { return "client"; }
    void begin(const std::vector<int>& prompt, const float* states) override;
    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) override;
    void accept(const DraftTree& tree, const std::vector<int>& path, const float* path_states) override;
    int dim = 0;
    std::vector<int> tokens, parents;  // the client's tree: tokens[0] must be the root
    std::vector<int> path;             // after accept
    std::vector<float> states;         // prompt states (begin) or path states (accept)
};

// Client side: `beagle generate --server URL -d DRAFT`: greedy generation of up to n tokens with the
// local drafter `d` and the target at `url` (http://HOST:PORT). Contract as generate_speculative.
std::string generate_remote(Session& s, Drafter& d, const std::string& url, const std::vector<int>& prompt, int n,
                            int max_tree, FILE* stream, SpecStats* st, std::vector<int>* out_ids = nullptr);

}  // namespace beagle
