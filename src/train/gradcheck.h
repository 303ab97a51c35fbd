// gradcheck.h: the gradient check of the draft's hand-written backward (`beagle gradcheck`): a tiny
// random draft in float64 (CpuOps64, the same templates as the float training path), one training
// iteration's analytic gradients against central finite differences of the loss, per tensor.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace beagle {

struct GradcheckOptions {
    int arch = 0;                   // DraftArch: 0 Beagle, 1 EAGLE, 2 Medusa (one objective: stage and window unused)
    int medusa_heads = 3;           // Medusa: K heads
    int stage = 1;
    bool sim_grad_through = false;
    bool ttt = false;               // EAGLE draft, stage 2: training-time test (its f^ inputs held fixed)  // stage 2: plain finite differences; else predicted states held fixed
    bool hard_labels = false;
    int dim = 16, n_heads = 4, n_kv_heads = 2, head_dim = 4, ffn_dim = 24, vocab = 40;
    int T = 13, w = 3, S = 3, offset = 1, vocab_chunk = 16, pos0 = 3;
    bool loss_mask = true;          // mask a few rows out of the loss
    int state_layers = 0;           // Beagle: E fused state layers (W_mix random, their rows random)
    float noise_std = 0.2f;
    uint64_t seed = 1;
    double h = 1e-6;                // finite-difference step
    double tol = 1e-5;              // pass if every tensor's relative error <= tol
    bool plant_bug = false;         // test only: a 1e-4 relative error in swiglu's backward (CpuOps64); printed
};

struct GradcheckTensor {
    std::string name;
    int64_t n = 0;
    double grad_norm = 0, fd_norm = 0;
    double rel = 0;      // |g - fd|_2 / max(|g|_2, |fd|_2)
    double max_rel = 0;  // max_k |g_k - fd_k| / |fd|_inf
    bool pass = false;
};

// Runs the check, prints a table to `out` (if not null); returns true iff every tensor passes.
bool run_gradcheck(const GradcheckOptions& o, FILE* out, std::vector<GradcheckTensor>* result = nullptr);

}  // namespace beagle
