// remote.cpp: client-server speculative decoding (remote.h): the wire encoding of states (base64, q8,
// zlib) and the client's loop generate_remote (draft here, verify on the server, simulated network).
#include "remote.h"

#ifndef BEAGLE_NO_HTTP
#include <zlib.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#ifndef BEAGLE_NO_HTTP
#include <httplib.h>
#endif
#include <nlohmann/json.hpp>

#include "../core/common.h"
#include "../core/rng.h"

namespace beagle {

using json = nlohmann::json;

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    std::string out;
    out.reserve((n + 2) / 3 * 4);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out += kB64[v >> 18 & 63];
        out += kB64[v >> 12 & 63];
        out += i + 1 < n ? kB64[v >> 6 & 63] : '=';
        out += i + 2 < n ? kB64[v & 63] : '=';
    }
    return out;
}

bool base64_decode(const std::string& s, std::vector<unsigned char>* out) {
    if (s.size() % 4) return false;
    out->clear();
    for (size_t i = 0; i < s.size(); i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            char c = s[i + k];
            const char* at = c ? strchr(kB64, c) : nullptr;
            if (c == '=' && i + 4 == s.size() && k >= 2) { pad++; v <<= 6; continue; }
            if (!at || pad) return false;
            v = v << 6 | (uint32_t)(at - kB64);
        }
        out->push_back((unsigned char)(v >> 16));
        if (pad < 2) out->push_back((unsigned char)(v >> 8));
        if (pad < 1) out->push_back((unsigned char)v);
    }
    return true;
}

// ---------------------------------------------------------------- states on the wire
bool states_encoding_known(const std::string& enc) { return enc == "f32" || enc == "q8" || enc == "none"; }

static size_t row_bytes(int dim, const std::string& enc) {
    return enc == "f32" ? 4 * (size_t)dim : enc == "q8" ? 4 + (size_t)dim : 0;
}

std::string encode_states(const float* x, size_t rows, int dim, const std::string& enc, bool zlib) {
    BEAGLE_CHECK(states_encoding_known(enc), "unknown states encoding '%s'", enc.c_str());
    std::vector<unsigned char> b(rows * row_bytes(dim, enc));
    if (enc == "f32") {
        if (!b.empty()) memcpy(b.data(), x, b.size());
    } else if (enc == "q8") {
        for (size_t r = 0; r < rows; r++) {
            const float* xr = x + r * dim;
            unsigned char* o = &b[r * (4 + (size_t)dim)];
            float amax = 0;
            for (int i = 0; i < dim; i++) amax = std::max(amax, std::fabs(xr[i]));
            const float scale = amax / 127.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
            memcpy(o, &scale, 4);
            for (int i = 0; i < dim; i++) o[4 + i] = (unsigned char)(int8_t)std::lrintf(xr[i] * inv);
        }
    }
    if (zlib && !b.empty()) {
#ifdef BEAGLE_NO_HTTP
        fail("encode_states: zlib asked for, but this beagle was built with NO_HTTP=1 (no zlib)");
#else
        uLongf n = compressBound((uLong)b.size());
        std::vector<unsigned char> z(n);
        BEAGLE_CHECK(compress2(z.data(), &n, b.data(), (uLong)b.size(), Z_DEFAULT_COMPRESSION) == Z_OK, "zlib compress failed");
        z.resize(n);
        b.swap(z);
#endif
    }
    return base64_encode(b.data(), b.size());
}

