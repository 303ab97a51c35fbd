// fuzz_hf_config.cpp: libFuzzer harness for HF config.json files (JSON parser, hyper-parameter keys,
// rope_scaling): the bytes are config.json beside a fixed tiny model.safetensors; load_model() on
// the directory.
#include "fuzz_common.h"
#include "io/model_file.h"

static void run(const uint8_t* data, size_t n) {
    const fuzz::ScratchDir& d = fuzz::scratch();
    static const bool init = (d.put("model.safetensors", fuzz::bytes(lt::st_build(lt::tiny_hf_tensors(fuzz::kTinyHF)))), true);
    (void)init;
    d.put("config.json", data, n);
    beagle::load_model(d.path);
}
FUZZ_TARGET(run)
