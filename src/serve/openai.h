// openai.h: the OpenAI API as `beagle serve` speaks it: a request body (chat or completions) checked
// field by field into a GenRequest, the error object {"error": {message, type, param, code}}, the
// response and stream-chunk objects, and StopText (stop strings and whole UTF-8 characters for streams).
// No HTTP here (server.cpp) and no model (engine.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../decode/sampling.h"
#include "../io/json_write.h"
#include "../tokenizer/tokenizer.h"

namespace beagle {

// A request the client got wrong (or the server cannot take now): HTTP status + OpenAI error fields.
struct ApiError {
    int status = 400;
    std::string message, type = "invalid_request_error", param, code;  // param, code: "" -> null
};
[[noreturn]] void api_fail(int status, const std::string& param, const std::string& code, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
std::string error_body(const ApiError& e);  // {"error": {...}}

struct GenRequest {
    bool chat = false;
    std::vector<ChatMessage> messages;  // chat
    std::string prompt;                 // completions
    int max_tokens = -1;                // -1: until a stop or the context is full
    SamplingParams sp;                  // temperature (default 1), top_p (default 1), top_k (0), seed
    std::vector<std::string> stop;      // up to 4 strings
    bool stream = false, include_usage = false;
};
// Parses and checks a request body; throws ApiError (400) naming the field. max_ctx bounds max_tokens;
// seed is used when the request has none.
GenRequest parse_request(const std::string& body, bool chat, int max_ctx, uint64_t seed);

// Response objects. kind: chat ("chat.completion") or completions ("text_completion").
struct Usage {
    int prompt_tokens = 0, completion_tokens = 0;
};
nlohmann::json usage_json(const Usage& u);
nlohmann::json response_json(bool chat, const std::string& id, const std::string& model, int64_t created,
                             const std::string& text, const std::string& finish_reason, const Usage& u);
// Access (serve --api-key): true if an Authorization header value is "Bearer KEY" with KEY one of keys.
// Constant time in the keys' contents: every key is compared over every byte of the given one, without
// an early exit, so the time shows only the lengths and how many keys there are, never how much matched.
bool api_key_ok(const std::string& authorization, const std::vector<std::string>& keys);
// The 401 body, as llama-server's: {"error": {"message", "type": "authentication_error", "param": null, "code": 401}}.
std::string auth_error_body();

// One stream chunk: text delta (chat: role on the first chunk), or the last one with finish_reason.
nlohmann::json chunk_json(bool chat, const std::string& id, const std::string& model, int64_t created,
                          const std::string& text, bool first, const std::string& finish_reason);
// "data: {json}\n\n" with invalid UTF-8 replaced (U+FFFD) rather than thrown.
std::string sse_event(const nlohmann::json& j);

// The text of one response as tokens arrive: holds back what may still become a stop string and an
// unfinished UTF-8 character; a stop string ends the text before it.
class StopText {
public:
    explicit StopText(std::vector<std::string> stop) : stop_(std::move(stop)) {}
    // Adds a decoded piece; returns the text now safe to send. *stopped: a stop string appeared.
    std::string add(const std::string& piece, bool* stopped);
    std::string flush();  // the end: everything held back (no stop string found)

private:
    std::vector<std::string> stop_;
    std::string held_;
};

}  // namespace beagle
