// target_states.cpp: see target_states.h.
#include "target_states.h"

#include <algorithm>

#include "../core/common.h"
#include "../core/dtype.h"
#include "../io/model_file.h"
#include "../model/llama.h"

namespace beagle {

TargetStates::TargetStates(const ModelFile& mf, Ops& ops, int max_len, const std::vector<int>& layers)
    : m_(new Llama(mf, ops, max_len, std::min(max_len, 256), 1)), dim_(mf.config.dim), E_((int)layers.size()) {
    m_->set_state_layers(layers);
}

TargetStates::~TargetStates() = default;

SeqView TargetStates::view(uint32_t seq, const SeqView& v, int end) {
    BEAGLE_CHECK(end >= 1 && end <= v.len && end <= m_->ctx(), "target states: positions [0, %d) of a sequence of %d (context %d)",
                 end, v.len, m_->ctx());
    if ((int64_t)seq != cached_seq_ || end > cached_end_) {
        const double t0 = now_seconds();
        const int W = m_->state_width();
        rows_.resize((size_t)end * W);
        m_->truncate(0);
        m_->prefill(v.tokens, end, nullptr, rows_.data());
        states_.resize((size_t)end * dim_);
        extras_.resize((size_t)end * E_ * dim_);
        for (int t = 0; t < end; t++) {  // a row: the true state f, then the state layers' rows
            const float* row = &rows_[(size_t)t * W];
            for (int d = 0; d < dim_; d++) states_[(size_t)t * dim_ + d] = f32_to_f16(row[d]);
            for (int d = dim_; d < W; d++) extras_[(size_t)t * E_ * dim_ + d - dim_] = f32_to_f16(row[d]);
        }
        cached_seq_ = seq;
        cached_end_ = end;
        seconds_ += now_seconds() - t0;
        tokens_ += end;
    }
    SeqView r = v;
    r.states = states_.data();
    r.extras = E_ ? extras_.data() : nullptr;
    return r;
}

}  // namespace beagle
