// fuzz_prompts.cpp: libFuzzer harness for prompt files: load_prompts() on the bytes (a JSON array of
// records, JSON lines, or plain text lines; UTF-8 checked), which runs the JSON and JSONL parsers.
#include "data/prompts.h"
#include "fuzz_common.h"

static void run(const uint8_t* data, size_t n) {
    beagle::load_prompts(fuzz::scratch().put("prompts.txt", data, n));
}
FUZZ_TARGET(run)
