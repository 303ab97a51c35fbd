// draft.cpp: the draft's config, random init, file format (save/load with full validation), the
// frozen target tensors, and the inference object Draft (see draft.h). The layer math is in
// src/model/draft_layers.cpp, shared with training.
#include "draft.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <memory>

#include "../core/common.h"
#include "../core/quantize.h"
#include "../backend/buf_alloc.h"
#include "../core/rng.h"
#include "../io/container.h"
#include "draft_layers.h"
#include "eagle_layers.h"
#include "moa_layers.h"

namespace beagle {

static const char* kTensorNames[DT_COUNT] = {
    "wq",       "wk",       "wv",    "wo",    "norm_q", "norm_kv", "norm_m",  "w_gate", "w_up",   "w_down",
    "fc_e",     "fc_f",     "w_mix", "medusa_w", "medusa_b", "sa_wq", "sa_wk", "sa_wv", "sa_wo",  "norm_sa",
    "lsa_wq",   "lsa_wk",   "lsa_wv", "lsa_wo", "norm_lsa"};
const char* draft_tensor_name(int i) { return i >= 0 && i < DT_COUNT ? kTensorNames[i] : "?"; }
bool draft_tensor_is_norm(int t) {
    return t == DT_NORM_Q || t == DT_NORM_KV || t == DT_NORM_M || t == DT_NORM_SA || t == DT_NORM_LSA;
}
bool draft_tensor_is_vector(int t) { return draft_tensor_is_norm(t) || t == DT_MEDUSA_B; }

const char* draft_arch_name(int arch) {
    return arch == ARCH_EAGLE   ? "eagle"
           : arch == ARCH_BEAGLE ? "beagle"
           : arch == ARCH_MEDUSA ? "medusa"
           : arch == ARCH_MOA    ? "moa"
                                 : "?";
}

std::vector<int> parse_layer_list(const std::string& s, const char* where) {
    std::vector<int> out;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        const std::string item = s.substr(i, j - i);
        char* end = nullptr;
        const long v = item.empty() ? -1 : strtol(item.c_str(), &end, 10);
        if (item.empty() || *end || v < 0 || v > 100000)
            fail("%s: '%s' is not a comma-separated list of layer numbers (item '%s')", where, s.c_str(), item.c_str());
        out.push_back((int)v);
        i = j + 1;
        if (j + 1 == s.size()) fail("%s: '%s' ends with a comma", where, s.c_str());
    }
    if (out.empty()) fail("%s: empty layer list", where);
    return out;
}

std::string format_layer_list(const std::vector<int>& layers) {
    std::string v;
    for (int l : layers) v += (v.empty() ? "" : ",") + std::to_string(l);
    return v;
}

int parse_draft_arch(const std::string& s, const char* where) {
    if (s == "beagle") return ARCH_BEAGLE;
    if (s == "eagle") return ARCH_EAGLE;
    if (s == "medusa") return ARCH_MEDUSA;
    if (s == "moa") return ARCH_MOA;
    fail("%s: draft architecture '%s' is not one of beagle, eagle, medusa, moa", where, s.c_str());
}

bool DraftConfig::has(int t) const {
    if (t < 0 || t >= DT_COUNT) return false;
    if (arch == ARCH_MEDUSA) return t == DT_MEDUSA_W || t == DT_MEDUSA_B;
    if (t == DT_MEDUSA_W || t == DT_MEDUSA_B) return false;
    if (t == DT_MIX) return arch == ARCH_BEAGLE && !state_layers.empty();
    const bool moa_only = t >= DT_SA_Q && t <= DT_NORM_LSA;
    if (arch == ARCH_MOA) return moa_only || (t != DT_FC_E && t != DT_FC_F);
    if (moa_only) return false;
    if (arch == ARCH_EAGLE) return t != DT_NORM_KV;
    return t != DT_FC_E && t != DT_FC_F;
}

RopeParams DraftConfig::rope() const {
    RopeParams rp;
    rp.head_dim = head_dim;
    rp.theta = rope_theta;
    rp.llama3_scaling = rope_scaling;
    rp.factor = rope_factor;
    rp.low_freq_factor = rope_low_freq_factor;
    rp.high_freq_factor = rope_high_freq_factor;
    rp.orig_max_pos = rope_orig_max_pos;
    return rp;
}

int64_t DraftConfig::rows(int t) const {
    switch (t) {
        case DT_WQ: case DT_SA_Q: case DT_LSA_Q: return q_dim();
        case DT_WK: case DT_WV: case DT_SA_K: case DT_SA_V: case DT_LSA_K: case DT_LSA_V: return kv_dim();
        case DT_WO: case DT_W_DOWN: case DT_FC_E: case DT_FC_F: case DT_MIX: case DT_SA_O: case DT_LSA_O: return dim;
        case DT_W_GATE: case DT_W_UP: return ffn_dim;
        case DT_MEDUSA_W: return (int64_t)medusa_heads * dim;
        default: return 1;
    }
}

int64_t DraftConfig::cols(int t) const {
    switch (t) {
        case DT_WO: case DT_SA_O: case DT_LSA_O: return q_dim();
        case DT_W_DOWN: return ffn_dim;
        case DT_MIX: return (int64_t)n_extra() * dim;
        case DT_MEDUSA_B: return (int64_t)medusa_heads * dim;
        default: return dim;
    }
}

void DraftConfig::validate(const char* where) const {
    BEAGLE_CHECK(arch == ARCH_BEAGLE || arch == ARCH_EAGLE || arch == ARCH_MEDUSA || arch == ARCH_MOA,
                 "%s: unknown draft architecture %d", where, arch);
    if (arch == ARCH_MEDUSA)
        BEAGLE_CHECK(medusa_heads >= 1 && medusa_heads <= kMaxMedusaHeads, "%s: a Medusa draft needs 1..%d heads, got %d",
                     where, kMaxMedusaHeads, medusa_heads);
    else
        BEAGLE_CHECK(medusa_heads == 0, "%s: medusa_heads %d on a %s draft (Medusa drafts only)", where, medusa_heads,
                     draft_arch_name(arch));
    BEAGLE_CHECK(dim > 0 && dim <= (1 << 16), "%s: dim %d outside 1..65536", where, dim);
    BEAGLE_CHECK(n_heads > 0 && n_heads <= 1024 && n_kv_heads > 0 && n_heads % n_kv_heads == 0,
                 "%s: n_heads %d must be a positive multiple of n_kv_heads %d", where, n_heads, n_kv_heads);
    BEAGLE_CHECK(head_dim > 0 && head_dim % 2 == 0 && head_dim <= 1024, "%s: head_dim %d must be even, 2..1024", where,
                 head_dim);
    BEAGLE_CHECK(ffn_dim > 0 && ffn_dim <= (1 << 20), "%s: ffn_dim %d outside 1..2^20", where, ffn_dim);
    BEAGLE_CHECK(vocab_size > 0 && vocab_size <= (1 << 24), "%s: vocab_size %d outside 1..2^24", where, vocab_size);
    BEAGLE_CHECK(draft_vocab >= 0 && draft_vocab <= vocab_size, "%s: draft_vocab %d outside 0..vocab_size %d", where,
                 draft_vocab, vocab_size);
    BEAGLE_CHECK(norm_eps > 0 && norm_eps < 1 && final_eps > 0 && final_eps < 1, "%s: norm eps %g / %g outside (0, 1)",
                 where, norm_eps, final_eps);
    BEAGLE_CHECK(rope_theta > 0 && std::isfinite(rope_theta), "%s: rope_theta %g must be > 0", where, rope_theta);
    BEAGLE_CHECK(state_layers.empty() || arch == ARCH_BEAGLE || arch == ARCH_MOA, "%s: state layers are a Beagle or MoA draft's (this is %s)",
                 where, draft_arch_name(arch));
    BEAGLE_CHECK(arch != ARCH_MOA || !state_layers.empty(),
                 "%s: a MoA draft's Layer Self-Attention needs at least one target layer besides the last (state layers, "
                 "--state-layers)", where);
    BEAGLE_CHECK(state_layers.size() <= (size_t)kMaxStateLayers, "%s: %zu state layers, at most %d", where,
                 state_layers.size(), kMaxStateLayers);
    check_state_layers(state_layers, target_n_layers, where);
}

