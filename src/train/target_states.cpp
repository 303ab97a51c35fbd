// target_states.cpp: see target_states.h.
#include "target_states.h"

#include <algorithm>

#include "../backend/ops.h"
#include "../core/common.h"
#include "../core/dtype.h"
#include "../io/model_file.h"
#include "../model/llama.h"

namespace beagle {

TargetStates::TargetStates(const ModelFile& mf, Ops& ops, int max_len, const std::vector<int>& layers, int slots)
    : ops_(ops), m_(new Llama(mf, ops, max_len, std::min(max_len, 256), 1)), dim_(mf.config.dim),
      E_((int)layers.size()), slots_(std::max(slots, 1)) {
    m_->set_state_layers(layers);
    m_->set_async_states(true);
}

TargetStates::~TargetStates() = default;

TargetStates::Slot* TargetStates::find(uint32_t seq, int end) {
    for (Slot& s : slots_)
        if (s.seq == (int64_t)seq && s.end >= end) return &s;
    return nullptr;
}

void TargetStates::prefetch(uint32_t seq, const SeqView& v, int end) {
    BEAGLE_CHECK(end >= 1 && end <= v.len && end <= m_->ctx(), "target states: positions [0, %d) of a sequence of %d (context %d)",
                 end, v.len, m_->ctx());
    if (Slot* s = find(seq, end)) {
        s->used = ++clock_;
        return;
    }
    Slot& s = *std::min_element(slots_.begin(), slots_.end(), [](const Slot& a, const Slot& b) { return a.used < b.used; });
    if (!s.landed) ops_.wait_downloads();  // its download may still be queued: it must land before rows change
    const double t0 = now_seconds();
    s.seq = seq;
    s.end = end;
    s.landed = false;
    s.used = ++clock_;
    s.rows.resize((size_t)end * m_->state_width());
    m_->truncate(0);
    m_->prefill(v.tokens, end, nullptr, s.rows.data());
    seconds_ += now_seconds() - t0;
    tokens_ += end;
}

void TargetStates::land(Slot& s) {
    const double t0 = now_seconds();
    ops_.wait_downloads();
    const int W = m_->state_width();
    s.states.resize((size_t)s.end * dim_);
    s.extras.resize((size_t)s.end * E_ * dim_);
    for (int t = 0; t < s.end; t++) {  // a row: the true state f, then the state layers' rows
        const float* row = &s.rows[(size_t)t * W];
        for (int d = 0; d < dim_; d++) s.states[(size_t)t * dim_ + d] = f32_to_f16(row[d]);
        for (int d = dim_; d < W; d++) s.extras[(size_t)t * E_ * dim_ + d - dim_] = f32_to_f16(row[d]);
    }
    s.landed = true;
    seconds_ += now_seconds() - t0;
}

SeqView TargetStates::view(uint32_t seq, const SeqView& v, int end) {
    prefetch(seq, v, end);
    Slot& s = *find(seq, end);
    if (!s.landed) land(s);
    SeqView r = v;
    r.states = s.states.data();
    r.extras = E_ ? s.extras.data() : nullptr;
    return r;
}

}  // namespace beagle
