// openai.cpp: the OpenAI API of openai.h: request bodies checked field by field, error, response and
// stream-chunk objects, StopText. Used by src/serve/server.cpp.
#include "openai.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace beagle {

using json = nlohmann::json;

void api_fail(int status, const std::string& param, const std::string& code, const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ApiError e;
    e.status = status;
    e.message = buf;
    e.param = param;
    e.code = code;
    if (status >= 500) e.type = "server_error";
    throw e;
}

std::string error_body(const ApiError& e) {
    json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
    if (!e.param.empty()) err["param"] = e.param;
    if (!e.code.empty()) err["code"] = e.code;
    return json_text(json{{"error", err}});
}

bool api_key_ok(const std::string& authorization, const std::vector<std::string>& keys) {
    static const std::string scheme = "Bearer ";
    if (authorization.compare(0, scheme.size(), scheme) != 0) return false;
    const std::string given = authorization.substr(scheme.size());
    unsigned ok = 0;
    for (const std::string& k : keys) {
        if (k.empty()) continue;  // matches nothing (serve refuses empty keys)
        size_t diff = given.size() ^ k.size();
        for (size_t i = 0; i < given.size(); i++)
            diff |= (size_t)((unsigned char)given[i] ^ (unsigned char)k[i % k.size()]);
        ok |= (unsigned)(diff == 0);
    }
    return ok != 0;
}

std::string auth_error_body() {
    json err = {{"message", "Invalid API Key"}, {"type", "authentication_error"}, {"param", nullptr}, {"code", 401}};
    return json_text(json{{"error", err}});
}

static const char* type_name(const json& v) { return v.type_name(); }

