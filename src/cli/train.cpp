// train.cpp: `beagle train`: trains a Beagle draft on `beagle datagen` data (two-stage block-attention
// training, docs/method.md section 6) with periodic checkpoints and --resume; evaluates acceptance on held-out prompts.
// The loop is src/train/train_loop.cpp.
#include <cstdio>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../train/train_loop.h"
#include "args.h"
#include "commands.h"
#include "plan.h"

namespace beagle {

int cmd_train(int argc, char** argv) {
    TrainLoopOptions o;
    long e1 = o.stage1_epochs, e2 = o.stage2_epochs, w = o.w, S = o.S, batch = o.batch, seq_len = o.seq_len;
    long seed = (long)o.seed, ffn = o.ffn_dim, dvocab = o.draft_vocab, threads = o.threads, eval_n = o.eval_n, eval_tokens = o.eval_tokens;
    long gamma = o.gamma, depth = o.depth, topk = o.topk, total = o.total_tokens;
    bool quiet = false;
    std::string plan, arch = "beagle";
    Args a("train", "-m MODEL [-z TOK] --data DIR -o DRAFT [options] [--resume CKPT]",
           "Train a Beagle draft (one cross-attention block) for a frozen target on `beagle datagen` data: the first\n"
           "--stage1-epochs use inverse block attention (window --window), the next --stage2-epochs add training-time\n"
           "simulation (--sim-steps). AdamW (betas 0.9/0.95), linear warm-up then constant lr, global grad-norm clip.\n"
           "Writes DRAFT, DRAFT.ckpt (every --ckpt-every steps and at the end; --resume continues bit-exactly),\n"
           "DRAFT.loss.png, DRAFT.loss.tsv and, with --eval-prompts, DRAFT.accept.png; a summary in DRAFT.json.\n"
           "--arch eagle trains the EAGLE-1/2-style draft instead (fc [embedding; feature] + one decoder layer with causal\n"
           "self-attention) on the same data, losses, noise, optimizer and schedule; its two stages are the same objective.\n"
           "--arch medusa trains Medusa-1 heads (--medusa-heads K residual blocks on the target's state f_p, head k\n"
           "predicting t_{p+2+k}, cross-entropy weighted 0.8^k) on the same data, noise, optimizer and schedule; its two\n"
           "stages are the same objective, and --window, --sim-steps and --vloss-weight do not apply.\n"
           "--arch moa trains the Mixture of Attentions draft (Layer Self-Attention over f and the --state-layers rows of\n"
           "each position, mean -> keys; causal self-attention over the tokens; the cross-attention block under stage 1's\n"
           "T-step bounded mask, window --window) on the same data and options; its two stages are the same objective.\n"
           "Under mpirun -np N (N a power of two): data-parallel over N ranks, the same bits as one process with the\n"
           "same --batch (the global batch); rank 0 writes the files (docs/distributed.md).");
    a.str("--arch", &arch, "draft architecture: beagle (cross-attention block) | eagle (EAGLE-1/2 decoder layer) |\n"
          "                               medusa (Medusa-1 heads) | moa (Mixture of Attentions)");
    long medusa_heads = o.medusa_heads;
    a.integer("--medusa-heads", &medusa_heads, "--arch medusa: the number of heads K (head k predicts the token k + 2 ahead)");
    std::string state_layers;
    a.str("--state-layers", &state_layers,
          "beagle: also fuse the residual stream after these target layers into the true key states, e.g. 22,27 "
          "(s = f + W_mix h, W_mix from zero; the data must keep them: datagen --state-layers, or token shards);\n"
          "                               moa: the layers its Layer Self-Attention reads at each position besides f");
    a.str("-m,--model", &o.model, "target model (frozen)");
    a.str("-z,--tokenizer", &o.tokenizer, "tokenizer file if the model has none");
    a.str("--data", &o.data, "training data directory (beagle datagen)");
    a.str("-o,--output", &o.out, "draft file to write");
    a.str("--resume", &o.resume, "continue from this checkpoint (same data and flags)");
    a.str("--init", &o.init, "start from this draft's weights (continued training; optimizer state starts fresh)");
    a.str("--ckpt", &o.ckpt, "checkpoint path (default DRAFT.ckpt)");
    a.integer("--ckpt-every", &o.ckpt_every, "write a checkpoint every N steps (0 = only at the end)");
    a.integer("--stage1-epochs", &e1, "epochs of stage 1 (inverse block attention)");
    a.integer("--stage2-epochs", &e2, "epochs of stage 2 (training-time simulation)");
    a.integer("--window", &w, "window size w of the block attention");
    a.integer("--sim-steps", &S, "stage 2: simulation steps S (<= window)");
    a.flag("--sim-grad-through", &o.sim_grad_through, "stage 2: gradients through the predicted states (memory grows with S)");
    a.flag("--ttt", &o.ttt, "--arch eagle, stage 2: training-time test (EAGLE-3 / HASS): --sim-steps steps, each fed the\n"
           "draft's own features of the step before (memory grows with S)");
    a.number("--lr", &o.lr, "peak learning rate (0 = by model width: 3e-3 up to dim 128, 5e-4 to 1024, 1e-4 to 2048, else 3e-5)");
    a.integer("--warmup", &o.warmup, "linear warm-up steps (-1 = min(2000, 5% of all steps))");
    a.number("--lr-decay", &o.lr_decay, "fraction of all steps at the end over which the lr decays linearly to 0\n"
                                        "                               (0 = constant after warm-up, as docs/method.md)");
    a.number("--clip", &o.clip, "global gradient-norm clip (0 = off)");
    a.number("--weight-decay", &o.weight_decay, "AdamW weight decay (matrices only)");
    a.integer("--batch", &batch, "sequences (chunks) per optimizer step");
    a.integer("--seq-len", &seq_len, "longer sequences are split into chunks of this many tokens");
    a.integer("-s,--seed", &seed, "seed of the init, data order, window offsets and noise");
    a.integer("--max-steps", &o.max_steps, "stop after this many optimizer steps in total (0 = all epochs)");
    a.number("--noise", &o.noise, "std of the Gaussian noise on the input true states");
    a.number("--vloss-weight", &o.w_v, "weight of the SmoothL1 state loss (CE weight 1)");
    a.flag("--hard-labels", &o.hard_labels, "cross-entropy against the next token instead of the target's distribution");
    a.flag("--loss-on-prompt", &o.loss_on_prompt, "also train on prompt positions (default: generated part only)");
    a.integer("--ffn", &ffn, "draft MLP hidden size (0 = the target's)");
    a.integer("--draft-vocab", &dvocab, "reduced draft vocabulary (EAGLE-3 style): the N most frequent training targets\n"
                                        "                               (0 = the target's whole vocabulary)");
    a.flag("--new-vocab", &o.new_vocab, "with --init: choose the --draft-vocab tokens from this run's data instead of\n"
           "                               keeping the init draft's (its tensors carry over: the head rows are the target's)");
    a.str("--eval-prompts", &o.eval_prompts, "held-out prompts for the acceptance evaluation (greedy)");
    a.integer("--eval-n", &eval_n, "evaluate on the first N prompts");
    a.integer("--eval-tokens", &eval_tokens, "tokens generated per evaluation prompt");
    a.integer("--gamma", &gamma, "evaluation: chain length");
    a.integer("--depth", &depth, "evaluation: tree depth");
    a.integer("--topk", &topk, "evaluation: tree top-k");
    a.integer("--total-tokens", &total, "evaluation: tree nodes per verify pass");
    a.flag("--eval-no-concat", &o.eval_no_concat, "evaluation: draft queries see true states only (not their own predictions)");
    a.flag("--eval-no-chat", &o.eval_no_chat, "evaluation: prompts as plain text (default: chat template if the tokenizer has one)");
    a.integer("-t,--threads", &threads, "CPU threads (0 = all)");
    a.flag("-q,--quiet", &quiet, "no progress output");
    a.str("--plan", &plan, "print the training memory budget for a geometry and exit: 7b | 7b-mha | 7b-llama3 | 70b, plus\n"
                           "                               overrides dim=,heads=,kv=,ffn=,vocab=,layers= (uses --seq-len, --window, --sim-steps, --state-layers)");
    long ranks = 0;
    a.integer("--ranks", &ranks, "with --plan: the memory per GPU of N data-parallel ranks (train with mpirun -np N)");
    std::string backend;
    a.str("--backend", &backend, strfmt("cpu | cuda (default: %s in this build)", default_backend()).c_str());
    if (!a.parse(argc, argv)) return 0;
    if (!backend.empty()) select_backend(backend);
    if (!plan.empty()) {
        bool seq_given = false;
        for (int i = 1; i < argc; i++) seq_given |= std::string(argv[i]).rfind("--seq-len", 0) == 0;
        const int plan_arch = parse_draft_arch(arch, "beagle train: --arch");
        if (plan_arch == ARCH_MEDUSA)
            fail("beagle train --plan: no plan for --arch medusa (its heads hold K dim x (dim + 1) floats; the iteration's "
                 "buffers are train_memory's Medusa lines)");
        if (ranks < 0 || ranks > 4096) fail("beagle train: --ranks must be in 1..4096, got %ld", ranks);
        if (batch < 1 || batch > 4096) fail("beagle train: --batch must be in 1..4096, got %ld", batch);
        return train_plan(plan, seq_given ? (int)seq_len : 2048, (int)w, (int)S, o.sim_grad_through, (int)std::max(1L, ranks),
                          (int)batch, plan_arch,
                          state_layers.empty() ? std::vector<int>() : parse_layer_list(state_layers, "beagle train: --state-layers"),
                          o.ttt);
    }
    if (ranks) fail("beagle train: --ranks goes with --plan; to train on N ranks launch mpirun -np N beagle train ...");
    if (!a.positional.empty()) fail("beagle train: unexpected argument '%s'", a.positional[0].c_str());
    auto in = [](long v, long lo, long hi, const char* name) {
        if (v < lo || v > hi) fail("beagle train: %s must be in %ld..%ld, got %ld", name, lo, hi, v);
        return (int)v;
    };
    o.stage1_epochs = in(e1, 0, 100000, "--stage1-epochs");
    o.stage2_epochs = in(e2, 0, 100000, "--stage2-epochs");
    o.w = in(w, 1, 64, "--window");
    o.S = in(S, 1, 64, "--sim-steps");
    o.batch = in(batch, 1, 4096, "--batch");
    o.seq_len = in(seq_len, 2, 1 << 20, "--seq-len");
    if (seed < 0) fail("beagle train: --seed must be >= 0, got %ld", seed);
    o.seed = (uint64_t)seed;
    o.ffn_dim = in(ffn, 0, 1 << 20, "--ffn");
    o.arch = parse_draft_arch(arch, "beagle train: --arch");
    if (o.new_vocab && o.init.empty()) fail("beagle train: --new-vocab chooses a new vocabulary for the --init draft: add --init DRAFT");
    if (medusa_heads != o.medusa_heads && o.arch != ARCH_MEDUSA)
        fail("beagle train: --medusa-heads sets the heads of a Medusa draft: add --arch medusa");
    if (medusa_heads < 1 || medusa_heads > kMaxMedusaHeads)
        fail("beagle train: --medusa-heads must be in 1..%d, got %ld", kMaxMedusaHeads, medusa_heads);
    o.medusa_heads = (int)medusa_heads;
    if (o.arch == ARCH_MEDUSA && o.sim_grad_through)
        fail("beagle train: --sim-grad-through is Beagle's stage 2; a Medusa draft has one objective in both stages");
    if (o.ttt && o.arch != ARCH_EAGLE) fail("beagle train: --ttt (the training-time test) trains an EAGLE draft: add --arch eagle");
    if (!state_layers.empty()) o.state_layers = parse_layer_list(state_layers, "beagle train: --state-layers");
    o.draft_vocab = in(dvocab, 0, 1 << 24, "--draft-vocab");
    o.threads = in(threads, 0, 256, "--threads");
    o.eval_n = in(eval_n, 1, 1000000, "--eval-n");
    o.eval_tokens = in(eval_tokens, 1, 1 << 20, "--eval-tokens");
    o.gamma = in(gamma, 1, 63, "--gamma");
    o.depth = in(depth, 1, 32, "--depth");
    o.topk = in(topk, 1, 64, "--topk");
    o.total_tokens = in(total, 2, 1024, "--total-tokens");
    if (o.warmup < -1) fail("beagle train: --warmup must be >= 0 (or -1 for the default), got %ld", o.warmup);
    o.quiet = quiet;
    TrainResult r = run_train(o);
    if (r.rank != 0) return 0;  // under mpirun rank 0 reports
    printf("draft: %s (%d steps)\n", r.draft_path.c_str(), r.steps);
    printf("loss curve: %s\n", r.loss_png.c_str());
    if (r.evaluated) {
        printf("acceptance: %s\n", r.accept_png.c_str());
        printf("tau chain %.3f, tree %.3f\n", r.chain.tau, r.tree.tau);
    }
    printf("summary: %s\n", r.json_path.c_str());
    return 0;
}

}  // namespace beagle
