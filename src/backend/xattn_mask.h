// xattn_mask.h: the visibility rule of the draft's cross-attention (docs/method.md sections 3 and 6), the contract
// of the op xattn / xattn_bwd (ops.h XAttnMask): which rows of the two key sets a query sees. The CPU
// kernels (src/backend/cpu/) call it, the CUDA kernels (cuda/xattn.cu) implement the same rule on the
// device; test/unit/test_masks.cpp checks it against the method's text, the training stages' query rows are in
// src/train/masks.h.
#pragma once
#include <cstdint>

#include "ops.h"

namespace beagle {

// Start b of the window holding sequence row q: windows [b, b + w) with b = offset + m * w, plus the
// partial first window [0, offset) whose start is 0.
inline int window_start(int q, int w, int offset) { return q < offset ? 0 : offset + (q - offset) / w * w; }

// Does query t (at sequence row q) see row j of key set `set` (0 = true states, 1 = predicted)?
inline bool xattn_sees(const XAttnMask& m, int t, int q, int set, int j) {
    if (m.kind == XAttnMask::PREFIX) {
        if (set == 0) return !m.set0_qrow || j < q;
        return m.set1_bits && ((m.set1_bits[(int64_t)t * m.set1_words + j / 64] >> (j % 64)) & 1);
    }
    int b = window_start(q, m.w, m.offset);
    if (set == 0) return j < b;
    return j >= b && j < q && j < b + m.n_pred;
}

// Visible keys of query t in kernel order (set 0 ascending, then set 1 ascending), written to
// keys[] as j for set-0 row j and n0 + r for set-1 row r. Returns how many.
inline int xattn_visible(const XAttnMask& m, int t, int q, int n0, int n1, int* keys) {
    int nk = 0;
    if (m.kind == XAttnMask::BLOCK) {
        int b = window_start(q, m.w, m.offset);
        for (int j = 0; j < b && j < n0; j++) keys[nk++] = j;
        int end = q < b + m.n_pred ? q : b + m.n_pred;
        for (int r = b; r < end && r < n1; r++) keys[nk++] = n0 + r;
        return nk;
    }
    const int hi0 = m.set0_qrow && q < n0 ? q : n0;
    for (int j = 0; j < hi0; j++) keys[nk++] = j;
    if (m.set1_bits)
        for (int r = 0; r < n1; r++)
            if (xattn_sees(m, t, q, 1, r)) keys[nk++] = n0 + r;
    return nk;
}

}  // namespace beagle
