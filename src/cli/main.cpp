// main.cpp: the `beagle` binary: dispatches to a subcommand, turns errors into a message on stderr
// and exit code 1.
#include <cstdio>
#include <cstring>
#include <new>

#include "../core/comm.h"
#include "../core/common.h"
#include "commands.h"

using namespace beagle;

static void usage(FILE* f) {
    fprintf(f,
        "usage: beagle <command> [options]   (beagle <command> --help for each)\n\n"
        "commands:\n"
        "  generate   generate text with a target model (plain or speculative)\n"
        "  chat       interactive chat in the terminal, in the model's chat template (plain or speculative)\n"
        "  info       print a model file's config, tensors and tokenizer facts\n"
        "  tokenize   encode text to token ids, or decode ids to text\n"
        "  bench      measure prefill/decode speed and memory bandwidth (JSON)\n"
        "  bench-sd   speculative decoding benchmark over prompt categories (JSON)\n"
        "  datagen    self-distillation data for draft training (the answers as token ids)\n"
        "  gradcheck  check the draft's backward against finite differences (float64, tiny config)\n"
        "  train      train a Beagle draft on datagen data (two-stage block attention, checkpoints, eval)\n"
        "  serve      OpenAI-compatible HTTP server (chat/completions, streaming, metrics)\n"
        "  perplexity perplexity of a target over a text file (llama-perplexity's method)\n"
        "  quantize   rewrite a GGUF or HF safetensors model as a quantized GGUF (llama-quantize's types and mixes)\n");
}

int main(int argc, char** argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    struct { const char* name; int (*fn)(int, char**); } cmds[] = {
        {"generate", cmd_generate}, {"chat", cmd_chat}, {"info", cmd_info}, {"tokenize", cmd_tokenize}, {"bench", cmd_bench}, {"datagen", cmd_datagen}, {"bench-sd", cmd_bench_sd},
        {"gradcheck", cmd_gradcheck}, {"train", cmd_train}, {"serve", cmd_serve},
        {"perplexity", cmd_perplexity}, {"quantize", cmd_quantize},
    };
    for (auto& c : cmds) {
        if (strcmp(argv[1], c.name) != 0) continue;
        try {
            return c.fn(argc - 1, argv + 1);
        } catch (const Error& e) {
            fflush(stdout);
            fprintf(stderr, "error: %s\n", e.what());
            abort_parallel_run(1);  // under mpirun: stop the other ranks too
            return 1;
        } catch (const std::bad_alloc&) {
            fflush(stdout);
            fprintf(stderr, "error: out of memory\n");
            abort_parallel_run(1);
            return 1;
        }
    }
    fprintf(stderr, "error: unknown command '%s' (see 'beagle --help')\n", argv[1]);
    return 1;
}