DraftConfig draft_config_for_target(const LlamaConfig& t, const TokenizerSpec& tok, int ffn_dim) {
    DraftConfig d;
    d.dim = t.dim;
    d.n_heads = t.n_heads;
    d.n_kv_heads = t.n_kv_heads;
    d.head_dim = t.head_dim;
    d.ffn_dim = ffn_dim > 0 ? ffn_dim : t.ffn_dim;
    d.vocab_size = t.vocab_size;
    d.norm_eps = t.rms_eps;
    d.final_eps = t.rms_eps;
    d.rope_theta = t.rope_theta;
    d.rope_scaling = t.rope_scaling;
    d.rope_factor = t.rope_factor;
    d.rope_low_freq_factor = t.rope_low_freq_factor;
    d.rope_high_freq_factor = t.rope_high_freq_factor;
    d.rope_orig_max_pos = t.rope_orig_max_pos;
    d.target_n_layers = t.n_layers;
    d.tokenizer_hash = tokenizer_fingerprint(tok);
    d.validate("draft config for the target");
    return d;
}

uint64_t tokenizer_fingerprint(const TokenizerSpec& tok) {
    if (tok.tokens.empty()) return 0;
    uint64_t h = 0xcbf29ce484222325ULL;
    auto mix = [&](const void* p, size_t n) {
        for (size_t i = 0; i < n; i++) {
            h ^= ((const uint8_t*)p)[i];
            h *= 0x100000001b3ULL;
        }
    };
    uint64_t n = tok.tokens.size();
    mix(&n, 8);
    for (const std::string& s : tok.tokens) {
        uint32_t len = (uint32_t)s.size();
        mix(&len, 4);
        mix(s.data(), s.size());
    }
    return h ? h : 1;
}

void check_draft_fits_target(const DraftConfig& d, const LlamaConfig& t, const TokenizerSpec& tok,
                             const std::string& draft_path) {
    const char* p = draft_path.c_str();
    BEAGLE_CHECK(d.dim == t.dim, "%s: draft was trained for a target with dim %d, this target has dim %d", p, d.dim,
                 t.dim);
    BEAGLE_CHECK(d.vocab_size == t.vocab_size,
                 "%s: draft was trained for a vocabulary of %d tokens, this target has %d", p, d.vocab_size,
                 t.vocab_size);
    BEAGLE_CHECK(d.head_dim == t.head_dim && d.n_heads == t.n_heads && d.n_kv_heads == t.n_kv_heads,
                 "%s: draft heads (%d heads, %d kv heads, head_dim %d) differ from the target's (%d, %d, %d)", p,
                 d.n_heads, d.n_kv_heads, d.head_dim, t.n_heads, t.n_kv_heads, t.head_dim);
    for (int l : d.state_layers)
        BEAGLE_CHECK(l < t.n_layers, "%s: draft fuses the states of layer %d, this target has %d layers", p, l, t.n_layers);
    BEAGLE_CHECK(d.target_n_layers == 0 || d.target_n_layers == t.n_layers,
                 "%s: draft was trained on the states of a %d-layer target, this target has %d layers", p,
                 d.target_n_layers, t.n_layers);
    uint64_t h = tokenizer_fingerprint(tok);
    BEAGLE_CHECK(d.tokenizer_hash == 0 || h == 0 || d.tokenizer_hash == h,
                 "%s: draft was trained with a different tokenizer (vocabulary fingerprint %016llx, this target's is "
                 "%016llx)",
                 p, (unsigned long long)d.tokenizer_hash, (unsigned long long)h);
}

void DraftWeights::init_random(const DraftConfig& c, uint64_t seed) {
    c.validate("draft init");
    cfg = c;
    TrainRng rng(seed);
    for (int i = 0; i < DT_COUNT; i++) {
        t[i].assign((size_t)c.numel(i), 1.0f);
        if (draft_tensor_is_norm(i)) continue;
        if (i == DT_MIX || i == DT_MEDUSA_W || i == DT_MEDUSA_B) {  // zero. W_mix: s = f, the draft without state
            // layers (so --init from one starts as it); Medusa (as its paper): u_k = f, every head repeats the
            // target's own next-token distribution
            std::fill(t[i].begin(), t[i].end(), 0.0f);
            continue;
        }
        // W_fc = [fc_e | fc_f] is one Linear(2 dim -> dim): its fan-in is 2 dim
        double fan_in = (double)c.cols(i) * (i == DT_FC_E || i == DT_FC_F ? 2 : 1);
        double bound = 1.0 / std::sqrt(fan_in);
        for (float& x : t[i]) x = (float)((2.0 * rng.uniform() - 1.0) * bound);
    }
}

// ---- file format ------------------------------------------------------------------------------------
// Fixed header: 12 u32 n_tensors, 16 u32 config_len, 20 u32 0, 24 u64 file_size (see draft.h).
static const ContainerFormat kDraftFile = {{'B', 'E', 'A', 'G', 'L', 'E', 'D', 'R'}, "Beagle draft file", "draft", 1, 32, 24, 16};

static KeyValues config_text(const DraftConfig& c, const std::vector<std::pair<std::string, std::string>>& meta) {
    KeyValues kv;
    kv.where = "draft config and metadata";
    auto add = [&](const char* key, const std::string& v) { kv.items.emplace_back(key, v); };
    if (c.arch != ARCH_BEAGLE) add("arch", draft_arch_name(c.arch));  // absent: beagle (files before the key)
    add("dim", std::to_string(c.dim));
    add("n_heads", std::to_string(c.n_heads));
    add("n_kv_heads", std::to_string(c.n_kv_heads));
    add("head_dim", std::to_string(c.head_dim));
    add("ffn_dim", std::to_string(c.ffn_dim));
    add("vocab_size", std::to_string(c.vocab_size));
    if (c.arch == ARCH_MEDUSA) add("medusa_heads", std::to_string(c.medusa_heads));
    if (c.draft_vocab > 0) add("draft_vocab", std::to_string(c.draft_vocab));
    if (!c.state_layers.empty()) add("state_layers", format_layer_list(c.state_layers));  // absent: none (older files' bytes)
    add("norm_eps", strfmt("%.9g", c.norm_eps));
    add("final_eps", strfmt("%.9g", c.final_eps));
    add("rope_theta", strfmt("%.9g", c.rope_theta));
    add("rope_scaling", c.rope_scaling ? "1" : "0");
    add("rope_factor", strfmt("%.9g", c.rope_factor));
    add("rope_low_freq_factor", strfmt("%.9g", c.rope_low_freq_factor));
    add("rope_high_freq_factor", strfmt("%.9g", c.rope_high_freq_factor));
    add("rope_orig_max_pos", std::to_string(c.rope_orig_max_pos));
    add("target_n_layers", std::to_string(c.target_n_layers));
    add("tokenizer_hash", strfmt("%016llx", (unsigned long long)c.tokenizer_hash));
    for (auto& m : meta) kv.items.emplace_back("meta." + m.first, m.second);
    return kv;
}

void check_d2t(const DraftConfig& c, const std::vector<int32_t>& d2t, const char* where) {
    BEAGLE_CHECK(d2t.size() == (size_t)c.draft_vocab, "%s: reduced vocabulary map has %zu entries, draft_vocab is %d",
                 where, d2t.size(), c.draft_vocab);
    for (size_t i = 0; i < d2t.size(); i++)
        BEAGLE_CHECK(d2t[i] >= 0 && d2t[i] < c.vocab_size && (i == 0 || d2t[i] > d2t[i - 1]),
                     "%s: reduced vocabulary entry %zu is token %d: entries must be increasing target ids in [0, %d)",
                     where, i, d2t[i], c.vocab_size);
}


void save_draft(const std::string& path, const DraftWeights& w) {
    w.cfg.validate("save_draft");
    check_d2t(w.cfg, w.d2t, "save_draft");
    std::vector<ContainerBlob> blobs;
    for (int i = 0; i < DT_COUNT; i++) {
        BEAGLE_CHECK(w.t[i].size() == (size_t)w.cfg.numel(i), "save_draft: tensor %s has %zu values, expected %lld",
                     draft_tensor_name(i), w.t[i].size(), (long long)w.cfg.numel(i));
        if (!w.cfg.has(i)) continue;
        blobs.emplace_back();
        ContainerBlob& e = blobs.back();
        e.name = draft_tensor_name(i);
        e.ndim = draft_tensor_is_vector(i) ? 1 : 2;  // a vector's shape is {n, 0}: the unused slot keeps the table size fixed
        e.shape[0] = (uint64_t)(draft_tensor_is_vector(i) ? w.cfg.cols(i) : w.cfg.rows(i));
        e.shape[1] = draft_tensor_is_vector(i) ? 0 : (uint64_t)w.cfg.cols(i);
        e.data = w.t[i].data();
        e.nbytes = w.t[i].size() * 4;
    }
    if (w.cfg.draft_vocab > 0) {
        ContainerBlob e;
        e.name = "d2t";
        e.shape[0] = w.d2t.size();
        e.data = w.d2t.data();
        e.nbytes = w.d2t.size() * 4;
        blobs.push_back(e);
    }
    ContainerWriter f(kDraftFile);
    f.set_u32(12, (uint32_t)blobs.size());
    f.put_text(config_text(w.cfg, w.meta));
    f.put_table(blobs, 64);
    f.write(path);
}

