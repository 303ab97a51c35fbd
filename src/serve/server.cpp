// server.cpp: see server.h. With remote.cpp (the client) the only files that include httplib.h (and, through
// it, OpenSSL for HTTPS); built with NO_HTTP=1 (no cpp-httplib on the machine) run_server only says so.
#include "server.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <pthread.h>

#ifndef BEAGLE_NO_HTTP
#include <httplib.h>
#endif

#include "../core/common.h"
#include "../model/draft.h"
#include "remote.h"

namespace beagle {

using json = nlohmann::json;

#ifndef BEAGLE_NO_HTTP
static const char* kJson = "application/json";

static void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 503) res.set_header("Retry-After", "1");
    res.set_content(error_body(e), kJson);
}

static std::string new_id(const char* prefix) {
    static std::atomic<uint64_t> counter{0};
    return strfmt("%s-%lx%05lx", prefix, (unsigned long)time(nullptr), (unsigned long)(counter++ % 0xfffff));
}

// Non-stream: wait for the end, one JSON object. Stream: chunks as text arrives, then [DONE].
static void answer(Engine& engine, const std::shared_ptr<Job>& job, const std::string& model, httplib::Response& res) {
    const bool chat = job->req.chat;
    const std::string id = new_id(chat ? "chatcmpl" : "cmpl");
    const int64_t created = (int64_t)time(nullptr);
    const int prompt_tokens = (int)job->prompt.size();
    if (!job->req.stream) {
        std::string text;
        while (!job->wait(1.0, &text)) {}
        if (!job->error.empty()) {
            ApiError e;
            e.status = 500;
            e.type = "server_error";
            e.message = "generation failed: " + job->error;
            return send_error(res, e);
        }
        Usage u{prompt_tokens, job->completion_tokens};
        res.set_content(json_text(response_json(chat, id, model, created, text, job->finish_reason, u)), kJson);
        return;
    }
    res.set_header("Cache-Control", "no-cache");
    auto first = std::make_shared<bool>(true);
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, chat, id, model, created, prompt_tokens, first](size_t, httplib::DataSink& sink) {
            std::string text;
            bool done = job->wait(0.25, &text);
            std::string out;
            if (!text.empty() || (*first && !done)) {
                out += sse_event(chunk_json(chat, id, model, created, text, *first, ""));
                *first = false;
            }
            if (done) {
                if (!job->error.empty()) {
                    ApiError e;
                    e.status = 500;
                    e.type = "server_error";
                    e.message = "generation failed: " + job->error;
                    out += "data: " + error_body(e) + "\n\n";
                } else {
                    out += sse_event(chunk_json(chat, id, model, created, "", *first, job->finish_reason));
                    if (job->req.include_usage) {
                        json u = chunk_json(chat, id, model, created, "", false, "");
                        u["choices"] = json::array();
                        u["usage"] = usage_json({prompt_tokens, job->completion_tokens});
                        out += sse_event(u);
                    }
                }
                out += "data: [DONE]\n\n";
            }
            if (!out.empty() && !sink.write(out.data(), out.size())) {
                job->cancelled = true;
                return false;
            }
            if (done) sink.done();
            return true;
        },
        [job](bool) { job->cancelled = true; });  // a no-op once finished; else the client left
}

#endif  // BEAGLE_NO_HTTP

// Reads a TLS file and checks that it holds the PEM block it must (Error naming the flag and the file).
static void tls_pem(const char* flag, const std::string& path, bool key) {
    std::string pem;
    try {
        pem = read_file(path);
    } catch (const Error& e) {
        fail("beagle serve: %s: %s", flag, e.what());
    }
    const bool has_cert = pem.find("-----BEGIN CERTIFICATE-----") != std::string::npos;
    const bool has_key = pem.find("PRIVATE KEY-----") != std::string::npos;
    const char* found = pem.empty() ? "an empty file" : !key && has_key && !has_cert ? "a private key (the two flags swapped?)"
                        : key && has_cert && !has_key ? "a certificate (the two flags swapped?)" : "none";
    if (!key && !has_cert)
        fail("beagle serve: %s '%s': expected a PEM certificate (a '-----BEGIN CERTIFICATE-----' block), found %s",
             flag, path.c_str(), found);
    if (key && !has_key)
        fail("beagle serve: %s '%s': expected a PEM private key (a '-----BEGIN PRIVATE KEY-----' block), found %s",
             flag, path.c_str(), found);
    if (key && (pem.find("ENCRYPTED PRIVATE KEY") != std::string::npos || pem.find("Proc-Type: 4,ENCRYPTED") != std::string::npos))
        fail("beagle serve: %s '%s': expected an unencrypted private key, found one encrypted with a passphrase "
             "(decrypt it: openssl pkey -in KEY -out PLAIN_KEY)", flag, path.c_str());
}

