// serve.cpp: `beagle serve`: an OpenAI-compatible HTTP server (src/serve/) over one loaded target
// (and draft): --parallel slots share the model, each with its own KV cache sequence and drafter.
#include <algorithm>
#include <memory>
#include <string>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../core/threadpool.h"
#include "../decode/drafters.h"
#include "../decode/verify_cost.h"
#include "../model/draft.h"
#include "../model/llama.h"
#include "../serve/engine.h"
#include "../serve/server.h"
#include "args.h"
#include "draft_options.h"
#include "commands.h"

namespace beagle {

// The keys of --api-key (comma-separated) and --api-key-file (one a line, as llama-server reads it; blank
// lines skipped, a CR of CRLF line ends dropped). Error for an empty key, an unreadable or keyless file.
static std::vector<std::string> load_api_keys(const std::string& list, const std::string& file) {
    std::vector<std::string> keys;
    for (size_t at = 0; !list.empty();) {  // the keys are not echoed in errors: they are secrets
        const size_t comma = list.find(',', at);
        const std::string k = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        if (k.empty()) fail("beagle serve: --api-key: expected KEY or KEY1,KEY2,..., found an empty key (key %zu)", keys.size() + 1);
        keys.push_back(k);
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    if (!file.empty()) {
        std::string text;
        try {
            text = read_file(file);
        } catch (const Error& e) {
            fail("beagle serve: --api-key-file: %s", e.what());
        }
        size_t n = 0;
        for (size_t at = 0; at < text.size();) {
            size_t nl = std::min(text.find('\n', at), text.size());
            std::string k = text.substr(at, nl - at);
            if (!k.empty() && k.back() == '\r') k.pop_back();
            if (!k.empty()) keys.push_back(k), n++;
            at = nl + 1;
        }
        if (n == 0) fail("beagle serve: --api-key-file '%s': expected one API key per line, found none", file.c_str());
    }
    return keys;
}

int cmd_serve(int argc, char** argv) {
    std::string model, tok_path, draft, model_draft, spec, host = "127.0.0.1", alias, total_tokens = "auto", backend, chat_template;
    long port = 8080, ctx = 2048, parallel = 1, threads = default_threads(), queue = 64, timeout = 30, max_body_kb = 1024;
    long http_threads = 0, batch = 64;
    DraftOptions d;
    Args a("serve", "-m MODEL [-d DRAFT] [--host 127.0.0.1] [--port 8080] [options]",
           "OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions (stream or not),\n"
           "GET /v1/models, /health, /metrics (Prometheus). Ctrl-C stops it.");
    a.str("-m,--model", &model, "model: GGUF file, llama2.c .bin, or HF safetensors directory");
    a.str("-z,--tokenizer", &tok_path, "tokenizer file if the model has none");
    a.str("-d,--draft", &draft, "Beagle draft weights (speculative decoding)");
    a.str("-md,--model-draft", &model_draft, "an independent draft model instead (the target's vocabulary); modes chain (its default), tree, auto");
    a.str("--spec", &spec, "none | lookup | chain | tree | hybrid | auto (default: auto with a draft, tree with --total-tokens N, else none). auto: each\n"
          "slot's rounds as generate's auto, and a round of several slots speculative or plain as measured to pay");
    a.str("--host", &host, "address to listen on (127.0.0.1: this machine only)");
    a.integer("--port", &port, "port (0: any free port, printed on stderr)");
    a.integer("-c,--ctx-size", &ctx, "context length of each slot (prompt + generated tokens)");
    a.integer("-np,--parallel", &parallel, "requests generated at once (slots); more wait in the queue");
    a.integer("-b,--batch-size", &batch, "prompt tokens a request prefills per round: a longer prompt is prefilled in\n"
              "pieces between the other requests' rounds, which keep decoding");
    a.integer("--queue", &queue, "requests waiting for a slot before new ones get 503 (Retry-After)");
    a.integer("-t,--threads", &threads, "CPU threads of the model");
    a.integer("--threads-http", &http_threads, "connections served at once (0: 2 x (parallel + queue), at most 256)");
    a.integer("--timeout", &timeout, "seconds a socket read or write may take (slow clients are dropped)");
    a.integer("--max-body-kb", &max_body_kb, "largest request body in KiB (larger: 413)");
    a.str("--chat-template", &chat_template, (std::string("/v1/chat/completions: the ") + "chat template family instead of the file's: " + chat_family_names() + "\n(the file's template, else ChatML when the vocabulary has <|im_start|>; docs/usage.md)").c_str());
    a.str("-a,--alias", &alias, "model name in responses and /v1/models (default: the file name)");
    d.declare(a);
    a.str("--total-tokens", &total_tokens, "tree: nodes per verify pass, or 'auto' (measured verify cost)");
    std::string state_layers;
    a.str("--state-layers", &state_layers, "keep the residual stream after these target layers too, e.g. 22,27: remote\n"
          "clients (generate --server) whose draft fuses layers get their rows (default: a state-layer draft's, else none)");
    std::string api_key, api_key_file, ssl_key_file, ssl_cert_file;
    a.str("--api-key", &api_key, "every endpoint but /health needs 'Authorization: Bearer KEY', else 401 (KEY1,KEY2: several)");
    a.str("--api-key-file", &api_key_file, "API keys, one per line (blank lines skipped); with --api-key, both sets count");
    a.str("--ssl-key-file", &ssl_key_file, "HTTPS: PEM private key (unencrypted); needs --ssl-cert-file");
    a.str("--ssl-cert-file", &ssl_cert_file, "HTTPS: PEM certificate (chain) of that key; needs --ssl-key-file");
    a.str("--backend", &backend, strfmt("cpu | cuda (default: %s in this build)", default_backend()).c_str());
    if (!a.parse(argc, argv)) return 0;
    if (!a.positional.empty()) fail("beagle serve: unexpected argument '%s'", a.positional[0].c_str());
    if (model.empty()) fail("beagle serve: -m MODEL is required (see --help)");
    const int fixed_total = (int)auto_or_integer(total_tokens, 2, 1024, "beagle serve: --total-tokens");
    // auto chooses by measured costs; a fixed tree size (--total-tokens N) gives none to choose by
    if (!draft.empty() && !model_draft.empty()) fail("beagle serve: give a Beagle draft (-d) or a draft model (-md), not both");
    const bool has_draft = !draft.empty() || !model_draft.empty();
    if (spec.empty()) spec = !has_draft ? "none" : !model_draft.empty() ? "chain" : fixed_total ? "tree" : "auto";  // -md: as generate
    if (spec != "none" && spec != "lookup" && spec != "chain" && spec != "tree" && spec != "hybrid" && spec != "auto")
        fail("beagle serve: --spec must be none, lookup, chain, tree, hybrid or auto, got '%s'", spec.c_str());
    const bool needs_draft = spec == "chain" || spec == "tree" || spec == "hybrid" || spec == "auto";
    if (needs_draft && !has_draft) fail("beagle serve: --spec %s needs a draft (-d DRAFT or -md MODEL)", spec.c_str());
    if (!model_draft.empty() && spec != "chain" && spec != "tree" && spec != "auto")
        fail("beagle serve: a draft model (-md) drafts in mode chain, tree or auto, got --spec %s", spec.c_str());
    if (port < 0 || port > 65535) fail("beagle serve: --port must be in 0..65535, got %ld", port);
    if (ctx < 16 || ctx > 1 << 20) fail("beagle serve: -c must be in 16..1048576, got %ld", ctx);
    if (parallel < 1 || parallel > 64) fail("beagle serve: --parallel must be in 1..64, got %ld", parallel);
    if (batch < 1 || batch > 4096) fail("beagle serve: -b must be in 1..4096, got %ld", batch);
    if (queue < 0 || queue > 100000) fail("beagle serve: --queue must be in 0..100000, got %ld", queue);
    if (threads < 1 || threads > 256) fail("beagle serve: -t must be in 1..256, got %ld", threads);
    if (http_threads < 0 || http_threads > 1024) fail("beagle serve: --threads-http must be in 0..1024, got %ld", http_threads);
    if (timeout < 1 || timeout > 3600) fail("beagle serve: --timeout must be in 1..3600 s, got %ld", timeout);
    if (max_body_kb < 1 || max_body_kb > 1 << 20) fail("beagle serve: --max-body-kb must be in 1..1048576, got %ld", max_body_kb);
    d.check("beagle serve");
    const std::vector<std::string> api_keys = load_api_keys(api_key, api_key_file);
    if (ssl_key_file.empty() != ssl_cert_file.empty())
        fail("beagle serve: HTTPS needs both --ssl-key-file and --ssl-cert-file; got only %s",
             ssl_key_file.empty() ? "--ssl-cert-file" : "--ssl-key-file");
    if (!ssl_cert_file.empty()) check_tls_files(ssl_cert_file, ssl_key_file);  // before the model loads
    check_chat_template_name(chat_template);

    block_stop_signals();  // before any thread starts: Ctrl-C / SIGTERM stop the server cleanly
    if (!backend.empty()) select_backend(backend);
    SpecParams spp;  // max_tree 64 as generate's default; a fixed tree size may raise it
    spp.max_tree = std::max(spp.max_tree, std::max(fixed_total, (int)d.gamma + 1));
    // rows per target forward: a round sends every slot's token or tree at once (up to 4 full trees)
    const int max_batch = std::max<int>(spp.max_tree * std::min<int>((int)parallel, 4), (int)parallel);
    Session s(model, tok_path, (int)threads, (int)ctx, max_batch, (int)parallel);
    s.tok->set_chat_template(chat_template);
    std::vector<int> layers;
    if (!state_layers.empty()) {
        layers = parse_layer_list(state_layers, "beagle serve: --state-layers");
        s.llama->set_state_layers(layers);  // checks them against the target's layers
    }

    // One drafter per slot (make_drafter); the draft weights and the verify cost are measured once, shared.
    std::function<std::unique_ptr<Drafter>()> make_slot_drafter;
    std::vector<double> batch_cost;  // mode auto: the batch's round policy
    if (spec != "none") {
        auto w = std::make_shared<DraftWeights>();
        std::shared_ptr<const ModelFile> dm;  // -md: one loaded file, a cache per slot
        if (!model_draft.empty()) dm = load_draft_model_for(s, model_draft);
        else if (spec != "lookup") *w = load_draft_for(s, draft);
        // a draft that fuses layers sets them on the target (its drafters need exactly its rows)
        if (!layers.empty() && spec != "lookup" && !dm && w->cfg.state_layers != layers)
            fail("beagle serve: --state-layers %s, but the draft %s fuses %s (its drafters read exactly its own layers' "
                 "rows: give those, or leave the option out)", state_layers.c_str(), draft.c_str(),
                 w->cfg.state_layers.empty() ? "no layers" : ("layers " + format_layer_list(w->cfg.state_layers)).c_str());
        BeagleDraftParams p = d.params();
        if (fixed_total) p.total_tokens = fixed_total;
        else if (spec != "chain") p.verify_cost = measure_verify_cost(s, spp.max_tree, (int)(spec == "lookup" ? d.gamma : d.depth) + 1);
        if (spec == "auto" && p.verify_cost.empty())
            fail("beagle serve: --spec auto needs the measured verify cost (--total-tokens auto)");
        make_slot_drafter = [&s, spec, p, w, dm, draft] {
            return dm ? make_drafter(s, spec, p, dm) : make_drafter(s, spec, p, w.get(), draft);
        };
        if (spec == "auto") batch_cost = p.verify_cost;
    }
    Engine engine(s, (int)parallel, (int)queue, make_slot_drafter, spp, (int)batch, 60, batch_cost);
    ServeOptions o;
    o.host = host;
    o.port = (int)port;
    o.model_id = alias.empty() ? model.substr(model.find_last_of('/') + 1) : alias;
    o.max_body = (size_t)max_body_kb * 1024;
    o.timeout_s = (int)timeout;
    o.api_keys = api_keys;
    o.ssl_cert_file = ssl_cert_file;
    o.ssl_key_file = ssl_key_file;
    o.http_threads = http_threads ? (int)http_threads : (int)std::min<long>(256, 2 * (parallel + queue) + 4);
    fprintf(stderr, "serve: %s, spec %s, %ld slot(s) of %ld tokens, queue %ld\n", o.model_id.c_str(), spec.c_str(),
            parallel, ctx, queue);
    return run_server(s, engine, o);
}

}  // namespace beagle