bool decode_states(const std::string& b64, size_t rows, int dim, const std::string& enc, bool zlib,
                   std::vector<float>* out, std::string* why) {
    std::vector<unsigned char> b;
    if (!states_encoding_known(enc)) { *why = "unknown encoding '" + enc + "'"; return false; }
    if (!base64_decode(b64, &b)) { *why = "not base64"; return false; }
    const size_t want = rows * row_bytes(dim, enc);
    if (zlib && want > 0) {
#ifdef BEAGLE_NO_HTTP
        *why = "zlib data, but this beagle was built with NO_HTTP=1 (no zlib)";
        return false;
#else
        std::vector<unsigned char> raw(want);
        uLongf n = (uLongf)want;
        if (uncompress(raw.data(), &n, b.data(), (uLong)b.size()) != Z_OK || n != want) {
            *why = strfmt("not zlib data of %zu bytes", want);
            return false;
        }
        b.swap(raw);
#endif
    }
    if (b.size() != want) {
        *why = strfmt("expected %zu x %d states (%s, %zu bytes), got %zu bytes", rows, dim, enc.c_str(), want, b.size());
        return false;
    }
    out->assign(enc == "none" ? 0 : rows * dim, 0.0f);
    if (enc == "f32" && want) memcpy(out->data(), b.data(), want);
    if (enc == "q8")
        for (size_t r = 0; r < rows; r++) {
            const unsigned char* o = &b[r * (4 + (size_t)dim)];
            float scale;
            memcpy(&scale, o, 4);
            for (int i = 0; i < dim; i++) (*out)[r * dim + i] = scale * (float)(int8_t)o[4 + i];
        }
    return true;
}

// ---------------------------------------------------------------- server side
void ClientTree::begin(const std::vector<int>& prompt, const float* st) {
    states.assign(st, st + prompt.size() * (size_t)dim);
}

void ClientTree::propose(const std::vector<int>&, DraftTree* tree, int room, const SamplingParams&, Rng&) {
    BEAGLE_CHECK(!tokens.empty() && tokens[0] == tree->token[0], "the tree's root is %d but the committed token is %d",
                 tokens.empty() ? -1 : tokens[0], tree->token[0]);
    for (size_t i = 1; i < tokens.size() && (int)i < room; i++) tree->add(parents[i], tokens[i], 0.0f);
}

void ClientTree::accept(const DraftTree&, const std::vector<int>& p, const float* path_states) {
    path = p;
    states.assign(path_states, path_states + p.size() * (size_t)dim);
}

#ifdef BEAGLE_NO_HTTP
// Built with NO_HTTP=1 (a machine without cpp-httplib, e.g. an offline GPU machine): no client.
static const char* kNoHttp = "this beagle was built with NO_HTTP=1 (without cpp-httplib): remote drafting (--server) is not "
                             "available; install libcpp-httplib-dev (bash scripts/sysdeps.sh) and rebuild";
double remote_round_trip_s(const RemoteOptions&) { fail("%s", kNoHttp); }
std::string generate_remote(Session&, Drafter*, const RemoteOptions&, const std::vector<int>&, int, FILE*, SpecStats*,
                            RemoteStats*, std::vector<int>*) {
    fail("%s", kNoHttp);
}
#else
// ---------------------------------------------------------------- client side
namespace {

// One HTTP connection to the server; every call is counted, delayed as the simulated network says, and
// either answers JSON (status 200) or says why the server is gone (no answer, 404: the session was
// dropped, 5xx). Other statuses and unparsable answers are errors of this client or the server: fail.
struct Link {
    const RemoteOptions& o;
    RemoteStats* rs;
    httplib::Client cli;
    TrainRng rng;
    Link(const RemoteOptions& o, RemoteStats* rs) : o(o), rs(rs), cli(o.url), rng(o.seed) {
        BEAGLE_CHECK(cli.is_valid(), "--server '%s': expected http://HOST:PORT", o.url.c_str());
        cli.set_read_timeout(600, 0);
    }
    bool call(const char* path, const json& body, json* answer, std::string* why) {
        const std::string req = body.dump();
        auto r = cli.Post(path, req, "application/json");
        rs->calls++;
        rs->bytes_sent += (long)req.size();
        const size_t got = r ? r->body.size() : 0;
        rs->bytes_received += (long)got;
        double wait = o.delay_ms > 0 || o.delay_sd_ms > 0 ? std::max(0.0, o.delay_ms + o.delay_sd_ms * rng.normal()) * 1e-3 : 0.0;
        if (o.rate_mbit > 0) wait += (double)(req.size() + got) * 8 / (o.rate_mbit * 1e6);
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        rs->net_delay_s += wait;
        if (!r) {
            *why = httplib::to_string(r.error());
            return false;
        }
        if (r->status == 404 || r->status >= 500) {
            *why = strfmt("HTTP %d: %s", r->status, r->body.substr(0, 200).c_str());
            return false;
        }
        if (r->status != 200) fail("server %s%s answered HTTP %d: %s", o.url.c_str(), path, r->status, r->body.c_str());
        try {
            *answer = json::parse(r->body);
        } catch (const json::exception& e) {
            fail("server %s%s: the answer is not JSON: %s", o.url.c_str(), path, e.what());
        }
        return true;
    }
};

// The answer's states in the encoding it names (a server that ignores the request's says f32).
std::vector<float> states_of(const json& j, size_t rows, int dim, const std::string& url) {
    std::vector<float> f;
    std::string why = "no states";
    const json enc = j.value("encoding", json("f32")), zlib = j.value("zlib", json(false));
    if (!enc.is_string() || !zlib.is_boolean() || !j.contains("states") || !j["states"].is_string() ||
        !decode_states(j["states"].get<std::string>(), rows, dim, enc.get<std::string>(), zlib.get<bool>(), &f, &why))
        fail("server %s: bad states in the answer: %s", url.c_str(), why.c_str());
    return f;
}

}  // namespace