int draft_trained_seq_len(const DraftWeights& w) {
    const KeyValues meta{"draft meta", w.meta};
    return meta.find("seq_len") ? (int)meta.integer("seq_len", 2, 1 << 24) : 0;
}

// set_true_window: the keys of the last n true states only (their rows are contiguous and already roped,
// so the window is a pointer offset; n = 0 or n >= the count: all).
static void window_true_keys(XAttnKeys* k, int n, int kv_dim) {
    if (n <= 0 || k->n0 <= n) return;
    k->start0 = k->n0 - n;
    k->k0 += (size_t)k->start0 * kv_dim;
    k->v0 += (size_t)k->start0 * kv_dim;
    k->n0 = n;
}

// The key sets of a draft forward: set 0 the first n0 rows of (k0, v0), windowed (set_true_window), set 1 the first
// n1 rows of (k1, v1).
static XAttnKeys key_sets(const float* k0, const float* v0, int n0, int window, int kv_dim, const float* k1 = nullptr,
                          const float* v1 = nullptr, int n1 = 0) {
    XAttnKeys k;
    k.k0 = k0;
    k.v0 = v0;
    k.n0 = n0;
    window_true_keys(&k, window, kv_dim);
    k.k1 = k1;
    k.v1 = v1;
    k.n1 = n1;
    return k;
}

DraftWeights load_draft(const std::string& path) {
    ContainerReader f(path, kDraftFile);
    const char* P = path.c_str();
    uint32_t n_tensors = f.u32(12, "tensor count");

    // config text: the config keys, then meta.KEY lines (free-form metadata)
    KeyValues kv = f.text(path + ": draft config");
    DraftWeights w;
    for (auto& p : kv.items)
        if (p.first.compare(0, 5, "meta.") == 0) w.meta.emplace_back(p.first.substr(5), p.second);
    DraftConfig& c = w.cfg;
    c.arch = kv.find("arch") ? parse_draft_arch(*kv.find("arch"), P) : ARCH_BEAGLE;
    if (const std::string* v = kv.find("state_layers")) c.state_layers = parse_layer_list(*v, (path + ": state_layers").c_str());
    if (c.arch == ARCH_MEDUSA) {  // K first: the tensor count and shapes depend on it
        if (!kv.find("medusa_heads")) fail("%s: a Medusa draft file without its 'medusa_heads' line", P);
        c.medusa_heads = (int)kv.integer("medusa_heads", 1, kMaxMedusaHeads);
    } else if (kv.find("medusa_heads")) {
        fail("%s: 'medusa_heads' in the config of a %s draft (Medusa drafts only)", P, draft_arch_name(c.arch));
    }
    int n_arch = 0;  // the architecture's tensors
    for (int i = 0; i < DT_COUNT; i++) n_arch += c.has(i);
    if (n_tensors != (uint32_t)n_arch && n_tensors != (uint32_t)n_arch + 1)
        fail("%s: draft file has %u tensors, expected %d (or %d with a reduced vocabulary) for a %s draft", P, n_tensors,
             n_arch, n_arch + 1, draft_arch_name(c.arch));
    auto int32 = [&](const char* key) { return (int)kv.integer(key, INT32_MIN, INT32_MAX); };
    c.dim = int32("dim");
    c.n_heads = int32("n_heads");
    c.n_kv_heads = int32("n_kv_heads");
    c.head_dim = int32("head_dim");
    c.ffn_dim = int32("ffn_dim");
    c.vocab_size = int32("vocab_size");
    c.draft_vocab = kv.find("draft_vocab") ? (int)kv.integer("draft_vocab", 1, INT32_MAX) : 0;
    if ((n_tensors == (uint32_t)n_arch + 1) != (c.draft_vocab > 0))
        fail("%s: draft file has %u tensors but its config %s a reduced vocabulary (draft_vocab)", P, n_tensors,
             c.draft_vocab > 0 ? "declares" : "does not declare");
    c.norm_eps = (float)kv.real("norm_eps");
    c.final_eps = (float)kv.real("final_eps");
    c.rope_theta = (float)kv.real("rope_theta");
    c.rope_scaling = int32("rope_scaling") != 0;
    c.rope_factor = (float)kv.real("rope_factor");
    c.rope_low_freq_factor = (float)kv.real("rope_low_freq_factor");
    c.rope_high_freq_factor = (float)kv.real("rope_high_freq_factor");
    c.rope_orig_max_pos = int32("rope_orig_max_pos");
    c.target_n_layers = int32("target_n_layers");
    c.tokenizer_hash = kv.hex64("tokenizer_hash");
    c.validate(P);

    // tensor table: every tensor once, shapes as the config implies
    size_t table_end;
    for (const ContainerBlob& e : f.table(f.text_end(), n_tensors, &table_end)) {
        if (e.name == "d2t" && c.draft_vocab > 0) {  // the reduced vocabulary's token map (int32)
            if (e.ndim != 1 || e.shape[0] != (uint64_t)c.draft_vocab || e.nbytes != e.shape[0] * 4)
                fail("%s: tensor 'd2t' has ndim %u, shape [%llu], %llu bytes; the config implies [%d] int32", P, e.ndim,
                     (unsigned long long)e.shape[0], (unsigned long long)e.nbytes, c.draft_vocab);
            w.d2t.resize((size_t)c.draft_vocab);
            memcpy(w.d2t.data(), e.data, e.nbytes);
            check_d2t(c, w.d2t, P);
            continue;
        }
        int idx = -1;
        for (int i = 0; i < DT_COUNT; i++)
            if (e.name == kTensorNames[i]) idx = i;
        if (idx < 0) fail("%s: unknown tensor '%s' in the draft file", P, e.name.c_str());
        if (!c.has(idx))
            fail("%s: tensor '%s' is not part of a %s draft", P, e.name.c_str(), draft_arch_name(c.arch));
        if (!w.t[idx].empty()) fail("%s: tensor '%s' appears twice in the draft file", P, e.name.c_str());
        bool vec = draft_tensor_is_vector(idx);
        uint64_t rows = vec ? 1 : e.shape[0], cols = vec ? e.shape[0] : e.shape[1];
        if (e.ndim != (vec ? 1u : 2u) || (int64_t)rows != c.rows(idx) || (int64_t)cols != c.cols(idx))
            fail("%s: tensor '%s' has shape %s[%llu, %llu], the config implies [%lld, %lld]", P, e.name.c_str(),
                 vec ? "(vector) " : "", (unsigned long long)rows, (unsigned long long)cols, (long long)c.rows(idx),
                 (long long)c.cols(idx));
        if (e.nbytes != (uint64_t)c.numel(idx) * 4)
            fail("%s: tensor '%s' has %llu bytes, expected %lld (f32)", P, e.name.c_str(), (unsigned long long)e.nbytes,
                 (long long)c.numel(idx) * 4);
        w.t[idx].resize((size_t)c.numel(idx));
        memcpy(w.t[idx].data(), e.data, e.nbytes);
        for (size_t i = 0; i < w.t[idx].size(); i++)
            if (!std::isfinite(w.t[idx][i]))
                fail("%s: tensor '%s' element %zu is not finite (%g)", P, e.name.c_str(), i, w.t[idx][i]);
    }
    for (int i = 0; i < DT_COUNT; i++)
        if (c.has(i) && w.t[i].size() != (size_t)c.numel(i))
            fail("%s: tensor '%s' of a %s draft is missing", P, draft_tensor_name(i), draft_arch_name(c.arch));
    return w;
}

// ---- frozen target tensors ----------------------------------------------------------------------------
static void dequant_tensor(const Tensor& t, std::vector<float>* out, const char* what, int64_t rows, int64_t cols) {
    BEAGLE_CHECK(t.data && t.rows() == rows && t.cols() == cols, "target tensor %s ('%s') has shape %s, expected [%lld, %lld]",
                 what, t.name.c_str(), t.shape_str().c_str(), (long long)rows, (long long)cols);
    out->resize((size_t)rows * cols);
    for (int64_t r = 0; r < rows; r++) dequantize_row(t.dtype, t.row(r), out->data() + r * cols, cols);
}

