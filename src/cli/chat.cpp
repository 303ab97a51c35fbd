// chat.cpp: `beagle chat`, an interactive conversation in the terminal (llama-cli's conversation mode). Each
// turn renders the whole conversation in the model's chat template and streams the reply to stdout, plain or
// speculative; the target's cache and the drafter's keep the conversation's tokens between turns, so a turn
// prefills only what its rendering does not share with them. Ctrl-C stops a reply; Ctrl-C at the prompt, a
// second Ctrl-C during a reply, or the end of input exits.
#include <climits>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../decode/session.h"
#include "../decode/speculative.h"
#include "../tokenizer/chat_template.h"
#include "commands.h"
#include "gen_options.h"

namespace beagle {

namespace {

volatile std::sig_atomic_t g_stop_reply = 0;  // Ctrl-C during a reply: the generation reads it before each step
volatile std::sig_atomic_t g_replying = 0;    // a reply is being generated

// Ctrl-C: the first during a reply ends that reply; a second one, or one at the prompt, ends the program
// (exit status 130, as a shell reports SIGINT).
void on_sigint(int) {
    if (g_replying && !g_stop_reply) {
        g_stop_reply = 1;
        return;
    }
    const char nl = '\n';
    ssize_t w = write(STDOUT_FILENO, &nl, 1);
    (void)w;
    _exit(130);
}

struct ChatOptions : GenOptions {
    bool verbose = false;
};

bool parse_options(int argc, char** argv, ChatOptions* o) {
    Args a("chat", "-m MODEL [-d DRAFT | -md MODEL] [options]",
           "Chat with a model in its chat template, turn by turn: type a message, the reply streams to stdout.\n"
           "A line ending in \\ continues on the next. Ctrl-C stops a reply; Ctrl-C at the prompt or Ctrl-D exits.\n"
           "The caches keep the conversation: each turn prefills only its new tokens.");
    o->n_predict = -1;
    o->declare_model(a);
    o->declare_sampling(a, "most tokens per reply (-1: until the end-of-turn token or a full context)");
    o->declare_template(a);
    o->declare_draft(a);
    a.flag("-v,--verbose", &o->verbose, "after each reply, a line of statistics on stderr (tokens, cached prompt tokens, tok/s, tau)");
    if (!a.parse(argc, argv)) return false;
    if (!a.positional.empty()) fail("beagle chat: unexpected argument '%s'", a.positional[0].c_str());
    if (o->n_predict < -1) fail("beagle chat: -n must be >= -1 (-1: until the end of the turn), got %ld", o->n_predict);
    o->check("beagle chat", false, false);
    return true;
}

// One message from stdin: a line, and the next ones while a line ends in a backslash (which is dropped).
// False at the end of input with nothing read.
bool read_message(std::string* msg) {
    msg->clear();
    bool any = false;
    for (;;) {
        int c;
        std::string line;
        while ((c = getchar()) != EOF && c != '\n') line += (char)c;
        if (c == EOF && line.empty()) return any;
        any = true;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (c != EOF && !line.empty() && line.back() == '\\') {
            line.back() = '\n';
            *msg += line;
            continue;
        }
        *msg += line;
        return true;
    }
}

void report(const SpecStats& st, int kept, const char* mode) {
    const double tok_s = st.decode_s > 0 ? st.gen_tokens / st.decode_s : 0;
    fprintf(stderr, "[%s: prompt %d tokens, %d from the cache, %d prefilled in %.3f s; reply %d tokens in %.3f s (%.1f tok/s), "
            "tau %.3f%s]\n", mode, st.prompt_tokens, kept, st.prompt_tokens - kept, st.prefill_s, st.gen_tokens, st.decode_s,
            tok_s, st.tau(), st.interrupted ? "; stopped by Ctrl-C" : st.stopped_ctx ? "; stopped: context full" : "");
}

}  // namespace

int cmd_chat(int argc, char** argv) {
    ChatOptions o;
    if (!parse_options(argc, argv, &o)) return 0;
    struct sigaction sa = {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // a Ctrl-C during a write to the terminal does not fail the write
    sigaction(SIGINT, &sa, nullptr);

    if (!o.backend.empty()) select_backend(o.backend);
    Session s(o.model, o.tok_path, (int)o.threads, (int)o.ctx, (int)o.batch);
    s.tok->set_chat_template(o.chat_template);
    const char* family = chat_family_name(resolve_chat_family(s.tok->spec()));  // an unknown template fails here
    const SamplingParams sp = sampling_params(o);
    SpecParams spp;
    spp.max_tree = (int)o.max_tree;
    std::unique_ptr<Drafter> drafter;
    if (o.spec != "none") drafter = set_up_drafter(s, o, &spp.max_tree);
    fprintf(stderr, "beagle chat: %s, template %s, %s%s; Ctrl-C stops a reply, Ctrl-C at the prompt or Ctrl-D exits\n",
            o.model.c_str(), family, o.spec == "none" ? "plain decoding" : "speculative decoding, mode ",
            o.spec == "none" ? "" : o.spec.c_str());

    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    std::vector<int> cache_ids;  // the tokens whose K/V the target's cache (and the drafter's) hold
    const int n = o.n_predict < 0 ? INT_MAX : (int)o.n_predict;
    std::string msg;
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        if (!read_message(&msg)) {
            fputs("\n", stdout);
            return 0;
        }
        if (msg.empty()) continue;
        messages.push_back({"user", msg});
        const std::vector<int> ids = s.tokenize_chat(messages);
        s.check_fits(ids, "the conversation");
        Resume r;
        r.keep = reusable_prefix(cache_ids, ids);
        r.interrupt = &g_stop_reply;
        r.cache_ids = &cache_ids;
        SpecStats st;
        g_stop_reply = 0;
        g_replying = 1;
        const std::string reply = drafter ? generate_speculative(s, *drafter, ids, n, sp, spp, stdout, &st, nullptr, acceptance(o), r)
                                          : s.generate_plain(ids, n, sp, stdout, &st, nullptr, r);
        g_replying = 0;
        fputs("\n", stdout);
        fflush(stdout);
        if (o.verbose) report(st, r.keep, o.spec == "none" ? "plain" : o.spec.c_str());
        messages.push_back({"assistant", utf8_sanitize(reply)});  // a reply cut inside a character
    }
}

}  // namespace beagle
