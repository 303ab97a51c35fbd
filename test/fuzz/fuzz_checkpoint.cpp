// fuzz_checkpoint.cpp: libFuzzer harness for training checkpoints ("BEAGLECK": header, config and
// state text, weights and AdamW moments, data order, loss history, CRC-32): load_checkpoint() on the
// bytes as they are, then with the size field and the CRC rewritten to match (fuzz::fix_size_crc).
#include "fuzz_common.h"
#include "train/train_loop.h"

static void run(const uint8_t* data, size_t n) {
    fuzz::load_raw_and_fixed(data, n, "draft.ckpt", 16, [](const std::string& p) { beagle::load_checkpoint(p); });
}
FUZZ_TARGET(run)
