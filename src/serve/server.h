// server.h: the HTTP side of `beagle serve` (cpp-httplib): POST /v1/chat/completions and
// /v1/completions (JSON or server-sent events), GET /v1/models, /health, /metrics. Every error is
// an OpenAI error object with a clear status; requests run on the Engine. Optionally behind API keys
// (401 without one) and over HTTPS (cpp-httplib's SSLServer, OpenSSL).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "engine.h"

namespace beagle {

struct ServeOptions {
    std::string host = "127.0.0.1";
    int port = 8080;               // 0: any free port (printed)
    std::string model_id;          // "model" in responses and /v1/models
    size_t max_body = 1 << 20;     // bytes; larger bodies get 413
    int timeout_s = 30;            // read/write timeout per socket operation (slow clients)
    int http_threads = 16;         // connections served at once
    std::vector<std::string> api_keys;  // non-empty: every endpoint but /health needs "Authorization: Bearer KEY"
    std::string ssl_cert_file, ssl_key_file;  // both set: HTTPS (PEM certificate chain and unencrypted private key)
};

// Loads the PEM certificate chain and private key of HTTPS as the server will, so that a bad file stops
// `beagle serve` before the model loads; throws Error naming the flag, the file and what was wrong.
// Without cpp-httplib (NO_HTTP) it only checks that both files are readable.
void check_tls_files(const std::string& cert_file, const std::string& key_file);

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts later (call it before the
// model's thread pool and the Engine exist): run_server waits for them in a thread of its own.
void block_stop_signals();
// Serves until SIGINT or SIGTERM; returns the exit code. Prints "listening on http://HOST:PORT" (https
// with TLS) to stderr once the socket is bound.
int run_server(Session& s, Engine& engine, const ServeOptions& o);

}  // namespace beagle
