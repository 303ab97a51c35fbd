// masks.h: the query rows each training stage computes (docs/method.md section 6), for the draft's cross-attention
// whose visibility rule, xattn_sees() with its windows, is the op's contract in
// src/backend/xattn_mask.h; test/unit/test_masks.cpp checks both against the method's text.
#pragma once
#include <cstdint>
#include <vector>

#include "../backend/xattn_mask.h"

namespace beagle {

// Stage 1: every query row whose window start is >= 1 (a query with no true state before it never
// occurs at inference, so it is neither computed nor trained).
std::vector<int> stage1_rows(int T, int w, int offset);
// Stage-2 step s (1-based): the rows b + s - 1 of every window with start b >= 1 that reach that far
// (b + s - 1 < min(b + w, T)).
std::vector<int> stage2_rows(int T, int w, int offset, int s);

// The EAGLE draft's training-time test (EAGLE-3, HASS; trainer.cpp run_eagle), over its n query rows: query
// i of step 1 is sequence row i + 1, input (E(t_{i+1}), noisy s_i), key row i of set 0 (step 1's own K/V).
// Step k >= 2 has n - k + 1 queries; its local query r is sequence row r + k, fed step k - 1's f^ of local
// row r (the prediction the draft would feed itself k - 1 tokens into a chain). Set 1 holds the K/V rows of
// steps 2..k one after another (step j's n - j + 1 rows from offset ttt_offset(n, j)). Query r of step k
// sees set-0 rows j <= r (the true rows before the chain: qrow r + 1 with set0_qrow) and, of every step
// 2..k, that step's local row r (the chain's earlier drafted positions and itself): a PREFIX mask.
int ttt_offset(int n, int k);  // first set-1 row of step k >= 2
struct TttMask {
    std::vector<int> qrow;        // r + 1
    std::vector<uint64_t> bits;   // words per query
    int words = 0;
    XAttnMask mask() const {      // PREFIX, set0_qrow, these bits (host)
        XAttnMask m;
        m.kind = XAttnMask::PREFIX;
        m.set0_qrow = true;
        m.set1_words = words;
        m.set1_bits = bits.data();
        return m;
    }
};
TttMask ttt_mask(int n, int k);

}  // namespace beagle
