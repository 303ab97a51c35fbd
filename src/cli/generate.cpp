// generate.cpp: `beagle generate`: load a target (and a draft for speculative decoding), encode the
// prompt, generate, streaming text to stdout; statistics go to stderr (--json: one JSON object on
// stderr's last line). Steps: parse -> set up (session, drafter) -> run -> report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../core/threadpool.h"
#include "../decode/drafters.h"
#include "../decode/session.h"
#include "../decode/speculative.h"
#include "../decode/verify_cost.h"
#include "../io/json_write.h"
#include "../serve/remote.h"
#include "args.h"
#include "commands.h"
#include "gen_options.h"
#include "plan.h"

namespace beagle {

namespace {

// The command line of `beagle generate`: the flags it shares with `beagle chat` (GenOptions), then its own.
struct GenerateOptions : GenOptions {
    std::string prompt, prompt_file, plan;
    bool chat = false, json = false, no_stream = false, compare = false, parse_special = false;
    std::string server;  // client-server speculative decoding: the target runs there
    std::string server_states = "q8", net_delay;
    bool server_no_zlib = false;
    double net_rate = 0;
    RemoteOptions remote;  // the above, checked
};

// Parses and checks argv into *o (the prompt file read into o->prompt). Returns false after --help.
bool parse_options(int argc, char** argv, GenerateOptions* o) {
    Args a("generate", "-m MODEL [-z TOKENIZER] [-p PROMPT] [options]",
           "Generate text with a Llama-family target. Text goes to stdout, statistics to stderr.");
    o->declare_model(a);
    a.str("-p,--prompt", &o->prompt, "prompt text (empty: start from BOS)");
    a.str("-f,--file", &o->prompt_file, "read the prompt from a file");
    a.flag("--parse-special", &o->parse_special, "encode special-token text in the prompt (like <|im_start|>) as those tokens,\n"
           "as llama.cpp does (default: plain text); a conversation rendered in its template runs as `beagle chat` would");
    o->declare_sampling(a, "number of tokens to generate");
    a.flag("--chat", &o->chat, "wrap the prompt in the model's chat template (the file's; see --chat-template)");
    o->declare_template(a);
    a.flag("--json", &o->json, "print statistics as one JSON object on stderr's last line");
    a.flag("--no-stream", &o->no_stream, "print the text once at the end instead of token by token");
    o->declare_draft(a);
    a.str("--server", &o->server, "verify on a `beagle serve` at this URL (http://HOST:PORT): the draft (-d) runs here, the\n"
          "target there (client-server speculative decoding; greedy). Without -d: remote plain decoding, one call\n"
          "per token. If the server goes away, the draft finishes alone (its predicted states for the true ones)");
    a.str("--server-states", &o->server_states, "f32 | q8: how the server sends the target states (default q8: 8 bits, a scale per row)");
    a.flag("--server-no-zlib", &o->server_no_zlib, "do not zlib-compress the prompt's states (the first answer)");
    a.str("--net-delay", &o->net_delay, "simulated network for --server: MS[,SD] waits N(MS, SD) ms (at least 0) per server\n"
          "call, drawn with --seed; 5g = 10,10; 4g = 21,19 with --net-rate 20 (the Mixture of Attentions paper's profiles)");
    a.number("--net-rate", &o->net_rate, "simulated bandwidth for --server in Mbit/s (0 = unlimited): each call also waits its bytes");
    a.flag("--compare", &o->compare, "also run plain decoding on the same prompt and report the speedup");
    a.str("--plan", &o->plan, "print the device memory budget of this run and exit: 'model' (the -m file), or a geometry\n"
          "(7b | 7b-mha | 7b-llama3 | 70b, plus key=value: dim, heads, kv, ffn, vocab, layers, and q4_0 | q4_1 | q8_0 |\n"
          "f16 | bf16 | f32), with -c, -b and the draft flags; exit 2 when it is not under 24 GiB");
    if (!a.parse(argc, argv)) return false;
    if (!a.positional.empty()) fail("beagle generate: unexpected argument '%s'", a.positional[0].c_str());
    if (!o->prompt_file.empty()) {
        if (!o->prompt.empty()) fail("beagle generate: give -p or -f, not both");
        o->prompt = read_file(o->prompt_file);
    }
    if (o->n_predict < 0) fail("beagle generate: -n must be >= 0, got %ld", o->n_predict);
    if (o->chat && o->parse_special) fail("beagle generate: --chat writes the template's special tokens itself; give --chat or --parse-special, not both");
    o->check("beagle generate", !o->server.empty(), !o->plan.empty());
    const std::string& spec = o->spec;
    if (!o->model_draft.empty() && (!o->server.empty() || !o->plan.empty()))
        fail("beagle generate: a draft model (-md) runs with a local target only, without --plan or --server");
    if (!o->server.empty() && (spec == "lookup" || spec == "auto" || o->temp != 0 || o->compare))
        fail("beagle generate: --server needs --temp 0, without --compare, and --spec none (remote plain decoding), tree, chain or hybrid (not auto)");
    if (o->server.empty() && (!o->net_delay.empty() || o->net_rate != 0))
        fail("beagle generate: --net-delay and --net-rate simulate the network to a --server; give --server URL");
    if (o->server_states != "f32" && o->server_states != "q8")
        fail("beagle generate: --server-states must be f32 or q8, got '%s'", o->server_states.c_str());
    if (o->net_rate < 0) fail("beagle generate: --net-rate must be >= 0, got %g", o->net_rate);
    RemoteOptions& r = o->remote;
    r.url = o->server;
    r.states = o->server_states;
    r.zlib = !o->server_no_zlib;
    r.rate_mbit = o->net_rate;
    if (o->net_delay == "5g") {
        r.delay_ms = r.delay_sd_ms = 10;
    } else if (o->net_delay == "4g") {
        r.delay_ms = 21, r.delay_sd_ms = 19;
        if (r.rate_mbit == 0) r.rate_mbit = 20;
    } else if (!o->net_delay.empty()) {
        const char* c = o->net_delay.c_str();
        char* end = nullptr;
        r.delay_ms = strtod(c, &end);
        bool ok = end != c;
        if (ok && *end == ',') {
            c = end + 1;
            r.delay_sd_ms = strtod(c, &end);
            ok = end != c;
        }
        if (!ok || *end || !std::isfinite(r.delay_ms) || !std::isfinite(r.delay_sd_ms) || r.delay_ms < 0 || r.delay_sd_ms < 0)
            fail("beagle generate: --net-delay expects MS[,SD] (non-negative milliseconds), 5g or 4g; got '%s'", o->net_delay.c_str());
    }
    return true;
}

// The drafter (set_up_drafter); with --server and --total-tokens auto each verify also costs the round trip
// to the server, measured here first (its forward is timed on the local target, a stand-in for the server's).
std::unique_ptr<Drafter> set_up_generate_drafter(Session& s, const GenerateOptions& o, int* max_tree) {
    const bool costed = o.total_tokens == "auto" && o.spec != "chain";
    const double trip = o.server.empty() || !costed ? 0.0 : remote_round_trip_s(o.remote);
    if (!o.server.empty() && costed) fprintf(stderr, "%s: round trip to the server %.2f ms (measured + simulated)\n", o.spec.c_str(), trip * 1e3);
    return set_up_drafter(s, o, max_tree, trip);
}

// The generated text (if not streamed), then the newline that ends it.
void finish_text(const std::string& text, bool streamed) {
    if (!streamed) fputs(text.c_str(), stdout);
    fputs("\n", stdout);
    fflush(stdout);
}

double tokens_per_s(const GenStats& st) { return st.decode_s > 0 ? st.gen_tokens / st.decode_s : 0; }

// A device backend's runtime counters per round (a plain step or a speculative round after the
// prefill; ops.h DeviceCounters): "gpu" in --json.
Json gpu_json(const GenStats& st) {
    const double r = st.rounds_counted > 0 ? (double)st.rounds_counted : 1.0;
    Json g;
    g["rounds"] = st.rounds_counted;
    g["launches_per_round"] = rounded(st.device.launches / r, 2);
    g["graph_launches_per_round"] = rounded(st.device.graph_launches / r, 2);
    g["syncs_per_round"] = rounded(st.device.syncs / r, 2);
    g["h2d_bytes_per_round"] = rounded(st.device.h2d_bytes / r, 1);
    g["d2h_bytes_per_round"] = rounded(st.device.d2h_bytes / r, 1);
    g["allocs_after_warmup"] = st.allocs_after_warmup;
    g["peak_device_bytes"] = st.device.peak_device_bytes;
    return g;
}

void report_plain(const GenStats& st, int threads, bool json) {
    const double pf = st.prefill_s > 0 ? st.prompt_tokens / st.prefill_s : 0, dc = tokens_per_s(st);
    fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tok/s); generated: %d tokens in %.3f s (%.1f tok/s)%s%s\n",
            st.prompt_tokens, st.prefill_s, pf, st.gen_tokens, st.decode_s, dc,
            st.stopped_eog ? "; stopped at end-of-generation token" : "", st.stopped_ctx ? "; stopped: context full" : "");
    if (!json) return;
    Json js;
    js["mode"] = "none";
    js["prompt_tokens"] = st.prompt_tokens;
    js["tokens"] = st.gen_tokens;
    js["target_passes"] = st.target_passes;
    js["prefill_s"] = rounded(st.prefill_s, 6);
    js["decode_s"] = rounded(st.decode_s, 6);
    js["prefill_tok_s"] = rounded(pf, 3);
    js["tok_s"] = rounded(dc, 3);
    js["tau"] = 1.0;
    js["threads"] = threads;
    js["peak_rss_bytes"] = peak_rss_bytes();
    if (st.has_device) js["gpu"] = gpu_json(st);
    fprintf(stderr, "%s\n", json_text(js).c_str());
}