DraftFrozen frozen_from_target(const ModelFile& mf, bool tables) {
    const LlamaConfig& c = mf.config;
    DraftFrozen fz;
    fz.vocab = c.vocab_size;
    fz.dim = c.dim;
    dequant_tensor(mf.weights.out_norm, &fz.out_norm, "final norm", 1, c.dim);
    if (!tables) return fz;
    dequant_tensor(mf.weights.tok_embd, &fz.embd, "token embedding", c.vocab_size, c.dim);
    bool tied = c.tied_embeddings || mf.weights.lm_head.data == mf.weights.tok_embd.data;
    if (!tied) dequant_tensor(mf.weights.lm_head, &fz.lm_head, "LM head", c.vocab_size, c.dim);
    return fz;
}

// ---- Draft (inference) --------------------------------------------------------------------------------
struct Draft::Acts {
    explicit Acts(Ops& ops) : al(ops) {}
    BufAlloc<Ops> al;
    QueryActs<float> A;
    float *xn = nullptr, *rstd = nullptr, *logits = nullptr;
    float* feat = nullptr;  // EAGLE: the queries' input features f_{p-1}
    float *key_ns = nullptr, *key_rstd = nullptr;  // ensure_kv's normed states, kept between rounds
    float* key_s = nullptr;                        //   (state layers: and the fused states f + W_mix h)
    float *key_k = nullptr, *key_v = nullptr;      //   (Beagle: the new true keys' K/V before they go to their rows)
    float *key_e = nullptr, *key_x = nullptr;      //   (EAGLE: and the keys' embeddings and inputs before the norm;
                                                   //    MoA: key_e the true tokens' embeddings)
    LsaActs<float> lsa;                            //   (MoA: Layer Self-Attention of the new true positions)
    int key_rows = 0;                              //   (grown only past the largest batch of new keys)
    SelfAttnActs<float> sa;                        // MoA: the queries' self-attention (u goes to A.u)
    int* ids = nullptr;  // backend ints: the greedy chain's argmax ids, one slot per step (argmax_ids)
    float* q = nullptr;  // the sampled chain's distributions, one row per id slot (sample_ids; allocated then)
    int* d2t = nullptr;  // backend ints: a reduced vocabulary's d2t table (forward_ids maps its ids through it)
    // the greedy tree's working tree on the backend (tree_expand): nodes, and per depth parity the query
    // rows' nodes and predicted-key mask rows (one depth reads one parity and writes the other); the ids
    // the next forward_tree embeds
    TreeNode* tree = nullptr;
    int* trows[2] = {nullptr, nullptr};
    uint64_t* tmask[2] = {nullptr, nullptr};
    int* tids = nullptr;
};

Weight reduced_head_weight(Ops& ops, const Weight& lm_head, const std::vector<int32_t>& d2t, int dim,
                           std::vector<uint8_t>* bytes, std::unique_ptr<Tensor>* view) {
    BEAGLE_CHECK(lm_head.host && lm_head.host->data, "draft: reduced vocabulary needs the target's LM head on the host");
    const Tensor& H = *lm_head.host;
    BEAGLE_CHECK(H.cols() == dim, "draft: target LM head has %lld columns, the draft's dim is %d", (long long)H.cols(), dim);
    const size_t rb = H.row_bytes();
    bytes->resize(rb * d2t.size());
    for (size_t i = 0; i < d2t.size(); i++) memcpy(bytes->data() + rb * i, H.row(d2t[i]), rb);
    view->reset(new Tensor());
    Tensor& t = **view;
    t.name = H.name + "[d2t]";
    t.dtype = H.dtype;
    t.ndim = 2;
    t.shape[0] = (int64_t)d2t.size();
    t.shape[1] = dim;
    t.data = bytes->data();
    t.nbytes = bytes->size();
    return ops.matmul_weight(t);
}

int draft_tree_nodes(int max_pred, int max_queries) { return 1 + max_queries * max_pred; }

std::vector<MemLine> draft_weight_buffers(const DraftConfig& c, bool q8) {
    double f32 = 0, q = 0;
    for (int t = 0; t < DT_COUNT; t++) {
        f32 += 4.0 * c.numel(t);
        bool matrix = !draft_tensor_is_vector(t);
        if (q8 && matrix && c.has(t) && c.cols(t) % QK == 0) q += (double)c.rows(t) * dtype_row_bytes(DType::Q8_0, c.cols(t));
    }
    std::vector<MemLine> v = {{"draft weights (f32)", f32}, {"draft final norm (f32, the target's)", 4.0 * c.dim}};
    if (q8) v.push_back({"draft matrices in Q8_0 (inference copies)", q});
    return v;
}

std::vector<MemLine> draft_inference_buffers(const DraftConfig& c, int ctx, int max_pred, int max_queries) {
    const bool eagle = c.arch == ARCH_EAGLE;  // its queries' own K/V rows, token embeddings, features, fc temporaries
    const bool moa = c.arch == ARCH_MOA;      // its self-attention's K/V rows (true tokens, tree rows, queries), LSA
    const double f = 4, kv = c.kv_dim(), N = max_queries, R = std::max((double)max_pred + 1, N);
    if (moa)
        return {{"draft K/V of the true positions' LSA outputs (2 x ctx x kv_dim)", 2 * f * ctx * kv},
                {"draft self-attention K/V of kept tree rows and of the queries run (2 x (max_pred + max_queries) x kv_dim)",
                 2 * f * (max_pred + N) * kv},
                {"draft true / predicted state staging ((ctx + max_pred) x dim)", f * ((double)ctx + max_pred) * c.dim},
                {"draft state-layer staging (ctx x E dim; E = 0: none)", f * ctx * c.n_extra() * c.dim},
                {"draft self-attention K/V of the true tokens (2 x ctx x kv_dim)", 2 * f * ctx * kv},
                {"draft query activations (max_queries x (5 dim + 2 q_dim + 3 ffn + heads + 2))",
                 f * N * query_acts_floats_per_row(c)},
                {"draft query self-attention activations (max_queries x (2 dim + 2 q_dim + heads + 1))",
                 f * N * self_attn_floats_per_row(c)},
                {"draft final norm out + rstd (max_queries x (dim + 1))", f * N * (c.dim + 1.0)},
                {"draft logits (max_queries x head rows)", f * N * c.head_rows()},
                {"draft new-key temporaries (max(max_pred + 1, max_queries) x (2 dim + 1 + LSA's (E + 2) rows); a longer "
                 "prompt grows them)",
                 f * R * (2.0 * c.dim + 1 + lsa_floats_per_position(c))},
                {"draft greedy chain ids ((max_pred + 1) ints)", f * (max_pred + 1.0)},
                {"draft d2t table on the backend (draft_vocab ints)", f * c.draft_vocab},
                {"draft tree nodes ((1 + max_queries x max_pred) x 16 bytes)", 16.0 * draft_tree_nodes(max_pred, max_queries)},
                {"draft tree query rows, ids, mask rows (max_queries x (3 ints + 2 x mask words))",
                 N * (3 * f + 2 * 8.0 * draft_mask_words(max_pred))}};
    return {{"draft K/V of the true states (2 x ctx x kv_dim)", 2 * f * ctx * kv},
            {eagle ? "draft K/V of kept predictions and of the queries run (2 x (max_pred + max_queries) x kv_dim)"
                   : "draft K/V of kept predictions (2 x max_pred x kv_dim)",
             2 * f * (max_pred + (eagle ? N : 0)) * kv},
            {"draft true / predicted state staging ((ctx + max_pred) x dim)", f * ((double)ctx + max_pred) * c.dim},
            {"draft state-layer staging (ctx x E dim; E = 0: none)", f * ctx * c.n_extra() * c.dim},
            {eagle ? "draft query activations (max_queries x (7 dim + 2 q_dim + 3 ffn + heads + 2): + E(t), feature)"
                   : "draft query activations (max_queries x (5 dim + 2 q_dim + 3 ffn + heads + 2))",
             f * N * ((eagle ? 7.0 : 5.0) * c.dim + 2.0 * c.q_dim() + 3.0 * c.ffn_dim + c.n_heads + 2)},
            {"draft final norm out + rstd (max_queries x (dim + 1))", f * N * (c.dim + 1.0)},
            {"draft logits (max_queries x head rows)", f * N * c.head_rows()},
            {"draft new-key temporaries (max(max_pred + 1, max_queries) x (dim + 1), + dim with state layers, + 2 dim "
             "for EAGLE, + 2 kv_dim for Beagle's K/V; a longer prompt grows them)",
             f * std::max((double)max_pred + 1, N) *
                 (c.dim * (1.0 + (c.n_extra() ? 1 : 0) + (eagle ? 2 : 0)) + 1.0 + (eagle ? 0 : 2.0 * kv))},
            {"draft greedy chain ids ((max_pred + 1) ints)", f * (max_pred + 1.0)},
            {"draft d2t table on the backend (draft_vocab ints)", f * c.draft_vocab},
            {"draft tree nodes ((1 + max_queries x max_pred) x 16 bytes)", 16.0 * draft_tree_nodes(max_pred, max_queries)},
            {"draft tree query rows, ids, mask rows (max_queries x (3 ints + 2 x mask words))",
             N * (3 * f + 2 * 8.0 * draft_mask_words(max_pred))}};
}

