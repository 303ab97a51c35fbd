// datagen.cpp: `beagle datagen`: parses the flags and runs the self-distillation data generation of
// src/data/datagen.h (the target's answers as token ids, and with --keep-states its true states, in shards).
#include "../backend/backend.h"
#include "../core/common.h"
#include "../core/threadpool.h"
#include "../data/datagen.h"
#include "../io/model_file.h"
#include "../model/draft.h"
#include "../train/target_states.h"
#include "args.h"
#include "commands.h"
#include "../tokenizer/chat_template.h"

namespace beagle {

int cmd_datagen(int argc, char** argv) {
    DatagenOptions o;
    Args a("datagen", "-m MODEL [-z TOK] (--prompts FILE | --sample N | --self-prompts N) -o DIR [options]",
           "Self-distillation: the target answers the prompts (chat template for instruct models) or samples N\n"
           "texts from BOS (base models); the token ids go to shards in DIR, written atomically (with\n"
           "--keep-states also every position's true state, f16; beagle train computes them otherwise).\n"
           "--self-prompts N (Magpie): the target first writes N user turns itself, each continuing the chat\n"
           "template's user prefix at --prompt-temp / --prompt-top-p up to its end-of-turn\n"
           "token (turns that reach --max-prompt tokens unended or have < 4 tokens are drawn again from the\n"
           "sequence's next stream), then answers them as --prompts does; the turns go to DIR/self_prompts.jsonl\n"
           "(--prompts DIR/self_prompts.jsonl with a --max-prompt that cuts nothing gives the same shards).\n"
           "Run it again after a kill to resume. Under mpirun -np N rank r writes shards r, r+N, ... (the same\n"
           "bytes as one process).\n"
           "--states-of DIR writes nothing new: the target's states of DIR's tokens-only data (one prefill a\n"
           "sequence, as beagle train computes them) go with its tokens to -o, the shards --keep-states would have\n"
           "written; training of many epochs then reads them instead of recomputing them each epoch.");
    a.str("-m,--model", &o.model, "target model");
    a.str("-z,--tokenizer", &o.tokenizer, "tokenizer file if the model has none");
    a.str("--prompts", &o.prompts, "prompt file: ShareGPT JSON, JSONL (turns/question/instruction/prompt/text) or text lines");
    a.integer("--sample", &o.sample, "sample this many texts from BOS instead of answering prompts");
    a.integer("--self-prompts", &o.self_prompts, "the target writes this many user turns itself (Magpie) and answers them");
    a.number("--prompt-temp", &o.prompt_temp, "--self-prompts: temperature of the user turns");
    a.number("--prompt-top-p", &o.prompt_top_p, "--self-prompts: nucleus threshold of the user turns");
    a.integer("--skip", &o.skip, "skip the first N prompts");
    a.integer("--limit", &o.limit, "use at most N prompts (0 = all)");
    a.str("-o,--output", &o.out_dir, "output directory");
    a.integer("-n,--max-new", &o.max_new, "tokens generated per sequence");
    a.integer("--max-prompt", &o.max_prompt, "cut prompts to this many tokens (--self-prompts: longest user turn)");
    a.number("--temp", &o.temperature, "temperature (-1: greedy for prompts, 1.0 for --sample)");
    a.number("--top-p", &o.top_p, "nucleus threshold when sampling");
    a.integer("-s,--seed", &o.seed, "seed (each sequence gets its own stream derived from it)");
    a.integer("--batch", &o.batch, "sequences decoded together in one target pass");
    a.integer("--shard-seqs", &o.shard_seqs, "sequences per shard file");
    a.integer("-t,--threads", &o.threads, "CPU threads (0 = all)");
    a.flag("--keep-states", &o.keep_states,
           "also keep the target's states (f16, 2 x dim bytes a token: a cache; without it the data is token ids and\n"
           "beagle train computes the states, one prefill per sequence)");
    std::string states_of;
    a.str("--states-of", &states_of, "tokens-only data whose states to compute and store in -o (no generation; with -m, -o,\n"
          "--state-layers, -t, --backend)");
    std::string state_layers;
    a.str("--state-layers", &state_layers,
          "with --keep-states or --states-of: also keep the residual stream after these target layers, e.g. 22,27\n"
          "(EAGLE-3-style fused "
          "states of a draft with --state-layers; docs/paper-comparison.md)");
    bool no_chat = false;
    a.flag("--f32-weights", &o.f32_weights, "compute with the weights dequantized to f32 (float-accurate, slower)");
    a.flag("--no-chat", &no_chat, "do not apply the chat template");
    a.str("--chat-template", &o.chat_template, (std::string("the ") + "chat template family instead of the file's: " + chat_family_names() + "\n(the file's template, else ChatML when the vocabulary has <|im_start|>; docs/usage.md)").c_str());
    std::string backend;
    a.str("--backend", &backend, strfmt("cpu | cuda (default: %s in this build)", default_backend()).c_str());
    if (!a.parse(argc, argv)) return 0;
    if (!backend.empty()) select_backend(backend);
    if (!a.positional.empty()) fail("beagle datagen: unexpected argument '%s'", a.positional[0].c_str());
    o.chat = !no_chat;
    check_chat_template_name(o.chat_template);
    if (!state_layers.empty()) o.state_layers = parse_layer_list(state_layers, "beagle datagen --state-layers");
    if (!states_of.empty()) {
        if (!o.prompts.empty() || o.sample > 0 || o.self_prompts > 0)
            fail("beagle datagen --states-of: the answers are DIR's; --prompts, --sample and --self-prompts do not apply");
        if (o.model.empty() || o.out_dir.empty()) fail("beagle datagen --states-of: needs -m MODEL and -o DIR");
        std::unique_ptr<ModelFile> mf = load_model(o.model);
        const TokenizerSpec spec = o.tokenizer.empty() ? mf->tokenizer : load_tokenizer_file(o.tokenizer);
        cache_states(*mf, o.model, tokenizer_fingerprint(spec), states_of, o.out_dir, o.state_layers,
                     o.threads > 0 ? (int)o.threads : default_threads());
        return 0;
    }
    run_datagen(o);
    return 0;
}

}  // namespace beagle
