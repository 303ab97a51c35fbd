// fuzz_draft.cpp: libFuzzer harness for draft files ("BEAGLEDR": header, config text, tensor table,
// f32 data, d2t, CRC-32): load_draft() on the bytes as they are, then with the size field and the
// CRC rewritten to match (fuzz::fix_size_crc) so that mutations reach the config and the table.
#include "fuzz_common.h"
#include "model/draft.h"

static void run(const uint8_t* data, size_t n) {
    fuzz::load_raw_and_fixed(data, n, "draft.bin", 24, [](const std::string& p) { beagle::load_draft(p); });
}
FUZZ_TARGET(run)