// The model of a draft with a block to run (Beagle, EAGLE); a Medusa draft's heads run in MedusaDrafter.
static DraftModelT<Ops>* block_model(Ops& ops, const DraftWeights& w, const DraftFrozen& fz) {
    BEAGLE_CHECK(w.cfg.arch != ARCH_MEDUSA, "Draft: a Medusa draft has no block to run (its heads run in MedusaDrafter, "
                 "src/decode/medusa_drafter.h)");
    return new DraftModelT<Ops>(ops, w, fz);
}

Draft::Draft(const DraftWeights& w, const DraftFrozen& fz, Ops& ops, int ctx, int max_pred, int max_queries)
    : ops_(ops), m_(block_model(ops, w, fz)), ctx_(ctx), max_pred_(max_pred), max_q_(max_queries) {
    BEAGLE_CHECK(ctx >= 1 && max_pred >= 1 && max_queries >= 1, "Draft: ctx %d, max_pred %d, max_queries %d must be >= 1",
                 ctx, max_pred, max_queries);
    const DraftConfig& c = m_->cfg;
    a_.reset(new Acts(ops));
    BufAlloc<Ops>& al = a_->al;
    kt_ = al.alloc((size_t)ctx * c.kv_dim());
    vt_ = al.alloc((size_t)ctx * c.kv_dim());
    // EAGLE: the rows after the kept predictions hold the K/V of the queries being run (they see themselves)
    // (MoA: the same for its self-attention's rows)
    const int pred_rows = c.arch != ARCH_BEAGLE ? max_pred + max_queries : max_pred;
    kp_ = al.alloc((size_t)pred_rows * c.kv_dim());
    vp_ = al.alloc((size_t)pred_rows * c.kv_dim());
    stage_t_ = al.alloc((size_t)ctx * c.dim);
    stage_p_ = al.alloc((size_t)max_pred * c.dim);
    if (c.n_extra()) stage_x_ = al.alloc((size_t)ctx * c.n_extra() * c.dim);
    if (c.arch == ARCH_MOA) {
        ks_ = al.alloc((size_t)ctx * c.kv_dim());
        vs_ = al.alloc((size_t)ctx * c.kv_dim());
    }
    if (c.arch == ARCH_EAGLE) {
        eagle_acts_alloc(al, c, &a_->A, max_queries);
        a_->feat = al.alloc((size_t)max_queries * c.dim);
    } else {
        query_acts_alloc(al, c, &a_->A, max_queries);
    }
    if (c.arch == ARCH_MOA) self_attn_acts_alloc(al, c, &a_->sa, max_queries);
    a_->xn = al.alloc((size_t)max_queries * c.dim);
    a_->rstd = al.alloc(max_queries);
    a_->logits = al.alloc((size_t)max_queries * c.head_rows());
    a_->ids = (int*)al.alloc((size_t)max_pred + 1);
    if (c.draft_vocab > 0) {
        a_->d2t = (int*)al.alloc((size_t)c.draft_vocab);
        ops.upload((float*)a_->d2t, (const float*)m_->d2t.data(), (size_t)c.draft_vocab);  // 4-byte ints, copied as is
    }
    const int words = draft_mask_words(max_pred);
    a_->tree = (TreeNode*)al.alloc((size_t)draft_tree_nodes(max_pred, max_queries) * 4);
    for (int b = 0; b < 2; b++) {
        a_->trows[b] = (int*)al.alloc((size_t)max_queries);
        a_->tmask[b] = (uint64_t*)al.alloc((size_t)max_queries * words * 2);
    }
    a_->tids = (int*)al.alloc((size_t)max_queries);
    // a round's new keys: at most the accepted path (max_pred + 1 states) or the kept predictions
    key_rows(std::max(max_pred + 1, max_queries));
    // a device backend's scratch for the largest query batch (top-k rows of at most max_queries
    // children each: BeagleDrafter's k <= its topk = max_queries) and the largest batch of new keys
    ScratchSizes sz;
    sz.rows = std::max(max_pred + 1, max_queries);
    sz.mask_words = draft_mask_words(max_pred);
    sz.cols = std::max({c.dim, c.q_dim(), c.ffn_dim});
    sz.topk = max_queries;
    ops.reserve(sz);
    {  // the plan of `generate --plan` lists exactly these buffers
        double planned = 0;
        for (const MemLine& l : draft_inference_buffers(c, ctx, max_pred, max_queries)) planned += l.bytes;
        BEAGLE_CHECK(planned == (double)al.current_bytes(), "draft_inference_buffers: %.0f bytes planned, %zu allocated",
                     planned, al.current_bytes());
    }
}

// ensure_kv's temporaries for n new keys: grown (only ever) at the prompt or a longer batch than before.
void Draft::key_rows(int n) {
    if (n <= a_->key_rows) return;
    ops_.step_drop(this);  // captured steps hold the key buffers' addresses
    BufAlloc<Ops>& al = a_->al;
    al.release(a_->key_ns);
    al.release(a_->key_rstd);
    a_->key_ns = al.alloc((size_t)n * m_->cfg.dim);
    a_->key_rstd = al.alloc(n);
    if (m_->cfg.n_extra() && m_->cfg.arch == ARCH_BEAGLE) {
        al.release(a_->key_s);
        a_->key_s = al.alloc((size_t)n * m_->cfg.dim);
    }
    if (m_->cfg.arch == ARCH_BEAGLE) {
        al.release(a_->key_k);
        al.release(a_->key_v);
        a_->key_k = al.alloc((size_t)n * m_->cfg.kv_dim());
        a_->key_v = al.alloc((size_t)n * m_->cfg.kv_dim());
    }
    if (m_->cfg.arch == ARCH_MOA) {  // the true tokens' embeddings (self-attention K/V) and LSA of n positions
        al.release(a_->key_e);
        a_->key_e = al.alloc((size_t)n * m_->cfg.dim);
        lsa_acts_free(al, &a_->lsa);
        lsa_acts_alloc(al, m_->cfg, &a_->lsa, n);
    }
    if (m_->cfg.arch == ARCH_EAGLE) {
        al.release(a_->key_e);
        al.release(a_->key_x);
        a_->key_e = al.alloc((size_t)n * m_->cfg.dim);
        a_->key_x = al.alloc((size_t)n * m_->cfg.dim);
    }
    a_->key_rows = n;
}

Draft::~Draft() { ops_.step_drop(this); }  // then BufAlloc releases every buffer

bool Draft::begin_steps(int variant, const WarpParams* wp) {
    // the variant also holds the count of true states whose keys the first step computes (at most the
    // key rows kept, so that nothing grows inside a capture)
    if (m_->cfg.arch != ARCH_BEAGLE || n_true_pending_ >= 64 || n_true_pending_ > a_->key_rows ||
        n_pred_pending_ > 0 || variant >= (1 << 24) || variant <= -(1 << 24))
        return false;
    variant = variant * 64 + n_true_pending_;
    if (wp) {  // sample_ids's q rows exist before a capture; other warp arguments: the old graphs go
        if (!a_->q) a_->q = a_->al.alloc((size_t)(max_pred_ + 1) * m_->cfg.head_rows());
        if (steps_wp_set_ && (wp->temperature != steps_wp_.temperature || wp->top_k != steps_wp_.top_k ||
                              wp->top_p != steps_wp_.top_p))
            ops_.step_drop(this);
        steps_wp_ = *wp;
        steps_wp_set_ = true;
    }
    // the largest array a step stages: a mask row per query, or RoPE's frequencies
    const size_t staged = std::max((size_t)max_q_ * draft_mask_words(max_pred_) * sizeof(uint64_t),
                                   (size_t)m_->cfg.head_dim / 2 * sizeof(float));
    return ops_.step_begin(this, variant, 0, staged);
}

void Draft::end_steps() { ops_.step_end(); }

const DraftConfig& Draft::config() const { return m_->cfg; }

void Draft::use_target_weights(const Weight& tok_embd, const Weight& lm_head) {
    const DraftConfig& c = m_->cfg;
    BEAGLE_CHECK(tok_embd.rows == c.vocab_size && tok_embd.cols == c.dim && lm_head.rows == c.vocab_size &&
                     lm_head.cols == c.dim,
                 "draft: target embedding [%lld, %lld] / LM head [%lld, %lld] do not match vocab %d x dim %d",
                 (long long)tok_embd.rows, (long long)tok_embd.cols, (long long)lm_head.rows, (long long)lm_head.cols,
                 c.vocab_size, c.dim);
    m_->embd_w = tok_embd;
    m_->head_w = lm_head;
    if (c.draft_vocab > 0) m_->head_w = reduced_head_weight(ops_, lm_head, m_->d2t, c.dim, &head_rows_, &head_sub_);
}

