// fuzz_safetensors.cpp: libFuzzer harness for .safetensors files (8-byte header length, JSON header:
// dtypes, shapes, data_offsets, __metadata__; data ranges): the bytes are model.safetensors in an HF
// directory whose config.json is a fixed tiny llama (fuzz_hf_config.cpp fuzzes that file);
// load_model() on the directory, then the float copy of the weights.
#include "fuzz_common.h"
#include "io/model_file.h"

static void run(const uint8_t* data, size_t n) {
    const fuzz::ScratchDir& d = fuzz::scratch();
    static const bool init = (d.put("config.json", lt::tiny_hf_config(fuzz::kTinyHF)), true);
    (void)init;
    d.put("model.safetensors", data, n);
    auto mf = beagle::load_model(d.path);
    beagle::dequantize_weights_f32(*mf);
}
FUZZ_TARGET(run)
