// train_plan.cpp: `beagle train --plan GEOMETRY`: the memory budget of draft training for a target
// geometry (e.g. a 7B-class Llama) at batch 1, from the same buffer list the trainer allocates
// (train_memory() in src/train/trainer.cpp, checked against the counting allocator by
// test/unit/test_stage2_memory.cpp). Shows that stage 2 adds one KV set, not S of them; --arch eagle: the
// EAGLE-style draft's budget next to the Beagle draft's of the same geometry. With --ranks N:
// the budget per GPU of a data-parallel run (train/data_parallel.h rank_memory): AdamW moments sharded
// 1/N (ZeRO-1, as the trainer runs) next to replicated ones, and the bytes each rank sends per step.
// Tokens-only data adds the target that computes the states (its weights in the geometry's dtype, q4_1 unless
// given, and its prefill buffers).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "../core/common.h"
#include "../model/draft.h"
#include "../model/llama.h"
#include "../train/data_parallel.h"
#include "../train/trainer.h"
#include "plan.h"

namespace beagle {

namespace {

void print_ranks(const TrainMemory& m, int ranks, int batch, double target) {
    const double GiB = 1024.0 * 1024 * 1024;
    printf("\nper GPU with %d ranks (one GPU each), global batch %d (%d items per rank, one at a time):\n", ranks, batch,
           (batch + ranks - 1) / ranks);
    RankMemory r = rank_memory(m, ranks, batch);
    printf("%-58s %12s %12s\n", "buffer (GiB)", "ZeRO-1", "replicated");
    printf("%-58s %12.3f %12.3f\n", "draft weights", m.weights / GiB, m.weights / GiB);
    printf("%-58s %12.3f %12.3f\n", "gradients (the batch's sum)", m.weights / GiB, m.weights / GiB);
    printf("%-58s %12.3f %12.3f\n", "gradient tree: partial sums + receive buffer", r.extra_grads / GiB, r.extra_grads / GiB);
    printf("%-58s %12.3f %12.3f\n", "AdamW moments m, v (ZeRO-1: this rank's 1/N slice)", r.moments_sharded / GiB,
           r.moments_replicated / GiB);
    const double frozen = m.persistent - 4 * m.weights;
    printf("%-58s %12.3f %12.3f\n", "frozen embedding + LM head + final norm", frozen / GiB, frozen / GiB);
    printf("%-58s %12.3f %12.3f\n", "iteration peak", m.iteration_peak / GiB, m.iteration_peak / GiB);
    printf("%-58s %12.3f %12.3f  %s 24 GiB\n", "TOTAL per GPU (stored states)", r.sharded / GiB, r.replicated / GiB,
           r.sharded < 24 * GiB ? "<" : ">=");
    printf("%-58s %12.3f %12.3f\n", "the target computing the states (tokens-only data)", target / GiB, target / GiB);
    printf("%-58s %12.3f %12.3f  %s 24 GiB\n", "TOTAL per GPU, states from tokens", (r.sharded + target) / GiB,
           (r.replicated + target) / GiB, r.sharded + target < 24 * GiB ? "<" : ">=");
    int levels = 0;
    while ((1 << levels) < ranks) levels++;
    printf("sent per rank per optimizer step: gradients %d butterfly level(s) x %.3f GiB + weight slices %.3f GiB = %.3f GiB\n",
           levels, m.weights / GiB, (r.exchange_bytes - levels * m.weights) / GiB, r.exchange_bytes / GiB);
}

}  // namespace

int train_plan(const std::string& geometry, int T, int w, int S, bool grad_through, int ranks, int batch, int arch,
               const std::vector<int>& state_layers, bool ttt) {
    const PlanGeometry pg = parse_plan_geometry(geometry, "beagle train --plan", true);
    std::map<std::string, long> g = pg.g;
    DraftConfig c;
    c.dim = (int)g["dim"];
    c.n_heads = (int)g["heads"];
    c.n_kv_heads = (int)g["kv"];
    BEAGLE_CHECK(c.dim % c.n_heads == 0 && c.n_heads % c.n_kv_heads == 0, "beagle train --plan: heads must divide dim and kv heads divide heads");
    c.head_dim = c.dim / c.n_heads;
    c.ffn_dim = (int)g["ffn"];
    c.vocab_size = (int)g["vocab"];
    c.arch = arch;
    c.state_layers = state_layers;  // Beagle or MoA (validate says so); layers of the geometry's target
    c.target_n_layers = (int)g["layers"];
    c.validate("beagle train --plan");
    const bool eagle = arch == ARCH_EAGLE;
    const double GiB = 1024.0 * 1024 * 1024;
    if (eagle && ttt)
        printf("EAGLE-style draft training memory plan (fp32 weights/grads/AdamW, batch 1, seq %d: stage 2, training-time "
               "test over S = %d steps)\n", T, S);
    else if (eagle)
        printf("EAGLE-style draft training memory plan (fp32 weights/grads/AdamW, batch 1, seq %d: one step, any stage)\n", T);
    else if (arch == ARCH_MOA)
        printf("Mixture of Attentions draft training memory plan (fp32 weights/grads/AdamW, batch 1, seq %d, window %d: "
               "one step, any stage)\n", T, w);
    else
        printf("draft training memory plan (fp32 weights/grads/AdamW, batch 1, seq %d, window %d)\n", T, w);
    printf("geometry: dim %d, heads %d, kv heads %d, head_dim %d, ffn %d, vocab %d%s\n\n", c.dim, c.n_heads, c.n_kv_heads,
           c.head_dim, c.ffn_dim, c.vocab_size,
           c.n_extra() ? (", state layers " + format_layer_list(c.state_layers)).c_str() : "");
    TrainOptions o;
    o.w = w;
    o.S = S;
    o.sim_grad_through = grad_through;
    o.ttt = ttt;
    o.stage = 2;
    TrainMemory m = train_memory(c, o, T, 1 % w);
    printf("%-58s %12s\n", arch != ARCH_BEAGLE ? "buffer" : "buffer (stage 2, S as given)", "GiB");
    for (const MemLine& l : m.lines) printf("%-58s %12.3f\n", l.name.c_str(), l.bytes / GiB);
    double total = m.persistent + m.iteration_peak;
    printf("%-58s %12.3f\n", "persistent (weights + grads + AdamW + frozen)", m.persistent / GiB);
    printf("%-58s %12.3f\n", "iteration peak", m.iteration_peak / GiB);
    printf("%-58s %12.3f  %s 24 GiB\n\n", "TOTAL with stored states (datagen --keep-states)", total / GiB,
           total < 24 * GiB ? "<" : ">=");
    // tokens-only data (datagen's default): the target computes the states in the loop (TargetStates): its
    // weights and the buffers of a Llama of context T and max batch min(T, 256), with the state layers' rows
    std::vector<MemLine> tl;
    const LlamaConfig tc = plan_target(pg, &tl);
    const int mb = std::min(T, 256);
    for (const MemLine& l : plan_llama_buffers(tc, T, mb)) tl.push_back(l);
    if (c.n_extra()) {
        const LlamaBuffer b = llama_state_rows_buffer(tc, mb, c.n_extra());
        tl.push_back({b.name, 4.0 * b.floats});
    }
    double target = 0;
    printf("the target, computing the states from tokens (datagen's default; matrices %s, context %d, batch %d):\n",
           dtype_name(pg.wtype), T, mb);
    for (const MemLine& l : tl) {
        printf("  %-56s %12.3f\n", l.name.c_str(), l.bytes / GiB);
        target += l.bytes;
    }
    total += target;
    printf("%-58s %12.3f  %s 24 GiB\n\n", "TOTAL with states from tokens", total / GiB, total < 24 * GiB ? "<" : ">=");
    if (arch == ARCH_MOA) {
        if (ranks > 1) print_ranks(m, ranks, batch, target);
        return total < 24 * GiB ? 0 : 2;
    }
    if (eagle) {  // the paper's comparison: the Beagle draft of the same geometry, stage 2 with S as given
        DraftConfig cb = c;
        cb.arch = ARCH_BEAGLE;
        const TrainMemory b = train_memory(cb, o, T, 1 % w);
        TrainOptions o1 = o;
        o1.stage = 1;
        const TrainMemory b1 = train_memory(cb, o1, T, 1 % w);
        const double b_total = b.persistent + std::max(b.iteration_peak, b1.iteration_peak) + target;
        printf("the Beagle draft of this geometry (window %d): iteration peak stage 1 %.3f GiB, stage 2 (S = %d) %.3f GiB; "
               "TOTAL %.3f GiB (the larger)\n"
               "EAGLE / Beagle: iteration peak %.2fx of stage 1, %.2fx of stage 2; TOTAL %.2fx; trainable weights %.2fx\n",
               w, b1.iteration_peak / GiB, S, b.iteration_peak / GiB, b_total / GiB, m.iteration_peak / b1.iteration_peak,
               m.iteration_peak / b.iteration_peak, total / b_total, m.weights / b.weights);
        if (ranks > 1) print_ranks(m, ranks, batch, target);
        return total < 24 * GiB ? 0 : 2;
    }
    // S sweep at one window size (w = 6 fits S <= 6), so only S changes
    int ws = std::max(6, w);
    printf("stage 2 iteration peak by S (window %d):\n%-6s %16s %16s %16s\n", ws, "S", "iteration GiB", "minus S=1 GiB",
           "one KV set GiB");
    double base = 0, worst = 0;
    for (int s = 1; s <= 6; s++) {
        TrainOptions os = o;
        os.S = s;
        os.w = ws;
        TrainMemory ms = train_memory(c, os, T, 1);
        if (s == 1) base = ms.iteration_peak;
        worst = std::max(worst, ms.iteration_peak - base);
        printf("%-6d %16.3f %16.3f %16.3f\n", s, ms.iteration_peak / GiB, (ms.iteration_peak - base) / GiB, ms.kv_set / GiB);
    }
    printf("\nthe part that depends on S is at most %.3f GiB = %.2f KV sets (one predicted KV set, written in place)%s\n",
           worst / GiB, worst / m.kv_set,
           grad_through ? "\n(--sim-grad-through keeps the activations of all steps: memory grows with S)" : "");
    if (ranks > 1) print_ranks(m, ranks, batch, target);
    return total < 24 * GiB ? 0 : 2;
}

}  // namespace beagle
