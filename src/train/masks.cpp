// masks.cpp: the query rows of the two training stages (see masks.h). Called by the trainer
// (src/train/trainer.cpp) and the mask tests.
#include "masks.h"

#include "../core/common.h"

namespace beagle {

std::vector<int> stage1_rows(int T, int w, int offset) {
    BEAGLE_CHECK(w >= 1 && offset >= 0 && offset < w, "stage-1 mask: need w >= 1 and 0 <= offset < w, got w %d offset %d",
                 w, offset);
    std::vector<int> rows;
    for (int q = 0; q < T; q++)
        if (window_start(q, w, offset) >= 1) rows.push_back(q);
    return rows;
}

std::vector<int> stage2_rows(int T, int w, int offset, int s) {
    BEAGLE_CHECK(w >= 1 && offset >= 0 && offset < w, "stage-2 mask: need w >= 1 and 0 <= offset < w, got w %d offset %d",
                 w, offset);
    BEAGLE_CHECK(s >= 1 && s <= w, "stage-2 mask: step %d outside 1..w (w = %d)", s, w);
    std::vector<int> rows;
    for (int b = offset > 0 ? offset : w; b < T; b += w) {
        int q = b + s - 1;
        if (q < T) rows.push_back(q);
    }
    return rows;
}

int ttt_offset(int n, int k) {
    int off = 0;
    for (int j = 2; j < k; j++) off += n - j + 1;
    return off;
}

TttMask ttt_mask(int n, int k) {
    BEAGLE_CHECK(k >= 2 && k <= n, "training-time test mask: step %d outside 2..n (n = %d)", k, n);
    TttMask t;
    const int nq = n - k + 1, n1 = ttt_offset(n, k) + nq;
    t.words = (n1 + 63) / 64;
    t.qrow.resize(nq);
    t.bits.assign((size_t)nq * t.words, 0);
    for (int r = 0; r < nq; r++) {
        t.qrow[r] = r + 1;
        for (int j = 2; j <= k; j++) {
            const int row = ttt_offset(n, j) + r;
            t.bits[(size_t)r * t.words + row / 64] |= 1ull << (row % 64);
        }
    }
    return t;
}

}  // namespace beagle
