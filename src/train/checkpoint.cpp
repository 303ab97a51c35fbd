// checkpoint.cpp: the training checkpoint (checkpoint.h): written atomically by run_train, read by
// --resume, refused with a clear error when its config does not match the run.
#include "checkpoint.h"

#include <climits>
#include <cstring>

namespace beagle {

static const ContainerFormat kCheckpoint = {{'B', 'E', 'A', 'G', 'L', 'E', 'C', 'K'}, "Beagle training checkpoint",
                                            "checkpoint", 1, 24, 16, 12};

Checkpoint checkpoint_of(const std::vector<std::pair<std::string, std::string>>& config, const TrainState& st) {
    Checkpoint c;
    c.kv.where = "checkpoint";
    c.kv.items = config;
    auto add = [&](const char* key, const std::string& v) { c.kv.items.emplace_back(key, v); };
    add("step", std::to_string(st.step));
    add("epoch", std::to_string(st.epoch));
    add("pos", std::to_string(st.pos));
    add("adam_steps", std::to_string(st.adam_steps));
    add("rng_shuffle", strfmt("%016llx", (unsigned long long)st.shuffle.s));
    add("rng_offset", strfmt("%016llx", (unsigned long long)st.offset.s));
    add("rng_noise", strfmt("%016llx", (unsigned long long)st.noise.s));
    add("train_seconds", strfmt("%.3f", st.train_seconds));
    add("tokens_seen", std::to_string(st.tokens_seen));
    add("n_history", std::to_string(st.history.size()));
    c.order = st.order;
    c.history = st.history;
    return c;
}

TrainState resume_state(const Checkpoint& c, const std::vector<std::pair<std::string, std::string>>& config,
                        const std::string& path) {
    for (auto& kv : config) {
        std::string have = c.get(kv.first);
        if (have != kv.second)
            fail("checkpoint '%s' was made with %s = %s, this run has %s = %s (use the same data and flags, or start "
                 "afresh without --resume)",
                 path.c_str(), kv.first.c_str(), have.empty() ? "(absent)" : have.c_str(), kv.first.c_str(),
                 kv.second.c_str());
    }
    // the keys a run's config has only when set (train_loop.cpp run_config): set in the checkpoint, absent here
    for (const char* k : {"arch", "ttt", "state_layers", "medusa_heads", "lr_decay_steps", "init"}) {
        bool in_run = false;
        for (auto& kv : config) in_run |= kv.first == k;
        if (!in_run && !c.get(k).empty())
            fail("checkpoint '%s' was made with %s = %s, this run has none (use the same data and flags, or start "
                 "afresh without --resume)", path.c_str(), k, c.get(k).c_str());
    }
    TrainState st;
    st.step = (long)c.kv.integer("step", 0, LONG_MAX);
    st.epoch = (int)c.kv.integer("epoch", 0, INT_MAX);
    st.pos = (int)c.kv.integer("pos", 0, INT_MAX);
    st.adam_steps = (int)c.kv.integer("adam_steps", 0, INT_MAX);
    st.shuffle.s = c.kv.hex64("rng_shuffle");
    st.offset.s = c.kv.hex64("rng_offset");
    st.noise.s = c.kv.hex64("rng_noise");
    st.train_seconds = c.kv.find("train_seconds") ? c.kv.real("train_seconds") : 0;  // bookkeeping only
    st.tokens_seen = c.kv.find("tokens_seen") ? c.kv.integer("tokens_seen", 0, INT64_MAX) : 0;
    st.order = c.order;
    st.history = c.history;
    return st;
}

void save_checkpoint(const std::string& path, const Checkpoint& c, const DraftConfig& cfg) {
    ContainerWriter f(kCheckpoint);
    f.put_text(c.kv);
    for (const std::vector<float>* set : {c.w, c.m, c.v})
        for (int i = 0; i < DT_COUNT; i++) {
            BEAGLE_CHECK((int64_t)set[i].size() == cfg.numel(i), "checkpoint: tensor %s has %zu values, expected %lld",
                         draft_tensor_name(i), set[i].size(), (long long)cfg.numel(i));
            if (!set[i].empty()) f.put(set[i].data(), set[i].size() * 4);  // a tensor of another architecture: none
        }
    f.put(c.order.data(), c.order.size() * 4);
    for (const StepRecord& r : c.history) {
        int32_t stage = r.stage;
        f.put(&r.loss, 4);
        f.put(&r.ce, 4);
        f.put(&r.vloss, 4);
        f.put(&stage, 4);
    }
    f.write(path);
}

Checkpoint load_checkpoint(const std::string& path) {
    ContainerReader f(path, kCheckpoint);
    const char* P = path.c_str();
    Checkpoint c;
    c.kv = f.text(path + ": checkpoint");
    auto count = [&](const char* key) { return c.kv.integer(key, 0, INT32_MAX); };
    DraftConfig cfg;
    cfg.dim = (int)count("dim");
    cfg.n_heads = (int)count("n_heads");
    cfg.n_kv_heads = (int)count("n_kv_heads");
    cfg.head_dim = (int)count("head_dim");
    cfg.ffn_dim = (int)count("ffn_dim");
    cfg.vocab_size = (int)count("vocab");
    cfg.arch = c.kv.find("arch") ? parse_draft_arch(*c.kv.find("arch"), P) : ARCH_BEAGLE;  // absent: beagle
    if (const std::string* v = c.kv.find("state_layers")) cfg.state_layers = parse_layer_list(*v, P);
    if (cfg.arch == ARCH_MEDUSA) cfg.medusa_heads = (int)c.kv.integer("medusa_heads", 1, kMaxMedusaHeads);
    cfg.validate(P);
    uint64_t items = (uint64_t)count("items"), hist = (uint64_t)c.kv.integer("n_history", 0, INT64_MAX);
    uint64_t need = f.text_end();
    for (int i = 0; i < DT_COUNT; i++) need = checked_add(need, checked_mul((uint64_t)cfg.numel(i), 12, "checkpoint"), "checkpoint");
    need = checked_add(need, checked_mul(items, 4, "checkpoint"), "checkpoint");
    need = checked_add(need, checked_mul(hist, 16, "checkpoint"), "checkpoint");
    if (need != f.data_end())
        fail("%s: size %zu does not match its config (%llu bytes expected for %llu items, %llu steps)", P, f.data_end() + 4,
             (unsigned long long)(need + 4), (unsigned long long)items, (unsigned long long)hist);
    size_t off = f.text_end();
    auto take = [&](void* dst, size_t n, const char* what) {
        memcpy(dst, f.bytes(off, n, what), n);
        off += n;
    };
    for (std::vector<float>* set : {c.w, c.m, c.v})
        for (int i = 0; i < DT_COUNT; i++) {
            set[i].resize((size_t)cfg.numel(i));
            if (!set[i].empty()) take(set[i].data(), set[i].size() * 4, draft_tensor_name(i));
        }
    c.order.resize(items);
    take(c.order.data(), items * 4, "data order");
    c.history.resize(hist);
    for (StepRecord& r : c.history) {
        int32_t stage;
        take(&r.loss, 4, "loss history");
        take(&r.ce, 4, "loss history");
        take(&r.vloss, 4, "loss history");
        take(&stage, 4, "loss history");
        r.stage = stage;
    }
    for (uint32_t x : c.order)
        if (x >= items) fail("%s: data order entry %u outside [0, %llu)", P, x, (unsigned long long)items);
    return c;
}

}  // namespace beagle
