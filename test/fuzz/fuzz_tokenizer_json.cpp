// fuzz_tokenizer_json.cpp: libFuzzer harness for HF tokenizer.json files (JSON parser, model.vocab,
// merges in both spellings, added_tokens, pre-tokenizer and decoder sections):
// load_tokenizer_file(), then a tokenizer built from the result.
#include "fuzz_common.h"
#include "io/model_file.h"

static void run(const uint8_t* data, size_t n) {
    fuzz::exercise_tokenizer(beagle::load_tokenizer_file(fuzz::scratch().put("tokenizer.json", data, n)));
}
FUZZ_TARGET(run)
