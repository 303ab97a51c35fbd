// fuzz_tokenizer_bin.cpp: libFuzzer harness for llama2.c tokenizer.bin files (max_token_length, then
// score, length, bytes per token): load_tokenizer_file(), then a tokenizer built from the result.
#include "fuzz_common.h"
#include "io/model_file.h"

static void run(const uint8_t* data, size_t n) {
    fuzz::exercise_tokenizer(beagle::load_tokenizer_file(fuzz::scratch().put("tokenizer.bin", data, n)));
}
FUZZ_TARGET(run)
