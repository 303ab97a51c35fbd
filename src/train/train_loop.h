// train_loop.h: `beagle train`, the draft's training loop (docs/method.md section 6, Two-Stage Block-Attention
// Training): epochs over the data shards (stage 1, then stage 2), AdamW with warm-up, periodic atomic
// checkpoints that resume bit-exactly (checkpoint.h), and a final acceptance evaluation with the
// speculative decoding engine (evaluate.h) plus PNG charts and a JSON summary next to the draft
// (report.h). Called by src/cli/train.cpp and the tests (test/unit/test_train_loop.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../model/draft.h"
#include "checkpoint.h"
#include "evaluate.h"

namespace beagle {

struct TrainLoopOptions {
    std::string model, tokenizer;     // target (frozen)
    std::string data;                 // `beagle datagen` directory
    std::string out;                  // draft file; DRAFT.ckpt, DRAFT.loss.png, ... go next to it
    std::string ckpt;                 // checkpoint path ("" = DRAFT.ckpt)
    std::string resume;               // continue from this checkpoint ("" = fresh start)
    std::string init;                 // start from this draft's weights instead of a random init
    int stage1_epochs = 5, stage2_epochs = 5;
    int w = 3, S = 3;                 // window size; stage-2 simulation steps
    bool sim_grad_through = false;
    bool ttt = false;                 // EAGLE draft, stage 2: training-time test over S steps
    double lr = 0;                    // 0: by model size (default_lr)
    long warmup = -1;                 // -1: min(2000, 5% of the steps)
    double lr_decay = 0;              // the last fraction of the steps decays the lr linearly to 0 (0 = constant)
    double clip = 0.5, weight_decay = 0.0;
    int batch = 16;                   // sequences (chunks) per optimizer step
    int seq_len = 2048;               // longer sequences are split into chunks of this many tokens
    uint64_t seed = 1;
    long max_steps = 0;               // stop after this many optimizer steps in total (0 = all epochs)
    double noise = 0.2;               // std of the Gaussian noise on the input true states
    double w_v = 10.0;                // vloss weight
    bool hard_labels = false;
    bool loss_on_prompt = false;      // also train on positions < n_prompt
    int arch = ARCH_BEAGLE;           // draft architecture (DraftArch): Beagle, the EAGLE-style baseline or Medusa heads
    int medusa_heads = 4;             // Medusa: K heads
    int ffn_dim = 0;                  // draft MLP width (0 = the target's)
    std::vector<int> state_layers;    // Beagle: fuse these target layers into the true key states (the data must keep them)
    int draft_vocab = 0;              // reduced draft vocabulary: the N most frequent training targets (0 = all)
    bool new_vocab = false;           // with init: choose draft_vocab's tokens from this data, not the init draft's
    long ckpt_every = 200;            // checkpoint every N steps (0 = only at the end)
    int threads = 0;                  // 0 = all cores
    // evaluation on held-out prompts (greedy): chain gamma and EAGLE-2 tree
    std::string eval_prompts;         // "" = no evaluation
    int eval_n = 50, eval_tokens = 128;
    int gamma = 5, depth = 5, topk = 10, total_tokens = 60;
    bool eval_no_concat = false;      // draft queries see true states only (the method's no-concat mode)
    bool eval_no_chat = false;        // prompts as plain text even if the tokenizer has a chat template
    bool quiet = false;               // no progress output (tests)
};

// Learning rate default for a target width: tiny models need far more than a 7B-class draft's 3e-5.
double default_lr(int dim);

struct TrainResult {
    std::vector<StepRecord> history;
    int steps = 0;
    int rank = 0, ranks = 1;  // data-parallel runs (mpirun): this process's rank; only rank 0 writes files
    double sec_per_step = 0, comm_share = 0;  // this process's steps: wall time, fraction spent communicating
    double bytes_per_step = 0;                // gradient bytes this rank sent per step
    // This process's steps, per stage (index 0: stage 1, 1: stage 2; 0 where none ran): the largest
    // training iteration's buffer peak (the trainer's BufAlloc), the steps and their wall seconds.
    size_t iteration_peak_bytes[2] = {0, 0};
    long stage_steps[2] = {0, 0};
    double stage_seconds[2] = {0, 0};
    // Tokens-only data: the target's states computed in the loop (this process): positions prefilled and the
    // seconds it took (part of the steps' time). states_computed false: the shards kept them.
    bool states_computed = false;
    int64_t state_tokens = 0;
    double state_seconds = 0;
    bool evaluated = false;
    AcceptEval chain, tree;
    std::string draft_path, json_path, loss_png, accept_png;
};

// Runs (or resumes) training to the end; throws Error on bad input or a non-finite loss (after
// which the last checkpoint written stays the last good one).
TrainResult run_train(const TrainLoopOptions& o);

// The n most frequent tokens the draft must predict in ds (generated part; all with loss_on_prompt),
// as increasing ids: the EAGLE-3-style reduced draft vocabulary. Prints the coverage unless quiet.
// keep (continued training, --init): use these n ids instead, and print their coverage of ds.
class Dataset;
std::vector<int32_t> reduced_vocab(const Dataset& ds, int n, bool loss_on_prompt, bool quiet,
                                   const std::vector<int32_t>* keep = nullptr);

}  // namespace beagle