void Draft::use_q8_weights(const DraftWeights& w) {
    const DraftConfig& c = m_->cfg;
    BEAGLE_CHECK(w.cfg.dim == c.dim && w.cfg.ffn_dim == c.ffn_dim && w.cfg.n_heads == c.n_heads &&
                     w.cfg.n_kv_heads == c.n_kv_heads && w.cfg.head_dim == c.head_dim,
                 "use_q8_weights: weights of another draft shape");
    for (int t = 0; t < DT_COUNT; t++) {
        if (!c.has(t) || draft_tensor_is_vector(t)) continue;
        const int64_t rows = c.rows(t), cols = c.cols(t);
        BEAGLE_CHECK((int64_t)w.t[t].size() == rows * cols, "use_q8_weights: %s has %zu values, expected %lld",
                     draft_tensor_name(t), w.t[t].size(), (long long)(rows * cols));
        if (cols % QK != 0) continue;
        const uint64_t rb = dtype_row_bytes(DType::Q8_0, (uint64_t)cols);
        q8_bytes_[t].assign(rb * rows, 0);
        for (int64_t r = 0; r < rows; r++) quantize_row_q8_0(w.t[t].data() + r * cols, q8_bytes_[t].data() + r * rb, cols);
        q8_t_[t].reset(new Tensor());
        Tensor& q = *q8_t_[t];
        q.name = std::string(draft_tensor_name(t)) + "[q8_0]";
        q.dtype = DType::Q8_0;
        q.ndim = 2;
        q.shape[0] = rows;
        q.shape[1] = cols;
        q.data = q8_bytes_[t].data();
        q.nbytes = q8_bytes_[t].size();
        m_->fast_w[t] = ops_.matmul_weight(q);
    }
}

void Draft::reset() {
    n_true_cached_ = n_true_pending_ = 0;
    true_tok_.clear();
    clear_pred();
}

void Draft::truncate_true(int n) {
    BEAGLE_CHECK(n >= 0 && n <= n_true(), "draft: keep %d true states of the %d it holds", n, n_true());
    clear_pred();
    // K/V of positions below n_true_cached_ are computed (EAGLE: the keys of positions 1 .. n_true_cached_ - 1,
    // each made of t_p and f_{p-1}); the pending ones wait in the staging rows (Beagle: from row 0, EAGLE: at
    // their positions), so keeping a prefix of either is a count
    if (n <= n_true_cached_) {
        n_true_cached_ = n;
        n_true_pending_ = 0;
    } else {
        n_true_pending_ = n - n_true_cached_;
    }
    if (m_->cfg.arch != ARCH_BEAGLE) true_tok_.resize(n);
}

int Draft::state_width() const { return m_->cfg.dim * (1 + m_->cfg.n_extra()); }

// Wide rows (state layers): row i's f goes to stage_t_, its E layer rows to stage_x_ (both from row
// n_true_pending_ on). The split is two row gathers over dim-wide views: f of state row r is view row
// r (1 + E), its layer k view row r (1 + E) + 1 + k.
void Draft::add_wide_rows(const float* src, const int* rows, int n) {
    const DraftConfig& c = m_->cfg;
    const int E = c.n_extra();
    std::vector<int> fi(n), xi((size_t)n * E);
    for (int i = 0; i < n; i++) {
        fi[i] = rows[i] * (1 + E);
        for (int k = 0; k < E; k++) xi[(size_t)i * E + k] = rows[i] * (1 + E) + 1 + k;
    }
    ops_.gather_rows(stage_t_ + (size_t)n_true_pending_ * c.dim, src, fi.data(), n, c.dim);
    ops_.gather_rows(stage_x_ + (size_t)n_true_pending_ * E * c.dim, src, xi.data(), n * E, c.dim);
}

void Draft::add_true_states(const float* states, int n, const int* tokens, bool on_backend) {
    if (n <= 0) return;
    const DraftConfig& c = m_->cfg;
    BEAGLE_CHECK(n_true() + n <= ctx_, "draft: %d true states would exceed its context of %d", n_true() + n, ctx_);
    const bool eagle = c.arch == ARCH_EAGLE;
    BEAGLE_CHECK(c.arch == ARCH_BEAGLE || tokens, "draft: an %s draft needs the tokens of the true states' positions",
                 eagle ? "EAGLE" : "MoA");
    if (c.arch == ARCH_MOA) true_tok_.insert(true_tok_.end(), tokens, tokens + n);
    if (c.n_extra()) {  // state layers: wide rows, split into stage_t_ and stage_x_
        const int E = c.n_extra(), W = state_width();
        if (on_backend) {
            std::vector<int> rows(n);
            for (int i = 0; i < n; i++) rows[i] = i;
            add_wide_rows(states, rows.data(), n);
        } else {
            std::vector<float> f((size_t)n * c.dim), x((size_t)n * E * c.dim);
            for (int i = 0; i < n; i++) {
                memcpy(&f[(size_t)i * c.dim], states + (size_t)i * W, c.dim * sizeof(float));
                memcpy(&x[(size_t)i * E * c.dim], states + (size_t)i * W + c.dim, (size_t)E * c.dim * sizeof(float));
            }
            ops_.upload(stage_t_ + (size_t)n_true_pending_ * c.dim, f.data(), f.size());
            ops_.upload(stage_x_ + (size_t)n_true_pending_ * E * c.dim, x.data(), x.size());
        }
        n_true_pending_ += n;
        return;
    }
    // Beagle: pending rows from 0 (their K/V are computed once, then the rows are reused); EAGLE: every
    // true state at its position (each key and the next round's first query read f_{p-1})
    float* dst = stage_t_ + (size_t)(eagle ? n_true() : n_true_pending_) * c.dim;
    if (on_backend) ops_.copy(dst, states, (size_t)n * c.dim);
    else ops_.upload(dst, states, (size_t)n * c.dim);
    if (eagle) true_tok_.insert(true_tok_.end(), tokens, tokens + n);
    n_true_pending_ += n;
}

void Draft::add_true_state_rows(const float* src, const int* rows, int n, const int* tokens) {
    if (n <= 0) return;
    const DraftConfig& c = m_->cfg;
    BEAGLE_CHECK(n_true() + n <= ctx_, "draft: %d true states would exceed its context of %d", n_true() + n, ctx_);
    const bool eagle = c.arch == ARCH_EAGLE;
    BEAGLE_CHECK(c.arch == ARCH_BEAGLE || tokens, "draft: an %s draft needs the tokens of the true states' positions",
                 eagle ? "EAGLE" : "MoA");
    if (c.arch == ARCH_MOA) true_tok_.insert(true_tok_.end(), tokens, tokens + n);
    if (c.n_extra()) add_wide_rows(src, rows, n);
    else ops_.gather_rows(stage_t_ + (size_t)(eagle ? n_true() : n_true_pending_) * c.dim, src, rows, n, c.dim);
    if (eagle) true_tok_.insert(true_tok_.end(), tokens, tokens + n);
    n_true_pending_ += n;
}

void Draft::top_k(int k, int* idx, float* val, float* lse) {
    BEAGLE_CHECK(!last_pos_.empty(), "draft: top_k before any forward");
    ops_.topk_rows(idx, val, lse, a_->logits, (int)last_pos_.size(), m_->cfg.head_rows(), k);
}

void Draft::argmax_ids(int slot) {
    const int n = (int)last_pos_.size();
    BEAGLE_CHECK(n >= 1, "draft: argmax_ids before any forward");
    BEAGLE_CHECK(slot >= 0 && slot + n <= max_pred_ + 1, "draft: argmax_ids slots %d..%d past %d", slot, slot + n - 1,
                 max_pred_);
    ops_.topk_rows(a_->ids + slot, nullptr, nullptr, a_->logits, n, m_->cfg.head_rows(), 1, true);
}

void Draft::sample_ids(int slot, const WarpParams& wp, float coin) {
    BEAGLE_CHECK(last_pos_.size() == 1, "draft: sample_ids after a forward of %zu rows (one)", last_pos_.size());
    BEAGLE_CHECK(slot >= 0 && slot <= max_pred_, "draft: sample_ids slot %d past %d", slot, max_pred_);
    const int V = m_->cfg.head_rows();
    if (!a_->q) a_->q = a_->al.alloc((size_t)(max_pred_ + 1) * V);
    ops_.warp_rows(a_->q + (size_t)slot * V, a_->ids + slot, &coin, a_->logits, 1, V, wp);
}

