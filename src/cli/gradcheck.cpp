// gradcheck.cpp: `beagle gradcheck`: checks the draft's hand-written backward against central
// finite differences in float64 on a tiny random config (src/train/gradcheck.cpp), per tensor.
// Exit 0 iff every trainable tensor's relative error is within the tolerance.
#include <cstdio>

#include "../core/common.h"
#include "../model/draft.h"
#include "../train/gradcheck.h"
#include "args.h"
#include "commands.h"

namespace beagle {

int cmd_gradcheck(int argc, char** argv) {
    GradcheckOptions o;
    long stage = 1, T = o.T, w = o.w, S = o.S, offset = o.offset, seed = (long)o.seed;
    long dim = o.dim, heads = o.n_heads, kv_heads = o.n_kv_heads, head_dim = o.head_dim, ffn = o.ffn_dim;
    long vocab = o.vocab, chunk = o.vocab_chunk, state_layers = 0;
    double tol = o.tol, h = o.h;
    bool grad_through = false, hard = false, no_mask = false, plant = false;
    std::string arch = "beagle";
    Args a("gradcheck", "--stage 1|2 [--sim-grad-through] [options]",
           "Check the Beagle draft's analytic gradients (one training iteration) against central finite\n"
           "differences in float64 on a tiny random config; prints the relative error of every trainable tensor.\n"
           "--arch eagle checks the EAGLE-style draft's iteration instead (one objective in any stage; with --ttt\n"
           "and --stage 2 the training-time test over --S steps, its fed-back features held fixed); --arch medusa the\n"
           "Medusa heads' (W and b of --medusa-heads residual blocks, one objective in any stage).\n"
           "--arch moa checks the Mixture of Attentions draft (Layer Self-Attention over f and --state-layers rows,\n"
           "self-attention over the tokens, the cross-attention block; one objective in any stage).");
    a.str("--arch", &arch, "draft architecture: beagle | eagle | medusa | moa");
    long medusa_heads = o.medusa_heads;
    a.integer("--medusa-heads", &medusa_heads, "--arch medusa: the number of heads K");
    a.integer("--stage", &stage, "training stage: 1 (inverse block attention) or 2 (simulation)");
    a.flag("--sim-grad-through", &grad_through, "stage 2: gradients flow through the predicted states");
    bool ttt = false;
    a.flag("--ttt", &ttt, "--arch eagle --stage 2: the training-time test over --S steps");
    a.flag("--hard-labels", &hard, "token-label cross-entropy instead of the target's distribution");
    a.flag("--no-loss-mask", &no_mask, "every row contributes to the loss");
    a.integer("--T", &T, "sequence length");
    a.integer("--w", &w, "window size");
    a.integer("--S", &S, "stage 2: simulation steps");
    a.integer("--offset", &offset, "window offset in [0, w)");
    a.integer("--dim", &dim, "model width");
    a.integer("--heads", &heads, "attention heads");
    a.integer("--kv-heads", &kv_heads, "key/value heads");
    a.integer("--head-dim", &head_dim, "head dimension");
    a.integer("--ffn", &ffn, "MLP hidden size");
    a.integer("--vocab", &vocab, "vocabulary size");
    a.integer("--vocab-chunk", &chunk, "vocabulary entries per logits chunk");
    a.integer("--state-layers", &state_layers, "beagle: this many fused state layers (W_mix and their rows random);\n"
              "                               moa: this many layer rows besides f for Layer Self-Attention (0: 2)");
    a.integer("--seed", &seed, "random seed");
    a.number("--h", &h, "finite-difference step");
    a.number("--tol", &tol, "largest relative error that passes");
    a.flag("--plant-bug", &plant, "test: plant a 1e-4 relative error in swiglu's backward (the check must fail)");
    if (!a.parse(argc, argv)) return 0;
    if (!a.positional.empty()) fail("beagle gradcheck: unexpected argument '%s'", a.positional[0].c_str());
    if (stage != 1 && stage != 2) fail("beagle gradcheck: --stage must be 1 or 2, got %ld", stage);
    if (grad_through && stage != 2) fail("beagle gradcheck: --sim-grad-through needs --stage 2");
    if (ttt && (stage != 2 || arch != "eagle")) fail("beagle gradcheck: --ttt needs --arch eagle --stage 2");
    o.arch = parse_draft_arch(arch, "beagle gradcheck: --arch");
    if (medusa_heads < 1 || medusa_heads > kMaxMedusaHeads)
        fail("beagle gradcheck: --medusa-heads must be in 1..%d, got %ld", kMaxMedusaHeads, medusa_heads);
    o.medusa_heads = (int)medusa_heads;
    o.stage = (int)stage;
    o.sim_grad_through = grad_through;
    o.ttt = ttt;
    o.hard_labels = hard;
    o.loss_mask = !no_mask;
    o.T = (int)T;
    o.w = (int)w;
    o.S = (int)S;
    o.offset = (int)offset;
    o.dim = (int)dim;
    o.n_heads = (int)heads;
    o.n_kv_heads = (int)kv_heads;
    o.head_dim = (int)head_dim;
    o.ffn_dim = (int)ffn;
    o.vocab = (int)vocab;
    o.vocab_chunk = (int)chunk;
    o.seed = (uint64_t)seed;
    o.h = h;
    o.tol = tol;
    o.plant_bug = plant;
    if (state_layers < 0 || state_layers > kMaxStateLayers)
        fail("beagle gradcheck: --state-layers must be in 0..%d, got %ld", kMaxStateLayers, state_layers);
    o.state_layers = (int)state_layers;
    if (o.arch == ARCH_MOA && o.state_layers == 0) o.state_layers = 2;  // LSA needs rows to attend over
    return run_gradcheck(o, stdout) ? 0 : 1;
}

}  // namespace beagle
