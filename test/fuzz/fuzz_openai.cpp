// fuzz_openai.cpp: libFuzzer harness for what `beagle serve` and its remote client read off the
// network: the first byte picks the parser, the rest is its input. 0/1: parse_request() on a chat /
// completions request body (the OpenAI API's JSON, checked field by field; a bad body must end in an
// ApiError, never a crash), then the response and stream-chunk JSON of its stop strings; 2: the remote
// client's decode_states() of a server answer (base64, f32 or q8 rows, zlib), with rows and dim from the
// next bytes, round-tripped through encode_states when it decodes.
#include <cmath>

#include "fuzz_common.h"
#include "serve/openai.h"
#include "serve/remote.h"

static void run(const uint8_t* data, size_t n) {
    if (n < 1) return;
    const int mode = data[0] % 3;
    if (mode < 2) {
        const std::string body((const char*)data + 1, n - 1);
        try {
            beagle::GenRequest r = beagle::parse_request(body, mode == 0, 2048, 1);
            if (r.max_tokens > 2048 || r.stop.size() > 4) abort();  // the checks parse_request promises
            beagle::StopText st(r.stop);
            bool stopped = false;
            std::string text = st.add(r.chat ? std::string("hello") : r.prompt, &stopped);
            if (!stopped) text += st.flush();
            beagle::sse_event(beagle::chunk_json(r.chat, "id", "m", 0, text, true, ""));
        } catch (const beagle::ApiError&) {
        }
        return;
    }
    if (n < 4) return;
    const size_t rows = data[1] % 8;
    const int dim = 1 + data[2] % 64;
    const std::string enc = (data[3] & 1) ? "q8" : "f32";
    const bool zlib = data[3] & 2;
    const std::string b64((const char*)data + 4, n - 4);
    std::vector<float> x;
    std::string why;
    if (!beagle::decode_states(b64, rows, dim, enc, zlib, &x, &why)) return;
    if (x.size() != rows * (size_t)dim) abort();  // decoded: exactly rows x dim values
    for (float& v : x)
        if (!std::isfinite(v)) v = 0;  // f32 bytes may hold NaN / inf; q8 of them is not defined
    std::string again = beagle::encode_states(x.data(), rows, dim, enc, zlib);
    std::vector<float> y;
    if (!beagle::decode_states(again, rows, dim, enc, zlib, &y, &why)) abort();  // our own encoding must decode
}
FUZZ_TARGET(run)
