// plan.cpp: the geometry of `--plan` (shared by generate and train) and `beagle generate --plan`: the
// device memory of speculative inference on the CUDA backend (target weights in their stored dtype, KV
// cache for -c, activations for -b, the draft's weights, KV and activations), from the buffer lists
// the constructors allocate from (llama_buffers, draft_weight_buffers, draft_inference_buffers).
// test/cli/test_7b_shaped.sh checks the total against the counting allocator's peak under cuda-emu.
#include "plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "../../cuda/attn_split.h"
#include "../backend/gpu/cuda_ops.h"
#include "../core/common.h"
#include "../decode/beagle_drafter.h"
#include "../decode/medusa_drafter.h"
#include "../io/model_file.h"
#include "../model/draft.h"
#include "../model/llama.h"
#include "draft_options.h"

namespace beagle {

PlanGeometry parse_plan_geometry(const std::string& geometry, const char* cmd, bool dtypes) {
    PlanGeometry p;
    std::map<std::string, long>& g = p.g;
    g = {{"dim", 4096}, {"heads", 32}, {"kv", 8}, {"ffn", 11008}, {"vocab", 32000}, {"layers", 32}};
    std::string rest = geometry;
    if (rest.rfind("70b", 0) == 0) {  // Llama-3-70B-shaped: dim 8192, 64/8 heads, ffn 28672, vocab 128256
        g = {{"dim", 8192}, {"heads", 64}, {"kv", 8}, {"ffn", 28672}, {"vocab", 128256}, {"layers", 80}};
        rest = rest.substr(3);
    } else if (rest.rfind("7b-mha", 0) == 0) { g["kv"] = 32; rest = rest.substr(6); }
    else if (rest.rfind("7b-llama3", 0) == 0) { g["vocab"] = 128256; rest = rest.substr(9); }
    else if (rest.rfind("7b", 0) == 0) rest = rest.substr(2);
    const std::map<std::string, DType> types = {{"q4_0", DType::Q4_0}, {"q4_1", DType::Q4_1}, {"q8_0", DType::Q8_0},
                                                {"f16", DType::F16},   {"bf16", DType::BF16}, {"f32", DType::F32}};
    for (size_t b = 0; b < rest.size();) {
        if (rest[b] == ',') { b++; continue; }
        size_t e = rest.find(',', b);
        if (e == std::string::npos) e = rest.size();
        std::string kv = rest.substr(b, e - b);
        b = e + 1;
        if (dtypes && types.count(kv)) {
            p.wtype = types.at(kv);
            continue;
        }
        size_t eq = kv.find('=');
        if (eq == std::string::npos || !g.count(kv.substr(0, eq)))
            fail("%s: expected 7b, 7b-mha, 7b-llama3, 70b and/or key=value with keys dim, heads, kv, ffn, vocab, layers%s; "
                 "got '%s'", cmd, dtypes ? " and a dtype (q4_0, q4_1, q8_0, f16, bf16, f32)" : "", kv.c_str());
        char* end = nullptr;
        long v = strtol(kv.c_str() + eq + 1, &end, 10);
        if (*end || v <= 0) fail("%s: '%s' needs a positive integer", cmd, kv.c_str());
        g[kv.substr(0, eq)] = v;
    }
    BEAGLE_CHECK(g["dim"] % g["heads"] == 0 && g["heads"] % g["kv"] == 0, "%s: heads must divide dim and kv heads divide heads",
                 cmd);
    return p;
}

LlamaConfig plan_target(const PlanGeometry& p, std::vector<MemLine>* lines) {
    LlamaConfig c;
    c.dim = (int)p.g.at("dim");
    c.n_heads = (int)p.g.at("heads");
    c.n_kv_heads = (int)p.g.at("kv");
    c.head_dim = c.dim / c.n_heads;
    c.ffn_dim = (int)p.g.at("ffn");
    c.vocab_size = (int)p.g.at("vocab");
    c.n_layers = (int)p.g.at("layers");
    c.max_seq = 4096;
    const double D = c.dim, q = (double)c.n_heads * c.head_dim, kv = (double)c.n_kv_heads * c.head_dim;
    auto mat = [&](double rows, uint64_t cols) { return rows * dtype_row_bytes(p.wtype, cols); };
    double layer = mat(q, c.dim) + 2 * mat(kv, c.dim) + mat(D, (uint64_t)q) + 2 * mat(c.ffn_dim, c.dim) +
                   mat(D, c.ffn_dim) + 2 * 4 * D;
    lines->push_back({"target embedding + LM head", 2 * mat(c.vocab_size, c.dim)});
    lines->push_back({"target layers (matrices + norms)", c.n_layers * layer});
    lines->push_back({"target final norm (f32)", 4 * D});
    return c;
}

std::vector<MemLine> plan_llama_buffers(const LlamaConfig& c, int ctx, int max_batch) {
    std::vector<MemLine> lines;
    for (const LlamaBuffer& b : llama_buffers(c, ctx, max_batch))
        lines.push_back({b.count > 1 ? strfmt("%s x %d", b.name, b.count) : std::string(b.name), 4.0 * b.floats * b.count});
    return lines;
}

int generate_plan(const std::string& geometry, const std::string& model, const std::string& draft, int ctx,
                  int batch, const DraftOptions& d, bool tree) {
    const double GiB = 1024.0 * 1024 * 1024;
    LlamaConfig c;
    std::vector<MemLine> lines;
    std::unique_ptr<ModelFile> mf;
    const char* wname;
    if (geometry == "model") {  // the file's own tensors, as CudaOps::weight uploads them
        if (model.empty()) fail("beagle generate --plan model: give the model with -m");
        mf = load_model(model);
        c = mf->config;
        wname = dtype_name(mf->weights.layers.empty() ? mf->weights.tok_embd.dtype : mf->weights.layers[0].wq.dtype);
        lines.push_back({"target weights (as stored)", llama_weight_bytes(mf->weights)});
    } else {
        PlanGeometry p = parse_plan_geometry(geometry, "beagle generate --plan", true);
        c = plan_target(p, &lines);
        wname = dtype_name(p.wtype);
    }
    if (ctx <= 0) ctx = std::min(c.max_seq > 0 ? c.max_seq : 4096, 4096);  // as Session does
    for (const MemLine& l : plan_llama_buffers(c, ctx, batch)) lines.push_back(l);
    // the attention's split-KV partials, the scratch slot CudaOps::reserve sizes for the target (Llama's
    // ScratchSizes: rows max_batch, keys ctx) at the default slice length (BEAGLE_CUDA_ATTN_SPLIT changes it)
    const int split_rows = std::min(std::max(batch, 1), ATTN_SPLIT_MAX_T);
    lines.push_back({strfmt("attention split-KV partials (%d rows, %d-key slices)", split_rows, ATTN_SPLIT),
                     (double)cuda_scratch_slot_bytes(attn_partials_bytes(
                         split_rows, c.n_heads, c.head_dim, std::max(ctx - split_rows, 0), ATTN_SPLIT))});
    // the draft (with -d, or for a geometry a Beagle draft of the target's shape), as BeagleDrafter
    // builds it: Draft(ctx, max_pred + 1, max(topk, 1)), its matrices' Q8_0 copies unless --draft-f32
    const bool with_draft = !draft.empty() || geometry != "model";
    DraftConfig dc;
    if (with_draft) {
        dc = draft.empty() ? draft_config_for_target(c, TokenizerSpec()) : load_draft(draft).cfg;
        const int max_pred = beagle_max_pred(tree, (int)d.gamma, (int)d.depth, (int)d.topk);
        if (dc.n_extra()) {  // the target keeps the fused layers' rows beside its states (Llama::set_state_layers)
            const LlamaBuffer b = llama_state_rows_buffer(c, batch, dc.n_extra());
            lines.push_back({strfmt("%s, E = %d", b.name, dc.n_extra()), 4.0 * b.floats});
        }
        if (dc.arch == ARCH_MEDUSA) {  // MedusaDrafter: its heads on one state, no Draft
            for (const MemLine& l : medusa_drafter_buffers(dc)) lines.push_back(l);
        } else {
            for (const MemLine& l : draft_weight_buffers(dc, !d.draft_f32)) lines.push_back(l);
            for (const MemLine& l : draft_inference_buffers(dc, ctx, max_pred + 1, std::max((int)d.topk, 1)))
                lines.push_back(l);
        }
    }

    printf("inference memory plan, CUDA backend (ctx %d, max batch %d, one sequence", ctx, batch);
    if (with_draft) printf(", %s draft: %s)\n", tree ? "tree" : "chain",
                           tree ? strfmt("depth %ld, topk %ld", d.depth, d.topk).c_str() : strfmt("gamma %ld", d.gamma).c_str());
    else printf(", no draft)\n");
    printf("target: %d layers, dim %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, matrices %s\n", c.n_layers, c.dim,
           c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.vocab_size, wname);
    if (with_draft)
        printf("draft:  %s, dim %d, heads %d/%d, ffn %d, vocab %d%s (%s)\n", draft_arch_name(dc.arch), dc.dim, dc.n_heads, dc.n_kv_heads, dc.ffn_dim,
               dc.vocab_size, dc.n_extra() ? (", state layers " + format_layer_list(dc.state_layers)).c_str() : "",
               draft.empty() ? "a Beagle draft of the target's shape" : draft.c_str());
    printf("\n");
    printf("%-66s %12s\n", "buffer", "GiB");
    double total = 0;
    for (const MemLine& l : lines) {
        printf("%-66s %12.4f\n", l.name.c_str(), l.bytes / GiB);
        total += l.bytes;
    }
    printf("%-66s %12.4f  %s 24 GiB\n", "TOTAL (plus the backend's scratch: see docs/gpu.md)", total / GiB,
           total < 24 * GiB ? "<" : ">=");
    printf("total_bytes %.0f\n", total);
    return total < 24 * GiB ? 0 : 2;
}

}  // namespace beagle
