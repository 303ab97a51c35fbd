// fuzz_tokenizer_model.cpp: libFuzzer harness for SentencePiece tokenizer.model files (protobuf
// ModelProto, parsed by hand): load_tokenizer_file(), then a tokenizer built from the result.
#include "fuzz_common.h"
#include "io/model_file.h"

static void run(const uint8_t* data, size_t n) {
    fuzz::exercise_tokenizer(beagle::load_tokenizer_file(fuzz::scratch().put("tokenizer.model", data, n)));
}
FUZZ_TARGET(run)