const float* Draft::q_rows() const { return a_->q; }

void Draft::download_ids(int* out, int n) {
    BEAGLE_CHECK(n >= 0 && n <= max_pred_ + 1, "draft: download_ids of %d ids, %d slots", n, max_pred_ + 1);
    if (n > 0) ops_.download((float*)out, (const float*)a_->ids, (size_t)n);  // 4-byte ints, copied as is
}

void Draft::tree_expand(int depth, int k, int n_nodes, int n_next, int base, float min_score) {
    const int n = (int)last_pos_.size(), words = draft_mask_words(max_pred_);
    BEAGLE_CHECK(n >= 1 && depth >= 0, "draft: tree_expand before any forward");
    BEAGLE_CHECK(k >= 1 && k <= m_->cfg.head_rows() && n_nodes >= 1 &&
                     n_nodes + n * k <= draft_tree_nodes(max_pred_, max_q_) && n_next >= 0 && n_next <= max_q_ &&
                     base + n <= max_pred_,
                 "draft tree_expand: %d rows x %d children after %d nodes (at most %d), %d next rows (at most %d), base %d",
                 n, k, n_nodes, draft_tree_nodes(max_pred_, max_q_), n_next, max_q_, base);
    TreeExpandArgs a;
    a.nodes = a_->tree;
    a.rows = depth ? a_->trows[depth % 2] : nullptr;
    a.mask = depth ? a_->tmask[depth % 2] : nullptr;
    a.rows_next = a_->trows[(depth + 1) % 2];
    a.mask_next = a_->tmask[(depth + 1) % 2];
    a.ids_next = a_->tids;
    a.words = words;
    a.n = n;
    a.k = k;
    a.n_nodes = n_nodes;
    a.depth = depth;
    a.n_next = n_next;
    a.base = base;
    a.min_score = min_score;
    ops_.tree_expand(a_->logits, m_->cfg.head_rows(), a);
}

void Draft::forward_tree(int depth, const int* pos, int n) {
    BEAGLE_CHECK(can_forward_tree(),
                 "draft: forward_tree needs a Beagle draft with the target's embedding (use_target_weights)");
    BEAGLE_CHECK(depth >= 1 && n >= 1 && n <= max_q_, "draft forward_tree: depth %d, %d queries (1..%d)", depth, n, max_q_);
    ops_.embed(a_->A.u, m_->embd_w, a_->tids, n, true, a_->d2t);  // u = E(d2t[id]), never on the host
    forward_impl(nullptr, pos, n, a_->tmask[depth % 2], draft_mask_words(max_pred_), true, nullptr, nullptr);
}

void Draft::download_tree(TreeNode* out, int first, int n) {
    BEAGLE_CHECK(first >= 0 && n >= 0 && first + n <= draft_tree_nodes(max_pred_, max_q_),
                 "draft: download_tree of nodes %d..%d", first, first + n - 1);
    if (n > 0) ops_.download((float*)out, (const float*)(a_->tree + first), (size_t)n * 4);  // 4-byte fields as is
}

void Draft::clear_pred() {
    n_pred_cached_ = n_pred_pending_ = 0;
    pred_pos_.clear();
}

int Draft::keep_pred(const int* rows, int n) {
    const DraftConfig& c = m_->cfg;
    int first = n_pred();
    BEAGLE_CHECK(first + n <= max_pred_, "draft: %d predicted states would exceed max_pred %d", first + n, max_pred_);
    for (int i = 0; i < n; i++)
        BEAGLE_CHECK(rows[i] >= 0 && rows[i] < (int)last_pos_.size() &&
                         (c.arch == ARCH_BEAGLE || i == 0 || rows[i] > rows[i - 1]),
                     "draft: keep_pred row %d outside the last forward's %zu (EAGLE, MoA: rows increasing, once per "
                     "forward)",
                     rows[i], last_pos_.size());
    if (c.arch != ARCH_BEAGLE) {  // the queries' K/V rows (after the kept ones) become kept rows, in order
        const int kvd = c.kv_dim();
        for (int i = 0; i < n; i++) {
            if (rows[i] != i) {  // rows[i] >= i: moving down in order never overwrites a row still to move
                ops_.copy(kp_ + (size_t)(first + i) * kvd, kp_ + (size_t)(first + rows[i]) * kvd, kvd);
                ops_.copy(vp_ + (size_t)(first + i) * kvd, vp_ + (size_t)(first + rows[i]) * kvd, kvd);
            }
            ops_.copy(stage_p_ + (size_t)(first + i) * c.dim, a_->A.fh + (size_t)rows[i] * c.dim, c.dim);
            pred_pos_.push_back(last_pos_[rows[i]]);
        }
        n_pred_cached_ += n;
        last_pos_.clear();  // the query rows were consumed
        return first;
    }
    for (int i = 0; i < n; i++) {
        ops_.copy(stage_p_ + (size_t)(n_pred_pending_ + i) * c.dim, a_->A.fh + (size_t)rows[i] * c.dim, c.dim);
        pred_pos_.push_back(last_pos_[rows[i]]);
    }
    n_pred_pending_ += n;
    return first;
}

// Lazy appending: K/V of states added since the last forward are computed now, once.
void Draft::ensure_kv() {
    const DraftConfig& c = m_->cfg;
    int kvd = c.kv_dim();
    if (c.arch == ARCH_MOA) {  // new true positions: LSA of their staged rows -> cross-attention K/V; their tokens'
        const int n = n_true_pending_, r0 = n_true_cached_;  // self-attention K/V
        if (n > 0) {
            std::vector<int> pos(n);
            for (int i = 0; i < n; i++) pos[i] = r0 + i;
            key_rows(n);
            lsa_input(*m_, a_->lsa, stage_t_, stage_x_, n);
            lsa_forward(*m_, a_->lsa, n, pos.data(), kt_ + (size_t)r0 * kvd, vt_ + (size_t)r0 * kvd);
            self_attn_kv(*m_, a_->key_e, a_->key_ns, a_->key_rstd, true_tok_.data() + r0, n, pos.data(),
                         ks_ + (size_t)r0 * kvd, vs_ + (size_t)r0 * kvd);
        }
        n_true_cached_ += n;
        n_true_pending_ = 0;
        return;
    }
    if (c.arch == ARCH_EAGLE) {  // keys of the new true positions p >= 1: x_p = W_fc [E(t_p); f_{p-1}], set-0 row p - 1
        const int p0 = std::max(n_true_cached_, 1), p1 = n_true_cached_ + n_true_pending_;
        const int n = p1 - p0;
        if (n > 0) {
            std::vector<int> pos(n);
            for (int i = 0; i < n; i++) pos[i] = p0 + i;
            key_rows(n);  // e, x, xn, rstd: kept between rounds (a device backend allocates nothing per round)
            eagle_input(*m_, a_->key_e, a_->key_x, a_->key_ns, a_->key_rstd, true_tok_.data() + p0,
                        stage_t_ + (size_t)(p0 - 1) * c.dim, n);
            eagle_kv(*m_, a_->key_ns, kt_ + (size_t)(p0 - 1) * kvd, vt_ + (size_t)(p0 - 1) * kvd, n, pos.data());
        }
        n_true_cached_ = p1;
        n_true_pending_ = 0;
        return;
    }
    // true keys (state layers fused): computed apart, then scattered to their rows (row = position) by a row
    // list, so that the calls stay the same from round to round (begin_steps)
    if (const int n = n_true_pending_) {
        std::vector<int> rows(n);
        for (int i = 0; i < n; i++) rows[i] = n_true_cached_ + i;
        key_rows(n);
        const float* s = stage_t_;
        if (c.n_extra()) {
            fuse_forward(*m_, stage_t_, stage_x_, a_->key_s, n);
            s = a_->key_s;
        }
        key_forward(*m_, s, a_->key_ns, a_->key_rstd, a_->key_k, a_->key_v, n, rows.data());
        ops_.scatter_rows(kt_, a_->key_k, rows.data(), n, kvd, false);
        ops_.scatter_rows(vt_, a_->key_v, rows.data(), n, kvd, false);
        n_true_cached_ += n;
        n_true_pending_ = 0;
    }
    // predicted keys (last-layer states) after the kept ones, at their queries' positions
    if (const int n = n_pred_pending_) {
        const int r0 = n_pred_cached_;
        const std::vector<int> pos(pred_pos_.begin() + r0, pred_pos_.begin() + r0 + n);
        key_rows(n);
        key_forward(*m_, stage_p_, a_->key_ns, a_->key_rstd, kp_ + (size_t)r0 * kvd, vp_ + (size_t)r0 * kvd, n,
                    pos.data());
        n_pred_cached_ += n;
        n_pred_pending_ = 0;
    }
}

