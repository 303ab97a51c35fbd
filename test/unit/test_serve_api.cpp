// test_serve_api.cpp: the OpenAI request checks and StopText of `beagle serve` (src/serve/openai.*),
// no model, no HTTP: every bad field gets a 400 naming it; StopText sends every byte exactly once,
// holds back only what may still become a stop string or an unfinished UTF-8 character, and cuts at
// the first stop string however the text is split into pieces. The API key check (serve --api-key):
// only "Bearer KEY" with KEY exactly one of the keys passes, and the 401 body is llama-server's.
#include <string>
#include <vector>

#include "serve/openai.h"
#include "testlib.h"

using namespace beagle;

// The ApiError of parse_request (status 0 if it did not throw).
static ApiError bad(const std::string& body, bool chat = false) {
    try {
        parse_request(body, chat, 512, 1);
    } catch (const ApiError& e) {
        return e;
    }
    return ApiError{0, "", "", "", ""};
}

// Feeds text in pieces of `step` bytes; returns what was sent and whether a stop string ended it.
static std::string feed(const std::vector<std::string>& stop, const std::string& text, size_t step, bool* stopped) {
    StopText st(stop);
    std::string out;
    *stopped = false;
    for (size_t i = 0; i < text.size() && !*stopped; i += step) out += st.add(text.substr(i, step), stopped);
    if (!*stopped) out += st.flush();
    return out;
}