// The speculative run's statistics; with plain (--compare) the plain run's speed and the speedup.
void report_spec(const std::string& mode, const SpecStats& st, int threads, bool json, const GenStats* plain,
                 const RemoteStats* rs = nullptr) {
    const double tok_s = tokens_per_s(st);
    auto counted = [](const std::map<std::string, int>& m) {  // "hybrid 40, lookup 3, plain 120"
        std::string s;
        for (const auto& kv : m) s += strfmt("%s%s %d", s.empty() ? "" : ", ", kv.first.c_str(), kv.second);
        return s;
    };
    std::string rounds = counted(st.rounds_by_mode);  // the mode of each round
    if (!st.draft_threads.empty()) rounds += "; draft threads: " + counted(st.draft_threads);  // --draft-threads -1
    if (!st.draft_depth.empty()) rounds += "; draft depth: " + counted(st.draft_depth);  // cost-aware trees
    fprintf(stderr, "%s: %d tokens in %.3f s (%.1f tok/s), %d target passes, tau %.3f, draft %.1f ms (%.2f ms/round), "
            "verify %.1f ms; rounds: %s%s%s\n",
            mode.c_str(), st.gen_tokens, st.decode_s, tok_s, st.target_passes, st.tau(), st.draft_s * 1e3,
            st.rounds ? st.draft_s * 1e3 / st.rounds : 0.0, st.verify_s * 1e3, rounds.empty() ? "none" : rounds.c_str(),
            st.stopped_eog ? "; stopped at end-of-generation token" : "", st.stopped_ctx ? "; stopped: context full" : "");
    const double plain_tok_s = plain ? tokens_per_s(*plain) : 0, speedup = plain_tok_s > 0 ? tok_s / plain_tok_s : 0.0;
    if (plain)
        fprintf(stderr, "plain: %d tokens in %.3f s (%.1f tok/s); speedup %.3fx\n", plain->gen_tokens, plain->decode_s,
                plain_tok_s, speedup);
    const double per_token = rs && st.gen_tokens ? (double)rs->calls / st.gen_tokens : 0;
    const double per_round = rs && rs->verify_calls ? (double)rs->verify_bytes_received / rs->verify_calls : 0;
    if (rs) {
        fprintf(stderr, "server: %d calls (%.3f per token), sent %ld bytes, received %ld (prompt states %ld, %.0f per verify), "
                "simulated network %.1f ms\n", rs->calls, per_token, rs->bytes_sent, rs->bytes_received, rs->start_bytes,
                per_round, rs->net_delay_s * 1e3);
        if (rs->lost_at >= 0)
            fprintf(stderr, "server lost at token %d; %d tokens drafted alone\n", rs->lost_at, rs->alone_tokens);
    }
    if (!json) return;
    Json js, accept = Json::array();
    for (size_t k = 0; k < st.accept_by_depth.size(); k++)
        accept.push_back(rounded(st.reached_by_depth[k] ? (double)st.accept_by_depth[k] / st.reached_by_depth[k] : 0.0, 4));
    js["mode"] = mode;
    js["prompt_tokens"] = st.prompt_tokens;
    js["tokens"] = st.gen_tokens;
    js["target_passes"] = st.target_passes;
    js["tau"] = rounded(st.tau(), 4);
    js["drafted"] = st.drafted;
    js["rounds"] = st.rounds;
    js["rounds_by_mode"] = st.rounds_by_mode;  // an object, {} when empty
    if (!st.draft_threads.empty()) js["draft_threads"] = st.draft_threads;
    if (!st.draft_depth.empty()) js["draft_depth"] = st.draft_depth;
    js["accept_by_depth"] = accept;
    js["reached_by_depth"] = st.reached_by_depth;
    js["prefill_ms"] = rounded(st.prefill_s * 1e3, 3);
    js["draft_ms"] = rounded(st.draft_s * 1e3, 3);
    js["verify_ms"] = rounded(st.verify_s * 1e3, 3);
    js["decode_ms"] = rounded(st.decode_s * 1e3, 3);
    js["tok_s"] = rounded(tok_s, 3);
    js["threads"] = threads;
    js["peak_rss_bytes"] = peak_rss_bytes();
    if (plain) {
        js["plain_tok_s"] = rounded(plain_tok_s, 3);
        js["speedup"] = rounded(speedup, 4);
    }
    if (rs) {
        js["server_calls"] = rs->calls;
        js["calls_per_token"] = rounded(per_token, 4);
        js["bytes_sent"] = rs->bytes_sent;
        js["bytes_received"] = rs->bytes_received;
        js["prompt_states_bytes"] = rs->start_bytes;
        js["bytes_per_verify"] = rounded(per_round, 1);
        js["net_delay_ms"] = rounded(rs->net_delay_s * 1e3, 3);
        js["server_lost_at"] = rs->lost_at >= 0 ? Json(rs->lost_at) : Json();
        js["alone_tokens"] = rs->alone_tokens;
    }
    if (st.has_device) js["gpu"] = gpu_json(st);
    fprintf(stderr, "%s\n", json_text(js).c_str());
}

}  // namespace

