// masks.h: the draft's cross-attention visibility rule (SPEC 3, "Mask rule") as parameters, and the
// query rows each training stage computes. The CPU kernels (src/backend/cpu/ops_cpu_train.cpp) and
// the CUDA kernels implement exactly xattn_sees(); test/unit/test_masks.cpp checks it against SPEC's text.
#pragma once
#include <cstdint>
#include <vector>

#include "../backend/ops.h"

namespace beagle {

// Start b of the window holding sequence row q: windows [b, b + w) with b = offset + m * w, plus the
// partial first window [0, offset) whose start is 0.
inline int window_start(int q, int w, int offset) { return q < offset ? 0 : offset + (q - offset) / w * w; }

// Does query t (at sequence row q) see row j of key set `set` (0 = true states, 1 = predicted)?
inline bool xattn_sees(const XAttnMask& m, int t, int q, int set, int j) {
    if (m.kind == XAttnMask::PREFIX) {
        if (set == 0) return true;
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
    for (int j = 0; j < n0; j++) keys[nk++] = j;
    if (m.set1_bits)
        for (int r = 0; r < n1; r++)
            if (xattn_sees(m, t, q, 1, r)) keys[nk++] = n0 + r;
    return nk;
}

// Stage 1: every query row whose window start is >= 1 (a query with no true state before it never
// occurs at inference, so it is neither computed nor trained).
std::vector<int> stage1_rows(int T, int w, int offset);
// Stage-2 step s (1-based): the rows b + s - 1 of every window with start b >= 1 that reach that far
// (b + s - 1 < min(b + w, T)).
std::vector<int> stage2_rows(int T, int w, int offset, int s);

}  // namespace beagle
