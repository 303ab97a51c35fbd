// fuzz_gguf.cpp: libFuzzer harness for GGUF files: load_model() on the bytes as model.gguf (header,
// metadata values and arrays, tensor infos, offsets, alignment, config and tokenizer metadata), then
// the float copy of the weights (reads every tensor's data by dtype) and the tokenizer it carries.
#include "fuzz_common.h"
#include "io/model_file.h"

static void run(const uint8_t* data, size_t n) {
    std::string path = fuzz::scratch().put("model.gguf", data, n);
    auto mf = beagle::load_model(path);
    beagle::dequantize_weights_f32(*mf);
    fuzz::exercise_tokenizer(mf->tokenizer);
}
FUZZ_TARGET(run)
