// masks.h: the query rows each training stage computes (SPEC 3), for the draft's cross-attention
// whose visibility rule, xattn_sees() with its windows, is the op's contract in
// src/backend/xattn_mask.h; test/unit/test_masks.cpp checks both against SPEC's text.
#pragma once
#include <vector>

#include "../backend/xattn_mask.h"

namespace beagle {

// Stage 1: every query row whose window start is >= 1 (a query with no true state before it never
// occurs at inference, so it is neither computed nor trained).
std::vector<int> stage1_rows(int T, int w, int offset);
// Stage-2 step s (1-based): the rows b + s - 1 of every window with start b >= 1 that reach that far
// (b + s - 1 < min(b + w, T)).
std::vector<int> stage2_rows(int T, int w, int offset, int s);

}  // namespace beagle