#ifndef BEAGLE_NO_HTTP
// The first queued OpenSSL error as text, and the queue cleared.
static std::string openssl_error(unsigned long* code = nullptr) {
    unsigned long e = ERR_get_error();
    if (code) *code = e;
    char buf[256] = "no reason given";
    if (e) ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return buf;
}

// ctx as HTTPS serves: TLS 1.2 or later, the certificate chain and private key of the two files. False
// with *err (which file, what OpenSSL found) if either does not load or the key is not the certificate's.
static bool setup_tls(SSL_CTX& ctx, const std::string& cert, const std::string& key, std::string* err) {
    ERR_clear_error();
    SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
    SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
    // an encrypted key fails instead of OpenSSL's default: asking for a passphrase on the terminal
    SSL_CTX_set_default_passwd_cb(&ctx, [](char*, int, int, void*) { return 0; });
    if (SSL_CTX_use_certificate_chain_file(&ctx, cert.c_str()) != 1) {
        *err = strfmt("--ssl-cert-file '%s': expected a PEM certificate chain, OpenSSL cannot read it: %s", cert.c_str(),
                      openssl_error().c_str());
        return false;
    }
    if (SSL_CTX_use_PrivateKey_file(&ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
        unsigned long code = 0;
        const std::string why = openssl_error(&code);
        *err = ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH
                   ? strfmt("--ssl-key-file '%s' is not the private key of the certificate in --ssl-cert-file '%s' (%s)",
                            key.c_str(), cert.c_str(), why.c_str())
                   : strfmt("--ssl-key-file '%s': expected a PEM private key, OpenSSL cannot read it: %s", key.c_str(), why.c_str());
        return false;
    }
    if (SSL_CTX_check_private_key(&ctx) != 1) {
        *err = strfmt("--ssl-key-file '%s' is not the private key of the certificate in --ssl-cert-file '%s' (%s)",
                      key.c_str(), cert.c_str(), openssl_error().c_str());
        return false;
    }
    return true;
}
#endif  // BEAGLE_NO_HTTP

void check_tls_files(const std::string& cert_file, const std::string& key_file) {
    tls_pem("--ssl-cert-file", cert_file, false);
    tls_pem("--ssl-key-file", key_file, true);
#ifndef BEAGLE_NO_HTTP
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) fail("beagle serve: OpenSSL cannot make a TLS context: %s", openssl_error().c_str());
    std::string err;
    const bool ok = setup_tls(*ctx, cert_file, key_file, &err);
    SSL_CTX_free(ctx);
    if (!ok) fail("beagle serve: %s", err.c_str());
#endif
}

static sigset_t stop_signals() {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    return sigs;
}

void block_stop_signals() {
    sigset_t sigs = stop_signals();
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that left: write() fails instead
}

