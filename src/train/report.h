// report.h: what run_train (train_loop.cpp) writes next to the draft besides the draft and its
// checkpoint: the loss curve (DRAFT.loss.png) and its numbers (DRAFT.loss.tsv), the acceptance chart
// (DRAFT.accept.png) and the JSON summary (DRAFT.json, nlohmann::ordered_json).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint.h"
#include "evaluate.h"

namespace beagle {

// Mean of `field` over the last k records of one stage (0 = every stage); NaN if there are none.
double tail_mean(const std::vector<StepRecord>& h, int stage, int k, float StepRecord::*field);

// DRAFT.loss.png (loss and its CE part per step, smoothed, the stage-2 boundary marked) and
// DRAFT.loss.tsv (step, stage, loss, ce, vloss). Returns the PNG's path.
std::string write_loss_report(const std::string& draft_path, const std::vector<StepRecord>& history);

// DRAFT.accept.png: acceptance by depth, chain beside tree. Returns its path.
struct TrainLoopOptions;
std::string write_accept_chart(const std::string& draft_path, const TrainLoopOptions& o, const TrainEval& e);

// The JSON summary's numbers that are neither options nor results.
struct TrainResult;
struct TrainTotals {
    const std::vector<std::pair<std::string, std::string>>* config;  // the run's config (as checkpointed)
    size_t data_seqs = 0;
    int64_t data_tokens = 0;
    int items = 0;
    long steps = 0, steps_per_epoch = 0;
    int64_t tokens_trained = 0;
    double train_seconds = 0, wall_seconds = 0;
    int threads = 0;
    // A device backend's runtime counters (ops.h) summed over this process's optimizer steps
    // (gradients + AdamW; checkpoint writes excluded); allocations from the second step on.
    bool has_device = false;
    long device_steps = 0;
    long long launches = 0, syncs = 0, allocs_after_first_step = 0, peak_device_bytes = 0;
    int arch = 0;                     // DraftArch
    int64_t params = 0;               // trainable parameters
    const TrainResult* res = nullptr;  // this process's per-stage peaks and step times (TrainResult)
};
// DRAFT.json; e: the evaluation (nullptr: none ran). Returns its path.
std::string write_train_json(const std::string& draft_path, const TrainLoopOptions& o, const TrainTotals& t,
                             const std::vector<StepRecord>& history, const TrainEval* e);

}  // namespace beagle
