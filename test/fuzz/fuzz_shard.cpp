// fuzz_shard.cpp: libFuzzer harness for training data: a directory holding the bytes as
// shard-00000.bin ("BEAGLEDS": header, sequence table, tokens, f16 states, CRC-32) opened by Dataset,
// as they are and with the size field and the CRC rewritten to match (fuzz::fix_size_crc); and the
// same bytes as a meta.txt ("key value" lines) through read_meta().
#include "data/dataset.h"
#include "fuzz_common.h"

static void run(const uint8_t* data, size_t n) {
    const fuzz::ScratchDir& d = fuzz::scratch();
    try {
        beagle::read_meta(d.put("meta.txt", data, n));
    } catch (const beagle::Error&) {
    }
    d.remove("meta.txt");
    fuzz::load_raw_and_fixed(data, n, "shard-00000.bin", 40, [&](const std::string&) { beagle::Dataset ds(d.path); });
}
FUZZ_TARGET(run)
