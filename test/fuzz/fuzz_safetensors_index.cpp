// fuzz_safetensors_index.cpp: libFuzzer harness for model.safetensors.index.json (weight_map: shard
// names, tensor-to-shard claims): the bytes are the index in an HF directory with a fixed tiny
// config.json and two fixed shards, model-00001-of-00002.safetensors (embedding, final norm) and
// model-00002-of-00002.safetensors (the layers); load_model() on the directory.
#include "fuzz_common.h"
#include "io/model_file.h"

static void run(const uint8_t* data, size_t n) {
    const fuzz::ScratchDir& d = fuzz::scratch();
    static const bool init = [&] {
        std::vector<lt::StT> ts = lt::tiny_hf_tensors(fuzz::kTinyHF);
        std::vector<lt::StT> first(ts.begin(), ts.begin() + 2), rest(ts.begin() + 2, ts.end());
        d.put("config.json", lt::tiny_hf_config(fuzz::kTinyHF));
        d.put("model-00001-of-00002.safetensors", fuzz::bytes(lt::st_build(first)));
        d.put("model-00002-of-00002.safetensors", fuzz::bytes(lt::st_build(rest)));
        return true;
    }();
    (void)init;
    d.put("model.safetensors.index.json", data, n);
    beagle::load_model(d.path);
}
FUZZ_TARGET(run)
