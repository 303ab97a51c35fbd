// target_states.cpp: see target_states.h.
#include "target_states.h"

#include <algorithm>

#include "../backend/backend.h"
#include "../backend/ops.h"
#include "../core/common.h"
#include "../core/dtype.h"
#include "../core/progress.h"
#include "../io/model_file.h"
#include "../model/draft.h"
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

void match_datagen_weights(const Dataset& ds, ModelFile& mf) {
    if (ds.meta("f32_weights") == "1") dequantize_weights_f32(mf);
}

void cache_states(ModelFile& mf, const std::string& model_path, uint64_t tokenizer_hash, const std::string& in,
                  const std::string& out, const std::vector<int>& layers, int threads) {
    Dataset ds(in);
    if (ds.has_states())
        fail("beagle datagen --states-of: '%s' keeps the target's states already (expected tokens-only data)", in.c_str());
    ds.check_fits(mf.config.dim, mf.config.vocab_size, tokenizer_hash, model_path);
    check_state_layers(layers, mf.config.n_layers, "beagle datagen --state-layers");
    match_datagen_weights(ds, mf);
    std::vector<std::pair<std::string, std::string>> meta;
    for (auto& kv : read_meta(in + "/meta.txt"))
        if (kv.first != "states" && kv.first != "state_layers") meta.push_back(kv);
    meta.push_back({"states", "kept"});
    if (!layers.empty()) meta.push_back({"state_layers", format_layer_list(layers)});
    meta.push_back({"states_of", in});
    meta.push_back({"states_backend", selected_backend()});  // "backend" stays the one that wrote the answers
    open_data_dir(out, meta);

    std::unique_ptr<Ops> ops = make_ops("", threads);
    TargetStates ts(mf, *ops, ds.longest_seq(), layers, 1);
    // shards already in out were written atomically by an earlier run: complete
    auto shard_path = [&](size_t k) { return out + "/" + ds.shard_name(k); };
    int64_t done = 0;
    for (size_t k = 0; k < ds.n_shards(); k++)
        if (file_exists(shard_path(k)))
            for (size_t i = ds.shard_first(k); i < ds.shard_first(k + 1); i++) done += ds.seq(i).len;
    Progress prog("states", ds.n_tokens(), "tok");
    if (done > 0) prog.resumed(done);
    for (size_t k = 0; k < ds.n_shards(); k++) {
        if (file_exists(shard_path(k))) continue;
        const size_t i0 = ds.shard_first(k), i1 = ds.shard_first(k + 1);
        std::vector<SeqData> seqs(i1 - i0);
        for (size_t i = i0; i < i1; i++) {
            const SeqView v = ts.view((uint32_t)i, ds.seq(i), ds.seq(i).len);
            SeqData& d = seqs[i - i0];
            d.tokens.assign(v.tokens, v.tokens + v.len);
            d.states.assign(v.states, v.states + (size_t)v.len * ds.dim());
            if (!layers.empty()) d.extras.assign(v.extras, v.extras + (size_t)v.len * layers.size() * ds.dim());
            d.n_prompt = v.n_prompt;
            prog.update(done += v.len);
        }
        write_shard(shard_path(k), ds.dim(), ds.vocab(), ds.tokenizer_hash(), seqs, layers);
    }
    prog.finish();
}

}  // namespace beagle