#ifdef BEAGLE_NO_HTTP
int run_server(Session&, Engine&, const ServeOptions&) {
    fail("this beagle was built with NO_HTTP=1 (without cpp-httplib): `serve` is not available; install "
         "libcpp-httplib-dev (bash scripts/sysdeps.sh) and rebuild");
}
#else
int run_server(Session& s, Engine& engine, const ServeOptions& o) {
    sigset_t sigs = stop_signals();  // blocked since block_stop_signals(); one thread below waits for them

    // HTTPS when both TLS files are given (checked before the model loaded: check_tls_files)
    const bool tls = !o.ssl_cert_file.empty();
    std::string tls_err;
    std::unique_ptr<httplib::Server> server;
    if (tls)
        server.reset(new httplib::SSLServer(
            [&](SSL_CTX& ctx) { return setup_tls(ctx, o.ssl_cert_file, o.ssl_key_file, &tls_err); }));
    else
        server.reset(new httplib::Server);
    if (!server->is_valid()) fail("beagle serve: %s", tls_err.empty() ? "the TLS context could not be made" : tls_err.c_str());
    httplib::Server& svr = *server;
    const int threads = o.http_threads;
    svr.new_task_queue = [threads] { return new httplib::ThreadPool((size_t)threads); };
    svr.set_payload_max_length(o.max_body);
    svr.set_read_timeout(o.timeout_s, 0);
    svr.set_write_timeout(o.timeout_s, 0);
    svr.set_keep_alive_timeout(5);
    const int ctx = s.llama->ctx();

    // --api-key: every handler but /health's answers 401 unless the request has "Authorization: Bearer KEY",
    // and so does an unknown path (the error handler). The check runs in the handler, after httplib has read
    // the body: a pre-routing handler would answer before it, and on a kept-alive connection the unread rest
    // of a body larger than httplib's read buffer would be taken for the next request.
    auto authorized = [&](const httplib::Request& req) {
        return o.api_keys.empty() || api_key_ok(req.get_header_value("Authorization"), o.api_keys);
    };
    auto deny = [&](const char* endpoint, httplib::Response& res) {
        res.status = 401;
        res.set_header("WWW-Authenticate", "Bearer");
        res.set_content(auth_error_body(), kJson);
        engine.count_request(endpoint, 401);
    };
    // svr.Get / svr.Post behind the key; the path is also the endpoint label of the 401s in /metrics
    auto get = [&](const char* path, httplib::Server::Handler h) {
        svr.Get(path, [&, path, h](const httplib::Request& req, httplib::Response& res) {
            if (!authorized(req)) return deny(path, res);
            h(req, res);
        });
    };
    auto post = [&](const char* path, httplib::Server::Handler h) {
        svr.Post(path, [&, path, h](const httplib::Request& req, httplib::Response& res) {
            if (!authorized(req)) return deny(path, res);
            h(req, res);
        });
    };

    auto generate = [&, ctx](bool chat) {
        return [&, chat, ctx](const httplib::Request& req, httplib::Response& res) {
            const char* endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
            try {
                static std::atomic<uint64_t> seeds{0};
                uint64_t seed = (uint64_t)time(nullptr) * 0x9E3779B97F4A7C15ULL + seeds++ * 0xBF58476D1CE4E5B9ULL;
                auto job = std::make_shared<Job>();
                job->req = parse_request(req.body, chat, ctx, seed);
                try {
                    job->prompt = chat ? s.tokenize_chat(job->req.messages) : s.tokenize_prompt(job->req.prompt, false, "");
                } catch (const Error& e) {
                    api_fail(400, chat ? "messages" : "prompt", "invalid_value", "%s", e.what());
                }
                if ((int)job->prompt.size() >= ctx)
                    api_fail(400, chat ? "messages" : "prompt", "context_length_exceeded",
                             "the prompt is %zu tokens but the context holds %d (leave room to generate)", job->prompt.size(), ctx);
                if (!engine.submit(job))
                    api_fail(503, "", "server_overloaded", "every slot is busy and the queue is full; retry later");
                answer(engine, job, o.model_id, res);
            } catch (const ApiError& e) {
                send_error(res, e);
            }
            engine.count_request(endpoint, res.status < 0 ? 200 : res.status);
        };
    };
    post("/v1/chat/completions", generate(true));
    post("/v1/completions", generate(false));
    // Remote drafting (remote.h): the client drafts, the server verifies its trees.
    const int V = s.llama->config().vocab_size, D = s.llama->state_width(), dim = s.llama->config().dim;
    const std::vector<int> layers = s.llama->state_layers();  // serve --state-layers, or the draft's
    auto ids_field = [V](const json& b, const char* name) {
        auto it = b.find(name);
        if (it == b.end() || !it->is_array() || it->empty())
            api_fail(400, name, "invalid_type", "'%s' must be a non-empty array of token ids", name);
        std::vector<int> v;
        for (const json& x : *it) {
            if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= V)
                api_fail(400, name, "invalid_value", "'%s' must hold token ids in [0, %d), got %s", name, V, x.dump().c_str());
            v.push_back(x.get<int>());
        }
        return v;
    };
    auto body_of = [](const httplib::Request& req) {
        json b = json::parse(req.body, nullptr, false);
        if (!b.is_object()) api_fail(400, "", "invalid_json", "the request body must be a JSON object");
        return b;
    };
    auto session_of = [&](const json& b) {
        auto it = b.find("session");
        std::shared_ptr<Job> job = it != b.end() && it->is_string() ? engine.remote_job(it->get<std::string>()) : nullptr;
        if (!job) api_fail(404, "session", "session_not_found", "no such remote session (ended, or idle too long)");
        return job;
    };
    auto remote = [&](const char* endpoint, std::function<json(const json&)> fn) {
        return [&, endpoint, fn](const httplib::Request& req, httplib::Response& res) {
            try {
                res.set_content(json_text(fn(body_of(req))), kJson);
            } catch (const ApiError& e) {
                send_error(res, e);
            }
            engine.count_request(endpoint, res.status < 0 ? 200 : res.status);
        };
    };
    auto answer_of = [&](Job& job, bool start) {
        job.wait_answer();
        std::lock_guard<std::mutex> lk(job.mu);
        if (!job.answered && !job.error.empty()) api_fail(500, "", "server_error", "%s", job.error.c_str());
        if (!job.answered && job.finish_reason == "length") api_fail(400, "", "context_full", "the session's context is full");
        if (!job.answered) api_fail(404, "session", "session_not_found", "the remote session ended");
        const bool zlib = start && job.zlib;
        // the blocks the client asked for, out of each row [f; h_1; ...; h_E] (all of them: as is)
        const size_t rows = job.states.size() / D, W = job.blocks.size() * (size_t)dim;
        std::vector<float> picked;
        if ((int)W != D) {
            picked.resize(rows * W);
            for (size_t r = 0; r < rows; r++)
                for (size_t k = 0; k < job.blocks.size(); k++)
                    memcpy(&picked[r * W + k * dim], &job.states[r * D + (size_t)job.blocks[k] * dim], dim * sizeof(float));
        }
        json r = {{"states", encode_states((int)W == D ? job.states.data() : picked.data(), rows, (int)W, job.wire, zlib)},
                  {"encoding", job.wire}, {"zlib", zlib}};
        if (start) {
            r["session"] = job.session;
            r["token"] = job.committed[0];
            r["ctx"] = ctx;
            r["dim"] = W;  // the width of a state row sent: dim x (1 + the state layers asked for)
        } else {
            r["path"] = job.path;
            r["tokens"] = job.committed;
        }
        return r;
    };
    post("/beagle/v1/remote/start", remote("/beagle/v1/remote/start", [&](const json& b) {
        auto job = std::make_shared<Job>();
        job->remote = true;
        job->session = new_id("remote");
        job->prompt = ids_field(b, "prompt");
        auto enc = b.find("states"), zlib = b.find("zlib");
        if (enc != b.end() && (!enc->is_string() || !states_encoding_known(enc->get<std::string>())))
            api_fail(400, "states", "invalid_value", "'states' must be \"f32\", \"q8\" or \"none\"");
        if (zlib != b.end() && !zlib->is_boolean()) api_fail(400, "zlib", "invalid_type", "'zlib' must be a boolean");
        if (enc != b.end()) job->wire = enc->get<std::string>();
        // a draft that fuses target layers asks for them: each must be one of the server's state layers
        auto sl = b.find("state_layers");
        if (sl != b.end()) {
            if (!sl->is_array()) api_fail(400, "state_layers", "invalid_type", "'state_layers' must be an array of layer numbers");
            for (size_t i = 0; i < sl->size(); i++) {
                const json& l = (*sl)[i];
                auto at = l.is_number_integer() ? std::find(layers.begin(), layers.end(), l.get<int64_t>()) : layers.end();
                if (at == layers.end())
                    api_fail(400, "state_layers", "invalid_value",
                             "state_layers[%zu] = %s: this server keeps the target layers [%s] (beagle serve --state-layers)",
                             i, l.dump().c_str(), format_layer_list(layers).c_str());
                const int block = 1 + (int)(at - layers.begin());
                if (block <= job->blocks.back())
                    api_fail(400, "state_layers", "invalid_value", "'state_layers' must be increasing, got %s", sl->dump().c_str());
                job->blocks.push_back(block);
            }
        }
        if (zlib != b.end()) job->zlib = zlib->get<bool>();
        if ((int)job->prompt.size() >= ctx)
            api_fail(400, "prompt", "context_length_exceeded", "the prompt is %zu tokens but the context holds %d",
                     job->prompt.size(), ctx);
        if (!engine.submit(job)) api_fail(503, "", "server_overloaded", "every slot is busy and the queue is full; retry later");
        return answer_of(*job, true);
    }));
    post("/beagle/v1/remote/verify", remote("/beagle/v1/remote/verify", [&](const json& b) {
        std::shared_ptr<Job> job = session_of(b);
        std::vector<int> tokens = ids_field(b, "tokens");
        auto it = b.find("parents");
        std::vector<int> parents;
        if (it == b.end() || !it->is_array() || it->size() != tokens.size())
            api_fail(400, "parents", "invalid_type", "'parents' must be an array as long as 'tokens'");
        for (size_t i = 0; i < it->size(); i++) {
            const json& p = (*it)[i];
            int lo = i == 0 ? -1 : 0, hi = i == 0 ? -1 : (int)i - 1;
            if (!p.is_number_integer() || p.get<int64_t>() < lo || p.get<int64_t>() > hi)
                api_fail(400, "parents", "invalid_value", "parents[%zu] must be in [%d, %d] (node 0 is the root)", i, lo, hi);
            parents.push_back(p.get<int>());
        }
        {
            std::lock_guard<std::mutex> lk(job->mu);
            if (job->tree_pending || job->committed.empty())
                api_fail(409, "session", "busy", "the session is verifying another tree (or still starting)");
            if (tokens[0] != job->committed.back())
                api_fail(400, "tokens", "invalid_value", "tokens[0] must be the last committed token %d, got %d",
                         job->committed.back(), tokens[0]);
        }
        engine.verify_tree(job, std::move(tokens), std::move(parents));
        return answer_of(*job, false);
    }));
    post("/beagle/v1/remote/end", remote("/beagle/v1/remote/end", [&](const json& b) {
        engine.end_remote(session_of(b));
        return json::object();
    }));
    get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
        json m = {{"id", o.model_id}, {"object", "model"}, {"created", (int64_t)time(nullptr)}, {"owned_by", "beagle"}};
        res.set_content(json_text(json{{"object", "list"}, {"data", json::array({m})}}), kJson);
        engine.count_request("/v1/models", 200);
    });
    svr.Get("/health", [&](const httplib::Request&, httplib::Response& res) {  // open: load balancers, generate --server's timing
        res.set_content("{\"status\":\"ok\"}", kJson);
    });
    get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
        res.set_content(engine.metrics(), "text/plain; version=0.0.4");
    });
    // Errors httplib raises itself (unknown path, body too large, unparsable request) get an error object too.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([&](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (!authorized(req)) {  // behind the key, an unknown path is not told apart from a known one
            deny("other", res);
            return httplib::Server::HandlerResponse::Handled;
        }
        ApiError e;
        e.status = res.status;
        if (res.status == 404) {
            e.code = "not_found";
            e.message = "no such endpoint: " + req.method + " " + req.path;
        } else if (res.status == 413) {
            e.code = "request_too_large";
            e.message = strfmt("the request body is larger than %zu bytes", o.max_body);
        } else {
            e.message = strfmt("the request could not be served (HTTP %d%s)", res.status,
                               res.status == 400 ? ": malformed HTTP request" : "");
        }
        if (res.status >= 500) e.type = "server_error";
        res.set_content(error_body(e), kJson);
        engine.count_request("other", res.status);
        return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler([&](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        ApiError e;
        e.status = 500;
        e.type = "server_error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& x) {
            e.message = std::string("internal error: ") + x.what();
        } catch (...) {
            e.message = "internal error";
        }
        send_error(res, e);
    });

    int port = o.port;
    if (port == 0) {
        port = svr.bind_to_any_port(o.host);
        if (port < 0) fail("serve: cannot bind to %s (any port)", o.host.c_str());
    } else if (!svr.bind_to_port(o.host, port)) {
        fail("serve: cannot bind to %s:%d (in use, or not an address of this machine)", o.host.c_str(), port);
    }
    fprintf(stderr, "listening on %s://%s:%d%s\n", tls ? "https" : "http", o.host.c_str(), port,
            o.api_keys.empty() ? "" : strfmt(" (API key required: %zu key(s))", o.api_keys.size()).c_str());
    fflush(stderr);
    std::thread stopper([&] {
        int sig = 0;
        sigwait(&sigs, &sig);
        svr.stop();
    });
    bool ok = svr.listen_after_bind();
    if (stopper.joinable()) {
        pthread_kill(stopper.native_handle(), SIGTERM);  // listen ended by itself: release the waiter
        stopper.join();
    }
    fprintf(stderr, "serve: stopped\n");
    return ok ? 0 : 1;
}
#endif  // BEAGLE_NO_HTTP

}  // namespace beagle
