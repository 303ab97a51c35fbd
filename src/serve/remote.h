// remote.h: client-server speculative decoding (as in Mixture of Attentions for Speculative Decoding,
// section 4.2 and appendix A.2; docs/serve.md): the draft runs on the client, the target on the server. The client sends each draft tree (token ids + parents); the
// server verifies it in its batched rounds and answers the accepted path, the committed tokens and the
// target's true states of the path, which the client's draft needs for its next round. Greedy: the
// text equals local greedy decoding. Without a draft the client sends the root alone: remote plain
// decoding, one call per token. If the server goes away mid-generation, the client finishes with its
// draft alone, the draft's predicted states standing in for the target's true ones (that paper's Table 4).
// Protocol (JSON over HTTP; states as base64 of the wire encoding below):
//   POST /beagle/v1/remote/start  {"prompt": [ids], "states": "f32"|"q8"|"none", "zlib": bool, "state_layers": [l..]}
//                                 -> {"session", "token", "ctx", "dim", "states", "encoding", "zlib"}
//   POST /beagle/v1/remote/verify {"session", "tokens": [...], "parents": [...]} -> {"path", "tokens", "states", "encoding"}
//   POST /beagle/v1/remote/end    {"session"}
// "states" (default f32) is the encoding of every answer's states; "zlib" (default false) compresses
// the start answer's, the prompt's states, which are the largest message (the paper's section 4.2: the
// states quantized to 8 bits, the first message compressed after quantization). "state_layers" (a draft
// that fuses target layers; each one of those the server keeps, `serve --state-layers`): every state row
// is then [f; h_l1; ...] and "dim" says its width, dim x (1 + layers).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../decode/speculative.h"

namespace beagle {

std::string base64_encode(const void* data, size_t n);
bool base64_decode(const std::string& s, std::vector<unsigned char>* out);  // false: not base64

// Wire encodings of rows x dim states. "f32": little-endian floats. "q8": per row a f32 scale
// s = max_i |x_i| / 127, then dim int8 q_i = round(x_i / s); x_i ~ s q_i, |error| <= s / 2 (4 + dim
// bytes a row instead of 4 dim). "none": no bytes (remote plain decoding). zlib: the encoded bytes
// deflated (zlib format). The result is base64.
bool states_encoding_known(const std::string& enc);
std::string encode_states(const float* x, size_t rows, int dim, const std::string& enc, bool zlib);
// False (with *why) when `b64` does not hold rows x dim states in that encoding.
bool decode_states(const std::string& b64, size_t rows, int dim, const std::string& enc, bool zlib,
                   std::vector<float>* out, std::string* why);

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

// Client side options: the server, the wire encoding, and a simulated network (the paper's profiles
// when netem is not available): each server call waits an extra max(0, N(delay_ms, delay_sd_ms)) ms
// (one draw per call, as netem delaying one side of the link) plus the call's bytes at rate_mbit.
struct RemoteOptions {
    std::string url;            // http://HOST:PORT
    std::string states = "q8";  // f32 | q8
    bool zlib = true;           // compress the start answer
    int max_tree = 64;
    double delay_ms = 0, delay_sd_ms = 0, rate_mbit = 0;
    uint64_t seed = 1;          // of the delay draws
};

struct RemoteStats {
    int calls = 0;                         // HTTP calls to the server (start, verify, end)
    int verify_calls = 0;
    long bytes_sent = 0, bytes_received = 0;  // HTTP bodies
    long start_bytes = 0;                  // the start answer's body (the prompt's states)
    long verify_bytes_received = 0;        // the verify answers' bodies
    double net_delay_s = 0;                // simulated network time
    int lost_at = -1;                      // tokens emitted when the server went away (-1: it did not)
    std::string lost_why;
    int alone_tokens = 0;                  // tokens the draft generated alone after that
};

// The round trip a verify call adds to the server's forward: the median of 5 GET /health calls plus the
// simulated delay's mean, E max(0, N(delay_ms, delay_sd_ms)). Fails if the server does not answer.
double remote_round_trip_s(const RemoteOptions& o);

// Client side: `beagle generate --server URL [-d DRAFT]`: greedy generation of up to n tokens with the
// local drafter `d` (null: remote plain decoding, the root alone each call) and the target at o.url.
// Contract as generate_speculative; *rs gets the traffic and, if the server went away, the fallback.
std::string generate_remote(Session& s, Drafter* d, const RemoteOptions& o, const std::vector<int>& prompt, int n,
                            FILE* stream, SpecStats* st, RemoteStats* rs, std::vector<int>* out_ids = nullptr);

}  // namespace beagle
