// fuzz_llama2c.cpp: libFuzzer harness for llama2.c model files (headerless: 7 int32 config fields,
// then the weights, exact size check): load_model() on the bytes as model.bin, then the float copy.
#include "fuzz_common.h"
#include "io/model_file.h"

static void run(const uint8_t* data, size_t n) {
    std::string path = fuzz::scratch().put("model.bin", data, n);
    auto mf = beagle::load_model(path);
    beagle::dequantize_weights_f32(*mf);
}
FUZZ_TARGET(run)
