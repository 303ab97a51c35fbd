// plan.h: the memory plans of `beagle generate --plan` (inference: target weights, KV cache,
// activations, draft) and `beagle train --plan` (draft training): the geometry both parse, and the
// commands. Each prints the buffers the code allocates, from the lists the constructors allocate from.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "../core/dtype.h"
#include "../model/llama.h"

namespace beagle {

struct DraftOptions;

// A target geometry: presets 7b (Llama-2-7B: dim 4096, heads 32/8, ffn 11008, vocab 32000, 32 layers),
// 7b-mha (kv 32), 7b-llama3 (vocab 128256), 70b (dim 8192, heads 64/8, ffn 28672, vocab 128256, 80
// layers), then comma-separated key=value overrides (dim, heads, kv, ffn, vocab, layers) and, where
// weights matter (generate), a matrix dtype: q4_0, q4_1, q8_0, f16, bf16, f32 (default q4_1).
struct PlanGeometry {
    std::map<std::string, long> g;
    DType wtype = DType::Q4_1;
};
PlanGeometry parse_plan_geometry(const std::string& geometry, const char* cmd, bool dtypes);
// The geometry's target (max_seq 4096) and its weights' lines, in the geometry's matrix dtype.
LlamaConfig plan_target(const PlanGeometry& p, std::vector<MemLine>* lines);
// The lines of the buffers a Llama(c, ops, ctx, max_batch) allocates besides its weights (llama_buffers).
std::vector<MemLine> plan_llama_buffers(const LlamaConfig& c, int ctx, int max_batch);

int train_plan(const std::string& geometry, int T, int w, int S, bool grad_through, int ranks, int batch, int arch,
               const std::vector<int>& state_layers, bool ttt = false);
// `beagle generate --plan GEOMETRY|model`: "model" plans the -m file's own tensors. draft: a draft file,
// or empty for a Beagle draft of the target's shape (ffn = the target's); ctx 0: as generate (the
// model's, at most 4096); tree: the draft's buffers for tree drafting (else chain). Exit code 0 when the total is under 24 GiB, else 2.
int generate_plan(const std::string& geometry, const std::string& model, const std::string& draft, int ctx,
                  int batch, const DraftOptions& d, bool tree);

}  // namespace beagle