bool Draft::can_forward_ids() const { return m_->embd_w.data != nullptr; }
bool Draft::can_forward_tree() const { return m_->cfg.arch == ARCH_BEAGLE && can_forward_ids(); }

void Draft::forward_ids(int slot, const int* pos, int n, const uint64_t* pred_mask, int mask_words) {
    BEAGLE_CHECK(can_forward_ids(), "draft: forward_ids needs the target's embedding (use_target_weights)");
    BEAGLE_CHECK(n >= 1 && n <= max_q_ && slot >= 0 && slot + n <= max_pred_ + 1,
                 "draft forward_ids: %d queries from slot %d (queries 1..%d, slots %d)", n, slot, max_q_, max_pred_ + 1);
    // u (Beagle), e (EAGLE: the input before fc; MoA: before the self-attention) = E(d2t[id]), never on the host
    const int arch = m_->cfg.arch;
    ops_.embed(arch == ARCH_EAGLE ? a_->A.e : arch == ARCH_MOA ? a_->sa.e : a_->A.u, m_->embd_w, a_->ids + slot, n, true,
               a_->d2t);
    forward_impl(nullptr, pos, n, pred_mask, mask_words, false, nullptr, nullptr);
}

void Draft::forward(const int* tokens, const int* pos, int n, const uint64_t* pred_mask, int mask_words,
                    float* states_out, float* logits_out) {
    BEAGLE_CHECK(tokens || m_->cfg.arch == ARCH_BEAGLE, "draft forward: an %s draft needs host tokens",
                 draft_arch_name(m_->cfg.arch));
    forward_impl(tokens, pos, n, pred_mask, mask_words, false, states_out, logits_out);
}

void Draft::forward_impl(const int* tokens, const int* pos, int n, const uint64_t* pred_mask, int mask_words,
                         bool mask_on_backend, float* states_out, float* logits_out) {
    const DraftConfig& c = m_->cfg;
    BEAGLE_CHECK(n >= 1 && n <= max_q_, "draft forward: %d queries, allowed 1..%d", n, max_q_);
    ensure_kv();
    forwards_++;
    if (c.arch != ARCH_BEAGLE) {
        BEAGLE_CHECK(!mask_on_backend, "draft forward: an %s draft's masks are host arrays", draft_arch_name(c.arch));
        if (c.arch == ARCH_EAGLE) eagle_forward(tokens, pos, n, pred_mask, mask_words);
        else moa_forward(tokens, pos, n, pred_mask, mask_words);
        head_logits(*m_, a_->A.fh, n, a_->xn, a_->rstd, a_->logits);
        if (states_out) ops_.download(states_out, a_->A.fh, (size_t)n * c.dim);
        if (logits_out) ops_.download(logits_out, a_->logits, (size_t)n * c.head_rows());
        return;
    }
    BEAGLE_CHECK(n_true_cached_ >= 1, "draft forward: no true states yet (add_true_states first)");
    const XAttnKeys keys = key_sets(kt_, vt_, n_true_cached_, true_window_, c.kv_dim(), kp_, vp_, n_pred_cached_);
    XAttnMask mask;
    mask.kind = XAttnMask::PREFIX;
    if (concat_ && pred_mask && n_pred_cached_ > 0) {
        BEAGLE_CHECK(mask_words * 64 >= n_pred_cached_, "draft forward: mask of %d words for %d predicted rows", mask_words,
                     n_pred_cached_);
        mask.set1_bits = pred_mask;
        mask.set1_words = mask_words;
        mask.set1_on_backend = mask_on_backend;
    }
    last_pos_.assign(pos, pos + n);
    QueryActs<float>& A = a_->A;
    query_forward(*m_, A, n, tokens, pos, nullptr, keys, mask);
    head_logits(*m_, A.fh, n, a_->xn, a_->rstd, a_->logits);
    if (states_out) ops_.download(states_out, A.fh, (size_t)n * c.dim);
    if (logits_out) ops_.download(logits_out, a_->logits, (size_t)n * c.head_rows());
}

// EAGLE queries: feature f_{p-1} of each (the last true state, or the parent's prediction found in its
// mask row), their own K/V written after the kept predicted rows, and a PREFIX mask over the true keys
// plus, per query, its ancestors' rows and its own.
void Draft::eagle_forward(const int* tokens, const int* pos, int n, const uint64_t* pred_mask, int mask_words) {
    const DraftConfig& c = m_->cfg;
    const int kvd = c.kv_dim(), np = n_pred_cached_, nt = n_true_cached_;
    BEAGLE_CHECK(nt >= 1, "draft forward: no true states yet (add_true_states first)");
    BEAGLE_CHECK(n_pred_pending_ == 0, "draft: EAGLE keeps no pending predicted rows");
    int W = 0;
    const std::vector<uint64_t> bits = self_rows_mask(n, np, pred_mask, mask_words, &W);
    for (int i = 0; i < n; i++) {
        const float* f = nullptr;
        if (pos[i] == nt) {
            f = stage_t_ + (size_t)(nt - 1) * c.dim;
        }
        for (int r = 0; r < np; r++) {
            if (!((bits[(size_t)i * W + r / 64] >> (r % 64)) & 1)) continue;
            if (pos[i] != nt && pred_pos_[r] == pos[i] - 1) f = stage_p_ + (size_t)r * c.dim;
        }
        BEAGLE_CHECK(f, "draft: EAGLE query %d at position %d has no feature (neither the next position after the %d "
                     "true states nor a predicted parent at position %d in its mask)", i, pos[i], nt, pos[i] - 1);
        ops_.copy(a_->feat + (size_t)i * c.dim, f, c.dim);
    }
    // set 0: the keys of positions 1..nt-1
    const XAttnKeys keys = key_sets(kt_, vt_, nt - 1, true_window_, c.kv_dim(), kp_, vp_, np + n);
    XAttnMask mask;
    mask.kind = XAttnMask::PREFIX;
    mask.set1_bits = bits.data();
    mask.set1_words = W;
    last_pos_.assign(pos, pos + n);
    beagle::eagle_forward(*m_, a_->al, a_->A, n, tokens, a_->feat, pos, kp_ + (size_t)np * kvd, vp_ + (size_t)np * kvd,
                          nullptr, keys, mask);
}

std::vector<uint64_t> Draft::self_rows_mask(int n, int np, const uint64_t* pred_mask, int mask_words, int* words) const {
    BEAGLE_CHECK(!pred_mask || mask_words * 64 >= np, "draft forward: mask of %d words for %d predicted rows", mask_words, np);
    const int W = (np + n + 63) / 64;
    std::vector<uint64_t> bits((size_t)n * W, 0);
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < np; r++)
            if (pred_mask && ((pred_mask[(size_t)i * mask_words + r / 64] >> (r % 64)) & 1))
                bits[(size_t)i * W + r / 64] |= 1ULL << (r % 64);
        bits[(size_t)i * W + (np + i) / 64] |= 1ULL << ((np + i) % 64);  // itself
    }
    *words = W;
    return bits;
}

// MoA queries: the self-attention over the true tokens' K/V (set 0) and, per query, its ancestors' kept rows
// and its own (set 1, written after the kept rows), then the cross-attention block over the true positions' LSA
// keys (no predicted keys: the draft has none).
void Draft::moa_forward(const int* tokens, const int* pos, int n, const uint64_t* pred_mask, int mask_words) {
    const DraftConfig& c = m_->cfg;
    const int kvd = c.kv_dim(), np = n_pred_cached_, nt = n_true_cached_;
    BEAGLE_CHECK(nt >= 1, "draft forward: no true states yet (add_true_states first)");
    BEAGLE_CHECK(n_pred_pending_ == 0, "draft: MoA keeps no pending predicted rows");
    int W = 0;
    const std::vector<uint64_t> bits = self_rows_mask(n, np, pred_mask, mask_words, &W);
    const XAttnKeys skeys = key_sets(ks_, vs_, nt, true_window_, kvd, kp_, vp_, np + n);
    XAttnMask smask;
    smask.kind = XAttnMask::PREFIX;
    smask.set1_bits = bits.data();
    smask.set1_words = W;
    last_pos_.assign(pos, pos + n);
    self_attn_forward(*m_, a_->sa, n, tokens, pos, kp_ + (size_t)np * kvd, vp_ + (size_t)np * kvd, nullptr, skeys,
                      smask, a_->A.u);
    query_forward(*m_, a_->A, n, nullptr, pos, nullptr, key_sets(kt_, vt_, nt, true_window_, kvd), XAttnMask());
}

const float* Draft::states_backend() const { return a_->A.fh; }
const float* Draft::logits_backend() const { return a_->logits; }

}  // namespace beagle