double remote_round_trip_s(const RemoteOptions& o) {
    httplib::Client cli(o.url);
    BEAGLE_CHECK(cli.is_valid(), "--server '%s': expected http://HOST:PORT", o.url.c_str());
    std::vector<double> t;
    for (int i = 0; i < 5; i++) {
        const double t0 = now_seconds();
        auto r = cli.Get("/health");
        if (!r || r->status != 200)
            fail("server %s: GET /health: %s", o.url.c_str(), r ? strfmt("HTTP %d", r->status).c_str() : httplib::to_string(r.error()).c_str());
        t.push_back(now_seconds() - t0);
    }
    std::sort(t.begin(), t.end());
    const double mu = o.delay_ms, sd = o.delay_sd_ms;  // E max(0, X), X ~ N(mu, sd)
    const double delay_ms = sd > 0 ? mu * 0.5 * std::erfc(-mu / sd / std::sqrt(2.0)) + sd * std::exp(-0.5 * mu * mu / (sd * sd)) / std::sqrt(2 * M_PI)
                                   : std::max(0.0, mu);
    return t[2] + delay_ms * 1e-3;
}

std::string generate_remote(Session& s, Drafter* d, const RemoteOptions& o, const std::vector<int>& prompt, int n,
                            FILE* stream, SpecStats* st, RemoteStats* rs, std::vector<int>* out_ids) {
    const int D = s.llama->state_width();
    RemoteOptions opt = o;
    if (!d) opt.states = "none";  // remote plain decoding: the states would go unused
    BEAGLE_CHECK(opt.states == "f32" || opt.states == "q8" || opt.states == "none",
                 "--server-states: expected f32 or q8, got '%s'", opt.states.c_str());
    Link link(opt, rs);
    *st = SpecStats();
    *rs = RemoteStats();
    st->prompt_tokens = (int)prompt.size();
    const double t0 = now_seconds();
    json a;
    std::string why;
    json start = {{"prompt", prompt}, {"states", opt.states}, {"zlib", opt.zlib}};
    // a draft with state layers (set on the local target) asks the server for those layers' rows too
    if (!s.llama->state_layers().empty()) start["state_layers"] = s.llama->state_layers();
    if (!link.call("/beagle/v1/remote/start", start, &a, &why))
        fail("server %s: no answer to start: %s", o.url.c_str(), why.c_str());
    rs->start_bytes = rs->bytes_received;
    if (a.value("dim", 0) != D)
        fail("server %s: its state rows are %d wide, the local target's %d (dim %d x (1 + %zu state layers))", o.url.c_str(),
             a.value("dim", 0), D, s.llama->config().dim, s.llama->state_layers().size());
    const std::string session = a.at("session").get<std::string>();
    const int ctx = std::min(a.at("ctx").get<int>(), s.llama->ctx());  // the draft holds the local context
    int root = a.at("token").get<int>();
    std::vector<float> states = states_of(a, prompt.size(), D, o.url);
    st->prefill_s = now_seconds() - t0;
    const double t1 = now_seconds();
    if (d) d->begin(prompt, states.data());

    std::vector<int> history(prompt);
    DraftTree tree;
    SamplingParams greedy;
    greedy.temperature = 0;
    Rng rng(1);
    bool lost = false;
    auto alone = [&](std::vector<int>* out) {  // the server is gone: the draft continues by itself
        if ((int)history.size() + 1 > ctx) return false;  // the draft holds ctx states
        double ta = now_seconds();
        int next = d->draft_alone(root);
        st->draft_s += now_seconds() - ta;
        if (next < 0) fail("server %s lost at token %d and the %s drafter cannot continue alone", o.url.c_str(),
                           st->gen_tokens, d->name());
        history.push_back(root);
        rs->alone_tokens++;
        out->assign(1, next);
        root = next;
        return true;
    };
    auto step = [&](std::vector<int>* out) {
        if (lost) return alone(out);
        int room = std::min(opt.max_tree, ctx - (int)history.size());
        if (room < 1) return false;
        double ta = now_seconds();
        tree.reset(root);
        if (d) d->propose(history, &tree, room, greedy, rng);
        tree.truncate(room);
        double tb = now_seconds();
        st->draft_s += tb - ta;
        json v;
        const long before = rs->bytes_received;
        if (!link.call("/beagle/v1/remote/verify", {{"session", session}, {"tokens", tree.token}, {"parents", tree.parent}}, &v, &why)) {
            if (!d) fail("server %s lost at token %d (%s), and plain decoding has no draft to continue with", o.url.c_str(),
                         st->gen_tokens, why.c_str());
            lost = true;
            rs->lost_at = st->gen_tokens;
            rs->lost_why = why;
            fprintf(stderr, "\nserver %s lost at token %d (%s): the draft continues alone\n", o.url.c_str(), st->gen_tokens, why.c_str());
            return alone(out);
        }
        rs->verify_calls++;
        rs->verify_bytes_received += rs->bytes_received - before;
        std::vector<int> path = v.at("path").get<std::vector<int>>(), toks = v.at("tokens").get<std::vector<int>>();
        if (path.empty() || path[0] != 0 || toks.size() != path.size())
            fail("server %s: bad verify answer (path of %zu nodes, %zu tokens)", o.url.c_str(), path.size(), toks.size());
        for (size_t k = 1; k < path.size(); k++)
            if (path[k] <= path[k - 1] || path[k] >= tree.size() || tree.token[path[k]] != toks[k - 1])
                fail("server %s: the accepted path does not follow the tree at node %zu", o.url.c_str(), k);
        std::vector<float> ps = states_of(v, path.size(), D, o.url);
        st->verify_s += now_seconds() - tb;
        st->rounds++;
        st->target_passes++;
        st->drafted += tree.size() - 1;
        st->gen_tokens_after_root += (int)path.size();
        history.push_back(root);
        for (size_t k = 1; k < path.size(); k++) history.push_back(tree.token[path[k]]);
        double tc = now_seconds();
        if (d) d->accept(tree, path, ps.data());
        st->draft_s += now_seconds() - tc;
        *out = toks;
        root = toks.back();
        return true;
    };
    std::string text = run_commits(s, prompt.back(), root, n, step, stream, st, out_ids);
    st->decode_s = now_seconds() - t1;
    json e;
    if (!lost) link.call("/beagle/v1/remote/end", {{"session", session}}, &e, &why);  // a server gone by now is no error
    return text;
}

#endif  // BEAGLE_NO_HTTP

}  // namespace beagle