// The field's value if present and not null, else nullptr.
static const json* field(const json& body, const char* name) {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

static double number_field(const json& body, const char* name, double def, double lo, double hi) {
    const json* v = field(body, name);
    if (!v) return def;
    if (!v->is_number()) api_fail(400, name, "invalid_type", "'%s' must be a number, got %s", name, type_name(*v));
    double x = v->get<double>();
    if (!(x >= lo && x <= hi)) api_fail(400, name, "invalid_value", "'%s' must be in [%g, %g], got %g", name, lo, hi, x);
    return x;
}

static int64_t integer_field(const json& body, const char* name, int64_t def, int64_t lo, int64_t hi) {
    const json* v = field(body, name);
    if (!v) return def;
    if (v->is_number_float() && std::fabs(v->get<double>()) >= 9.2e18)  // an integer too large for 64 bits
        api_fail(400, name, "invalid_value", "'%s' must be in [%lld, %lld], got %s", name, (long long)lo, (long long)hi,
                 v->dump().c_str());
    if (!v->is_number_integer())
        api_fail(400, name, "invalid_type", "'%s' must be an integer, got %s", name, v->is_number() ? "a fraction" : type_name(*v));
    if (v->is_number_unsigned() ? v->get<uint64_t>() > (uint64_t)hi : v->get<int64_t>() > hi)
        api_fail(400, name, "invalid_value", "'%s' must be at most %lld, got %s", name, (long long)hi, v->dump().c_str());
    int64_t x = v->get<int64_t>();
    if (x < lo) api_fail(400, name, "invalid_value", "'%s' must be at least %lld, got %lld", name, (long long)lo, (long long)x);
    return x;
}

static bool bool_field(const json& body, const char* name, bool def) {
    const json* v = field(body, name);
    if (!v) return def;
    if (!v->is_boolean()) api_fail(400, name, "invalid_type", "'%s' must be a boolean, got %s", name, type_name(*v));
    return v->get<bool>();
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
static std::string content_text(const json& c, const std::string& param) {
    if (c.is_string()) return c.get<std::string>();
    if (!c.is_array())
        api_fail(400, param, "invalid_type", "'%s' must be a string or an array of text parts, got %s", param.c_str(), type_name(c));
    std::string out;
    for (size_t i = 0; i < c.size(); i++) {
        const json& p = c[i];
        std::string pp = param + "[" + std::to_string(i) + "]";
        if (!p.is_object() || p.value("type", json()) != "text" || !p.contains("text") || !p["text"].is_string())
            api_fail(400, pp, "invalid_value", "'%s' must be {\"type\": \"text\", \"text\": string} (only text is supported)", pp.c_str());
        out += p["text"].get<std::string>();
    }
    return out;
}

static std::vector<ChatMessage> parse_messages(const json& body) {
    const json* m = field(body, "messages");
    if (!m) api_fail(400, "messages", "missing_required_parameter", "'messages' is required");
    if (!m->is_array()) api_fail(400, "messages", "invalid_type", "'messages' must be an array, got %s", type_name(*m));
    if (m->empty()) api_fail(400, "messages", "invalid_value", "'messages' must hold at least one message");
    std::vector<ChatMessage> out;
    for (size_t i = 0; i < m->size(); i++) {
        const json& e = (*m)[i];
        std::string p = "messages[" + std::to_string(i) + "]";
        if (!e.is_object()) api_fail(400, p, "invalid_type", "'%s' must be an object, got %s", p.c_str(), type_name(e));
        const json* role = field(e, "role");
        if (!role || !role->is_string())
            api_fail(400, p + ".role", "invalid_type", "'%s.role' must be a string", p.c_str());
        std::string r = role->get<std::string>();
        if (r == "developer") r = "system";
        if (r != "system" && r != "user" && r != "assistant")
            api_fail(400, p + ".role", "invalid_value", "'%s.role' must be system, user or assistant, got '%s'", p.c_str(), r.c_str());
        const json* c = field(e, "content");
        if (!c) api_fail(400, p + ".content", "missing_required_parameter", "'%s.content' is required", p.c_str());
        out.push_back({r, content_text(*c, p + ".content")});
    }
    return out;
}

GenRequest parse_request(const std::string& body_text, bool chat, int max_ctx, uint64_t seed) {
    json body;
    try {
        body = json::parse(body_text);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double (1e309)
        api_fail(400, "", "invalid_json", "the request body is not valid JSON: %s", e.what());
    }
    if (!body.is_object()) api_fail(400, "", "invalid_type", "the request body must be a JSON object, got %s", type_name(body));
    GenRequest g;
    g.chat = chat;
    if (chat) {
        g.messages = parse_messages(body);
    } else {
        const json* p = field(body, "prompt");
        if (!p) api_fail(400, "prompt", "missing_required_parameter", "'prompt' is required");
        if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
        if (!p->is_string())
            api_fail(400, "prompt", "invalid_type", "'prompt' must be a string (or an array of one string), got %s", type_name(*p));
        g.prompt = p->get<std::string>();
    }
    const char* mt = chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    g.max_tokens = (int)integer_field(body, mt, -1, 1, max_ctx);
    g.sp.temperature = (float)number_field(body, "temperature", 1.0, 0.0, 2.0);
    g.sp.top_p = (float)number_field(body, "top_p", 1.0, 0.0, 1.0);
    if (g.sp.top_p <= 0) api_fail(400, "top_p", "invalid_value", "'top_p' must be in (0, 1], got 0");
    g.sp.top_k = (int)integer_field(body, "top_k", 0, 0, 1 << 30);
    g.sp.seed = (uint64_t)integer_field(body, "seed", (int64_t)(seed >> 1), INT64_MIN, INT64_MAX);
    if (integer_field(body, "n", 1, 1, 1) != 1) api_fail(400, "n", "invalid_value", "'n' must be 1");
    g.stream = bool_field(body, "stream", false);
    if (const json* so = field(body, "stream_options")) {
        if (!so->is_object()) api_fail(400, "stream_options", "invalid_type", "'stream_options' must be an object, got %s", type_name(*so));
        g.include_usage = bool_field(*so, "include_usage", false);
    }
    if (const json* st = field(body, "stop")) {
        if (st->is_string()) {
            g.stop.push_back(st->get<std::string>());
        } else if (st->is_array() && st->size() <= 4) {
            for (const json& s : *st) {
                if (!s.is_string()) api_fail(400, "stop", "invalid_type", "'stop' entries must be strings, got %s", type_name(s));
                g.stop.push_back(s.get<std::string>());
            }
        } else {
            api_fail(400, "stop", "invalid_type", "'stop' must be a string or an array of at most 4 strings");
        }
        for (const std::string& s : g.stop)
            if (s.empty()) api_fail(400, "stop", "invalid_value", "'stop' strings must not be empty");
    }
    return g;
}

json usage_json(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

static json head(bool chat, bool chunk, const std::string& id, const std::string& model, int64_t created) {
    return {{"id", id}, {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
            {"created", created}, {"model", model}};
}

static json finish(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

json response_json(bool chat, const std::string& id, const std::string& model, int64_t created, const std::string& text,
                   const std::string& finish_reason, const Usage& u) {
    json j = head(chat, false, id, model, created);
    json c = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish(finish_reason)}};
    if (chat) c["message"] = {{"role", "assistant"}, {"content", text}};
    else c["text"] = text;
    j["choices"] = json::array({c});
    j["usage"] = usage_json(u);
    return j;
}

json chunk_json(bool chat, const std::string& id, const std::string& model, int64_t created, const std::string& text,
                bool first, const std::string& finish_reason) {
    json j = head(chat, true, id, model, created);
    json c = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish(finish_reason)}};
    if (chat) {
        json delta = json::object();
        if (first) delta["role"] = "assistant";
        if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
        c["delta"] = delta;
    } else {
        c["text"] = text;
    }
    j["choices"] = json::array({c});
    return j;
}

std::string sse_event(const json& j) { return "data: " + json_text(j) + "\n\n"; }

// Bytes at the end of s that start a UTF-8 character not yet complete (0 if none).
static size_t unfinished_utf8(const std::string& s) {
    for (size_t k = 1; k <= std::min<size_t>(3, s.size()); k++) {
        unsigned char c = (unsigned char)s[s.size() - k];
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
        int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 1;
        if (c >= 0xF5) len = 1;
        return (size_t)len > k ? k : 0;
    }
    return 0;
}

std::string StopText::add(const std::string& piece, bool* stopped) {
    held_ += piece;
    *stopped = false;
    size_t at = std::string::npos;
    for (const std::string& s : stop_) at = std::min(at, held_.find(s));
    if (at != std::string::npos) {
        *stopped = true;
        std::string out = held_.substr(0, at);
        held_.clear();
        return out;
    }
    // keep the longest tail that a stop string starts with, and an unfinished character
    size_t keep = 0;
    for (const std::string& s : stop_)
        for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; n--)
            if (held_.compare(held_.size() - n, n, s, 0, n) == 0) { keep = n; break; }
    keep = std::max(keep, unfinished_utf8(held_));
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopText::flush() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace beagle
