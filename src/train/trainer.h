// trainer.h: one training iteration of the Beagle draft on one sequence (docs/method.md section 6, Two-Stage
// Block-Attention Training): stage 1 (inverse block attention, every query contributes) or stage 2
// (S simulation steps with a second, in-place KV set of predicted states; detached by default,
// --sim-grad-through keeps all steps). An EAGLE draft (DraftConfig::arch) trains on the same losses
// with EAGLE's one objective, next-feature prediction under causal self-attention, in both stages; a Medusa
// draft its K heads on the cross-entropy alone (head k against the target's distribution k + 1 rows on),
// the same objective in both stages; a Mixture of Attentions draft (arch moa) with stage 1's T-step bounded
// cross-attention mask in both stages.
// A trainer is a short loop over these:
//     model.zero_grads(); for each sequence in the batch: trainer.run(seq, offset, seed, 1/B);
//     adamw.step(lr);
// Templated over the op set (Ops: float training; CpuOps64: the gradient check).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "../model/draft_layers.h"
#include "../model/llama.h"  // MemLine
#include "losses.h"

namespace beagle {

struct TrainOptions {
    int stage = 1;                  // 1 = early (inverse block attention), 2 = late (simulation)
    int w = 3;                      // window size (paper ablation: 3 best; main runs 5)
    int S = 3;                      // stage 2: simulation steps (needs w >= S)
    bool sim_grad_through = false;  // stage 2: gradients through the predicted states (memory grows with S)
    bool ttt = false;               // EAGLE draft, stage 2: training-time test over S steps (trainer.cpp run_eagle)
    float noise_std = 0.2f;         // Gaussian noise on the input true states (not on the targets)
    LossOptions loss;
};

// One sequence: tokens t_0..t_{T-1} and the target's true states f_0..f_{T-1} (T x dim, host f32)
// at positions pos0..pos0+T-1. loss_mask (optional, host): rows with 0 contribute no loss.
struct TrainBatch {
    const int* tokens = nullptr;
    const float* states = nullptr;
    const float* extras = nullptr;   // state layers (DraftConfig::state_layers): T x E x dim, host f32
    const uint8_t* loss_mask = nullptr;
    int T = 0;
    int pos0 = 0;
};

struct IterStats {
    double loss = 0, ce = 0, vloss = 0;  // the iteration's loss (unscaled by loss_scale) and its parts
    int offset = 0;
    std::vector<double> step_loss;       // per step: mean of L_i over its loss rows (stage 1: one step)
    std::vector<int> step_rows;          // per step: loss rows
};

// Test hooks: what one stage computed, row by row.
template <class R>
struct TrainCaptureT {
    struct Row {
        int step, row;
        std::vector<R> fh, logits;  // predicted state (dim) and draft logits (vocab; loss rows only)
    };
    std::vector<Row> rows;
};

template <class O>
class DraftTrainerT {
public:
    using R = RealOf<O>;
    DraftTrainerT(DraftModelT<O>& m, const TrainOptions& opt);
    ~DraftTrainerT();
    DraftTrainerT(const DraftTrainerT&) = delete;
    DraftTrainerT& operator=(const DraftTrainerT&) = delete;

    // Forward (and, if backward, gradients of loss_scale * loss accumulated into m.g) on one
    // sequence. offset: window offset in [0, w) (draw it uniformly per iteration). noise_seed: the
    // seed of the Gaussian noise added to the input true states.
    IterStats run(const TrainBatch& b, int offset, uint64_t noise_seed, float loss_scale = 1.0f, bool backward = true);

    const TrainOptions& options() const { return opt_; }
    BufAlloc<O>& mem() { return al_; }  // every buffer of run() comes from here (peak bytes)

    // Stage 2, detached mode, gradient check: use these predicted states (T x dim) instead of the
    // computed ones when writing the second KV set (predicted states held at unperturbed values). An
    // EAGLE draft's training-time test: the f^ fed to steps 2..S (steps 1..S-1's f^, one after another).
    const std::vector<R>* frozen_pred = nullptr;
    std::vector<R>* record_pred = nullptr;   // receives the predicted states written (T x dim)
    TrainCaptureT<R>* capture = nullptr;     // receives every step's f^ rows and logits

    // Deferred losses: each stage step's per-row losses stay on the backend (a loss log); with
    // defer_losses, run() returns its IterStats with the loss fields (loss, ce, vloss, step_loss) left
    // empty, and finish_losses() brings every deferred run's losses down in ONE copy (a device backend:
    // one sync per optimizer step, not one per stage step) and returns their IterStats in run order,
    // the values run() returns without deferral.
    bool defer_losses = false;
    std::vector<IterStats> finish_losses();

private:
    struct LossStep { size_t off; int n; float scale; };  // rows [off, off + 2n) of the log: ce then vl
    struct PendingRun { IterStats stats; float loss_scale; std::vector<LossStep> steps; };
    std::vector<PendingRun> pending_;
    std::vector<LossStep> cur_steps_;
    R* log_ = nullptr;                        // the loss log (backend; outside al_: not run()'s memory)
    size_t log_cap_ = 0, log_used_ = 0;
    void log_losses(const R* cv, int n, float scale);
    struct Step;
    void step_forward(Step& st, const TrainBatch& b, const std::vector<int>& pos, const R* f, int s, float scale,
                      const XAttnKeysT<R>& keys, const XAttnMask& mask, IterStats* stats);
    void step_loss(Step& st, const TrainBatch& b, const R* f, int s, float scale, IterStats* stats);
    void run_eagle(const TrainBatch& b, const R* f, const R* s, const std::vector<int>& pos, float loss_scale,
                   bool backward, IterStats* stats);
    void run_medusa(const TrainBatch& b, const R* f, const R* s, float loss_scale, bool backward, IterStats* stats);
    void run_moa(const TrainBatch& b, const R* f, const R* s, const R* h, const std::vector<int>& pos, int offset,
                 float loss_scale, bool backward, IterStats* stats);
    void step_backward(Step& st, const std::vector<int>& pos, const XAttnKeysT<R>& keys,
                       const XAttnGradsT<R>& dkeys, const XAttnMask& mask);
    void step_free(Step& st);
    DraftModelT<O>& m_;
    TrainOptions opt_;
    BufAlloc<O> al_;
};

using DraftTrainer = DraftTrainerT<Ops>;

// Memory of one training iteration (default detached mode, or stage 1; an EAGLE draft: its one step
// in any stage, c.arch): every buffer the trainer
// allocates, by name, with the bytes the code allocates (checked against the counting allocator
// by test/unit/test_stage2_memory.cpp). sizeof_real: 4 (float) or 8.
struct TrainMemory {
    std::vector<MemLine> lines;      // persistent (weights, grads, AdamW, frozen) and per-iteration
    double iteration_peak = 0;       // peak bytes of run() (what BufAlloc measures)
    double kv_set = 0;               // bytes of one KV set (the second, predicted, set of stage 2)
    double persistent = 0;           // weights + grads + AdamW moments + frozen tensors
    double weights = 0;              // one copy of the trainable weights (= one gradient set = one AdamW moment)
};
TrainMemory train_memory(const DraftConfig& c, const TrainOptions& opt, int T, int offset, int sizeof_real = 4);

}  // namespace beagle