int cmd_generate(int argc, char** argv) {
    GenerateOptions o;
    if (!parse_options(argc, argv, &o)) return 0;

    if (!o.plan.empty()) return generate_plan(o.plan, o.model, o.draft, (int)o.ctx, (int)o.batch, o.d, o.spec != "chain");
    if (!o.backend.empty()) select_backend(o.backend);
    Session s(o.model, o.tok_path, (int)o.threads, (int)o.ctx, (int)o.batch);
    s.tok->set_chat_template(o.chat_template);
    const SamplingParams sp = sampling_params(o);
    const std::vector<int> tokens = o.parse_special ? s.encode_special(o.prompt) : s.encode_prompt(o.prompt, o.chat, o.system);
    FILE* stream = o.no_stream ? nullptr : stdout;
    const int n = (int)o.n_predict;
    RemoteOptions ro = o.remote;
    ro.seed = sp.seed;
    if (o.spec == "none" && !o.server.empty()) {  // remote plain decoding: one server call per token
        SpecStats st;
        RemoteStats rs;
        finish_text(generate_remote(s, nullptr, ro, tokens, n, stream, &st, &rs), stream != nullptr);
        report_spec("none", st, (int)o.threads, o.json, nullptr, &rs);
        return 0;
    }
    if (o.spec == "none") {
        GenStats st;
        finish_text(s.generate_plain(tokens, n, sp, stream, &st), stream != nullptr);
        report_plain(st, (int)o.threads, o.json);
        return 0;
    }
    SpecParams spp;
    spp.max_tree = (int)o.max_tree;
    std::unique_ptr<Drafter> drafter = set_up_generate_drafter(s, o, &spp.max_tree);

    SpecStats st;
    RemoteStats rs;
    ro.max_tree = spp.max_tree;
    finish_text(o.server.empty() ? generate_speculative(s, *drafter, tokens, n, sp, spp, stream, &st, nullptr, acceptance(o))
                                 : generate_remote(s, drafter.get(), ro, tokens, n, stream, &st, &rs),
                stream != nullptr);
    GenStats plain;
    if (o.compare) s.generate_plain(tokens, n, sp, nullptr, &plain);
    report_spec(o.spec, st, (int)o.threads, o.json, o.compare ? &plain : nullptr, o.server.empty() ? nullptr : &rs);
    return 0;
}

}  // namespace beagle