int main() {
    // good requests
    GenRequest g = parse_request(R"({"prompt": "hi", "max_tokens": 7, "temperature": 0, "seed": 5, "stop": "x",
                                    "stream": true, "stream_options": {"include_usage": true}})", false, 512, 1);
    CHECK(g.prompt == "hi" && g.max_tokens == 7 && g.sp.temperature == 0 && g.sp.seed == 5, "completion fields");
    CHECK(g.stop.size() == 1 && g.stop[0] == "x" && g.stream && g.include_usage, "stop/stream fields");
    g = parse_request(R"({"messages": [{"role": "system", "content": "s"},
                                       {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                          "max_completion_tokens": 3, "top_p": 0.5, "n": 1})", true, 512, 1);
    CHECK(g.messages.size() == 2 && g.messages[1].content == "ab" && g.max_tokens == 3 && g.sp.top_p == 0.5f, "chat fields");
    g = parse_request(R"({"prompt": ["one string"]})", false, 512, 9);
    CHECK(g.max_tokens == -1 && g.sp.temperature == 1.0f && g.sp.top_p == 1.0f && g.sp.seed == 9 >> 1, "defaults");

    // bad requests: status 400 and the field named
    struct Case { const char* body; bool chat; const char* param; const char* code; };
    const Case cases[] = {
        {"{\"prompt\": \"a\"", false, "", "invalid_json"},
        {"[1, 2]", false, "", "invalid_type"},
        {"{}", false, "prompt", "missing_required_parameter"},
        {"{\"prompt\": 5}", false, "prompt", "invalid_type"},
        {"{\"prompt\": \"a\", \"max_tokens\": 0}", false, "max_tokens", "invalid_value"},
        {"{\"prompt\": \"a\", \"max_tokens\": -3}", false, "max_tokens", "invalid_value"},
        {"{\"prompt\": \"a\", \"max_tokens\": 513}", false, "max_tokens", "invalid_value"},
        {"{\"prompt\": \"a\", \"max_tokens\": 99999999999999999999}", false, "max_tokens", "invalid_value"},
        {"{\"prompt\": \"a\", \"max_tokens\": 2.5}", false, "max_tokens", "invalid_type"},
        {"{\"prompt\": \"a\", \"max_tokens\": \"10\"}", false, "max_tokens", "invalid_type"},
        {"{\"prompt\": \"a\", \"temperature\": \"hot\"}", false, "temperature", "invalid_type"},
        {"{\"prompt\": \"a\", \"temperature\": 3}", false, "temperature", "invalid_value"},
        {"{\"prompt\": \"a\", \"top_p\": 0}", false, "top_p", "invalid_value"},
        {"{\"prompt\": \"a\", \"seed\": \"x\"}", false, "seed", "invalid_type"},
        {"{\"prompt\": \"a\", \"stream\": 1}", false, "stream", "invalid_type"},
        {"{\"prompt\": \"a\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", false, "stop", "invalid_type"},
        {"{\"prompt\": \"a\", \"stop\": [\"\"]}", false, "stop", "invalid_value"},
        {"{\"prompt\": \"a\", \"n\": 2}", false, "n", "invalid_value"},
        {"{\"prompt\": \"\xff\xfe\"}", false, "", "invalid_json"},  // invalid UTF-8 inside a JSON string
        {"{}", true, "messages", "missing_required_parameter"},
        {"{\"messages\": []}", true, "messages", "invalid_value"},
        {"{\"messages\": [\"hi\"]}", true, "messages[0]", "invalid_type"},
        {"{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}", true, "messages[0].role", "invalid_value"},
        {"{\"messages\": [{\"role\": \"user\"}]}", true, "messages[0].content", "missing_required_parameter"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", true, "messages[0].content[0]", "invalid_value"},
    };
    for (const Case& c : cases) {
        ApiError e = bad(c.body, c.chat);
        CHECK(e.status == 400 && e.param == c.param && e.code == c.code && !e.message.empty(),
              "%s: status %d param '%s' code '%s' (%s)", c.body, e.status, e.param.c_str(), e.code.c_str(), e.message.c_str());
    }
    ApiError e = bad("{\"prompt\": 5}");
    std::string body = error_body(e);
    CHECK(body.find("\"error\"") != std::string::npos && body.find("\"param\":\"prompt\"") != std::string::npos &&
          body.find("\"type\":\"invalid_request_error\"") != std::string::npos, "error body %s", body.c_str());

    // StopText: pieces of every size give the same text
    const std::string text = "Once upon a time, a caf\xc3\xa9 sold \xe2\x82\xac" "5 tea. The end. More.";
    for (size_t step = 1; step <= 5; step++) {
        bool stopped;
        CHECK(feed({}, text, step, &stopped) == text && !stopped, "no stop, step %zu", step);
        std::string out = feed({"The end", "zz"}, text, step, &stopped);
        CHECK(out == text.substr(0, text.find("The end")) && stopped, "stop, step %zu: '%s'", step, out.c_str());
        out = feed({"tea. T"}, text, step, &stopped);
        CHECK(out == text.substr(0, text.find("tea. T")) && stopped, "stop over pieces, step %zu", step);
    }
    // held back: a partial stop string and an unfinished UTF-8 character, nothing else
    StopText st({"END"});
    bool stopped;
    CHECK(st.add("abc E", &stopped) == "abc " && !stopped, "holds 'E'");
    CHECK(st.add("x \xe2\x82", &stopped) == "Ex " && !stopped, "releases 'E', holds the unfinished euro sign");
    CHECK(st.add("\xac", &stopped) == "\xe2\x82\xac", "completes the euro sign");
    CHECK(st.add("\xff", &stopped) == "\xff", "an invalid byte is not held");
    CHECK(st.add("EN", &stopped) == "" && st.flush() == "EN", "flush releases the held tail");

    // stream chunks: role only in the first chat delta; the last carries finish_reason
    nlohmann::json c0 = chunk_json(true, "id", "m", 1, "", true, "");
    nlohmann::json c1 = chunk_json(true, "id", "m", 1, "hi", false, "");
    nlohmann::json c2 = chunk_json(true, "id", "m", 1, "", false, "stop");
    CHECK(c0["choices"][0]["delta"]["role"] == "assistant" && c0["object"] == "chat.completion.chunk", "first chunk");
    CHECK(!c1["choices"][0]["delta"].contains("role") && c1["choices"][0]["delta"]["content"] == "hi", "text chunk");
    CHECK(c2["choices"][0]["finish_reason"] == "stop" && c2["choices"][0]["delta"].empty(), "last chunk");
    CHECK(sse_event(c1).rfind("data: {", 0) == 0 && sse_event(c1).substr(sse_event(c1).size() - 2) == "\n\n", "SSE framing");
    CHECK(json_text(nlohmann::json("a\xff")) == "\"a\xef\xbf\xbd\"", "invalid UTF-8 replaced, not thrown");

    // --api-key: the exact key after "Bearer ", any of several; prefixes, extensions, other schemes fail
    const std::vector<std::string> keys = {"sk-one", "two"};
    CHECK(api_key_ok("Bearer sk-one", keys) && api_key_ok("Bearer two", keys), "either key passes");
    CHECK(!api_key_ok("", keys) && !api_key_ok("Bearer ", keys) && !api_key_ok("sk-one", keys), "no key, or no scheme, fails");
    CHECK(!api_key_ok("Bearer sk-on", keys) && !api_key_ok("Bearer sk-one1", keys) && !api_key_ok("Bearer sk-onf", keys),
          "a prefix, a longer key and a one-byte change fail");
    CHECK(!api_key_ok("Bearer sk-onesk-one", keys) && !api_key_ok("Bearer twotwo", keys), "a key repeated fails");
    CHECK(!api_key_ok("Basic sk-one", keys) && !api_key_ok("bearer sk-one", keys) && !api_key_ok("Bearer  sk-one", keys),
          "another scheme, case or spacing fails");
    CHECK(!api_key_ok("Bearer x", {}) && !api_key_ok("Bearer ", {""}), "no keys, or an empty key, match nothing");
    nlohmann::json a = nlohmann::json::parse(auth_error_body());
    CHECK(a["error"]["type"] == "authentication_error" && a["error"]["code"] == 401 && a["error"]["message"].is_string(),
          "the 401 body: %s", auth_error_body().c_str());
    return test_summary("test_serve_api");
}
