// quantize.cpp: `beagle quantize IN OUT TYPE [THREADS]`, llama-quantize's command line: rewrites a
// GGUF or an HF safetensors directory as a GGUF of TYPE (src/io/quantize_model.h) and prints the
// tensors by type and the sizes.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../core/common.h"
#include "../core/threadpool.h"
#include "../io/quantize_model.h"
#include "args.h"
#include "commands.h"

namespace beagle {

int cmd_quantize(int argc, char** argv) {
    bool allow_requantize = false, pure = false;
    long threads = default_threads();
    const std::string types = quantize_type_list();
    Args a("quantize", "[options] IN OUT TYPE [THREADS]",
           "Quantize a model as llama-quantize does: IN is a GGUF file or an HF safetensors directory (F32, F16 or\n"
           "BF16 weights), OUT the GGUF to write (atomically), TYPE one of:\n" + types +
           "The k-quant types use llama-quantize's mixes (Q6_K for the output matrix and for half of the attn_v and\n"
           "ffn_down matrices in the _M types) and its fallbacks where a row is not a multiple of 256 (Q4_K -> Q5_0,\n"
           "Q5_K -> Q5_1, Q6_K -> Q8_0). Without an importance matrix the bytes are those llama-quantize writes.\n"
           "Norms and 1-D tensors stay as they are; a GGUF's metadata is copied, with general.file_type set.");
    a.flag("--allow-requantize", &allow_requantize, "accept already-quantized input tensors (quality suffers)");
    a.flag("--pure", &pure, "no mix: every quantizable matrix gets TYPE's base type (fallbacks still apply)");
    a.integer("-t,--threads", &threads, "CPU threads (also the optional 4th argument, as llama-quantize)");
    if (!a.parse(argc, argv)) return 0;
    if (a.positional.size() < 3 || a.positional.size() > 4)
        fail("beagle quantize: expected IN OUT TYPE [THREADS], got %zu arguments (see --help)", a.positional.size());
    const std::string& in = a.positional[0];
    const std::string& out = a.positional[1];
    const QuantizeType* q = find_quantize_type(a.positional[2]);
    if (!q) fail("beagle quantize: unknown type '%s'; expected one of:\n%s", a.positional[2].c_str(), types.c_str());
    if (a.positional.size() == 4) {
        char* end = nullptr;
        threads = strtol(a.positional[3].c_str(), &end, 10);
        if (!end || *end) fail("beagle quantize: THREADS must be an integer, got '%s'", a.positional[3].c_str());
    }
    if (threads < 1 || threads > 256) fail("beagle quantize: threads must be in 1..256, got %ld", threads);
    if (in == out) fail("beagle quantize: IN and OUT are the same path '%s'", in.c_str());

    QuantizeOptions opt;
    opt.allow_requantize = allow_requantize;
    opt.pure = pure;
    opt.threads = (int)threads;
    const QuantizeReport r = quantize_model(in, out, *q, opt);
    std::string by;
    for (const auto& kv : r.tensors_by_type) by += strfmt("%s%s %d", by.empty() ? "" : ", ", kv.first.c_str(), kv.second);
    printf("%s: %s, tensors by type: %s\n", out.c_str(), q->name, by.c_str());
    printf("tensor data %.2f MiB -> %.2f MiB, %d fallback tensor(s), %.1f s\n", r.bytes_in / 1048576.0,
           r.bytes_out / 1048576.0, r.fallbacks, r.seconds);
    return 0;
}

}  // namespace beagle
