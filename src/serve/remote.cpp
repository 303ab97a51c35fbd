// remote.cpp: see remote.h.
#include "remote.h"

#include <cstring>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "../core/common.h"

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

// ---------------------------------------------------------------- client side
static std::vector<float> states_of(const json& j, size_t rows, int dim, const std::string& url) {
    std::vector<unsigned char> bytes;
    if (!j.contains("states") || !j["states"].is_string() || !base64_decode(j["states"].get<std::string>(), &bytes) ||
        bytes.size() != rows * dim * sizeof(float))
        fail("server %s: expected %zu x %d states (base64 f32), got %zu bytes", url.c_str(), rows, dim, bytes.size());
    std::vector<float> f(rows * dim);
    memcpy(f.data(), bytes.data(), bytes.size());
    return f;
}

std::string generate_remote(Session& s, Drafter& d, const std::string& url, const std::vector<int>& prompt, int n,
                            int max_tree, FILE* stream, SpecStats* st, std::vector<int>* out_ids) {
    const int D = s.llama->config().dim;
    httplib::Client cli(url);
    BEAGLE_CHECK(cli.is_valid(), "--server '%s': expected http://HOST:PORT", url.c_str());
    cli.set_read_timeout(600, 0);
    auto post = [&](const char* path, const json& body) {
        auto r = cli.Post(path, body.dump(), "application/json");
        if (!r) fail("server %s%s: %s", url.c_str(), path, httplib::to_string(r.error()).c_str());
        if (r->status != 200) fail("server %s%s answered HTTP %d: %s", url.c_str(), path, r->status, r->body.c_str());
        try {
            return json::parse(r->body);
        } catch (const json::exception& e) {
            fail("server %s%s: the answer is not JSON: %s", url.c_str(), path, e.what());
        }
    };
    *st = SpecStats();
    st->prompt_tokens = (int)prompt.size();
    const double t0 = now_seconds();
    json a = post("/beagle/v1/remote/start", {{"prompt", prompt}});
    if (a.value("dim", 0) != D) fail("server %s: the target's dim is %d, the local model's %d", url.c_str(), a.value("dim", 0), D);
    const std::string session = a.at("session").get<std::string>();
    const int ctx = a.at("ctx").get<int>();
    int root = a.at("token").get<int>();
    std::vector<float> states = states_of(a, prompt.size(), D, url);
    st->prefill_s = now_seconds() - t0;
    const double t1 = now_seconds();
    d.begin(prompt, states.data());

    std::vector<int> history(prompt);
    DraftTree tree;
    SamplingParams greedy;
    greedy.temperature = 0;
    Rng rng(1);
    auto step = [&](std::vector<int>* out) {
        int room = std::min(max_tree, ctx - (int)history.size());
        if (room < 1) return false;
        double ta = now_seconds();
        tree.reset(root);
        d.propose(history, &tree, room, greedy, rng);
        tree.truncate(room);
        double tb = now_seconds();
        st->draft_s += tb - ta;
        json v = post("/beagle/v1/remote/verify", {{"session", session}, {"tokens", tree.token}, {"parents", tree.parent}});
        std::vector<int> path = v.at("path").get<std::vector<int>>(), toks = v.at("tokens").get<std::vector<int>>();
        if (path.empty() || path[0] != 0 || toks.size() != path.size())
            fail("server %s: bad verify answer (path of %zu nodes, %zu tokens)", url.c_str(), path.size(), toks.size());
        for (size_t k = 1; k < path.size(); k++)
            if (path[k] <= path[k - 1] || path[k] >= tree.size() || tree.token[path[k]] != toks[k - 1])
                fail("server %s: the accepted path does not follow the tree at node %zu", url.c_str(), k);
        std::vector<float> ps = states_of(v, path.size(), D, url);
        st->verify_s += now_seconds() - tb;
        st->rounds++;
        st->target_passes++;
        st->drafted += tree.size() - 1;
        st->gen_tokens_after_root += (int)path.size();
        history.push_back(root);
        for (size_t k = 1; k < path.size(); k++) history.push_back(tree.token[path[k]]);
        double tc = now_seconds();
        d.accept(tree, path, ps.data());
        st->draft_s += now_seconds() - tc;
        *out = toks;
        root = toks.back();
        return true;
    };
    std::string text = run_commits(s, prompt.back(), root, n, step, stream, st, out_ids);
    st->decode_s = now_seconds() - t1;
    post("/beagle/v1/remote/end", {{"session", session}});
    return text;
}

}  // namespace beagle
