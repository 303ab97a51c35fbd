// checkpoint.h: the training checkpoint, a container (src/io/container.h) that run_train
// (train_loop.cpp) writes atomically every --ckpt-every steps and at the end, and --resume reads:
// the run's config and position as text, the draft's weights and AdamW moments, the data order and
// the loss history, so that a resumed run repeats the straight run's arithmetic exactly.
//
// File ("BEAGLECK"), little-endian:
//   0 "BEAGLECK"  8 u32 version (1)  12 u32 text_len  16 u64 file_size  24 text ("key value\n"
//   lines: the run's config, then its state: step, epoch, position, RNG states, ...)
//   then f32 sections: per trainable tensor weights, AdamW m, AdamW v (DT order); u32 data order
//   (n_items); history (n_steps x {f32 loss, ce, vloss, i32 stage}); last 4 bytes CRC-32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "../io/container.h"
#include "../model/draft.h"
#include "../core/rng.h"

namespace beagle {

// One optimizer step's record (also kept in checkpoints, so the loss curve survives a resume).
struct StepRecord {
    float loss, ce, vloss;
    int stage;
};

// Where a run stands: everything a checkpoint restores besides weights and moments.
struct TrainState {
    long step = 0;                            // optimizer steps done
    int epoch = 0, pos = 0;                   // the current epoch; the next position in its order
    int adam_steps = 0;
    TrainRng shuffle{0}, offset{0}, noise{0};  // the three random streams (data order, window offset, noise)
    double train_seconds = 0;
    int64_t tokens_seen = 0;
    std::vector<uint32_t> order;              // the epoch's item order
    std::vector<StepRecord> history;          // one record per step done
};

struct Checkpoint {
    KeyValues kv;  // config + state
    std::vector<float> w[DT_COUNT], m[DT_COUNT], v[DT_COUNT];
    std::vector<uint32_t> order;
    std::vector<StepRecord> history;
    std::string get(const std::string& key) const { return kv.get(key); }  // "" if absent
};

// The checkpoint of a run with this config (key/value pairs) in state st; weights and moments are
// left for the caller to fill.
Checkpoint checkpoint_of(const std::vector<std::pair<std::string, std::string>>& config, const TrainState& st);
// c's state; throws unless every config key equals c's (naming the first that differs).
TrainState resume_state(const Checkpoint& c, const std::vector<std::pair<std::string, std::string>>& config,
                        const std::string& path);

void save_checkpoint(const std::string& path, const Checkpoint& c, const DraftConfig& cfg);
// Validates magic, sizes and CRC; tensor sizes from the stored config.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace beagle
