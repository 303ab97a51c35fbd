// draft.cpp: the draft's config, random init, file format (save/load with full validation), the
// frozen target tensors, and the inference object Draft (see draft.h). The layer math is in
// src/model/draft_layers.cpp, shared with training.
#include <sys/stat.h>
#include "draft.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "../core/common.h"
#include "../backend/buf_alloc.h"
#include "draft_layers.h"
#include "../core/rng.h"

namespace beagle {

static const char* kTensorNames[DT_COUNT] = {"wq",      "wk",      "wv",     "wo",   "norm_q",
                                             "norm_kv", "norm_m",  "w_gate", "w_up", "w_down"};
const char* draft_tensor_name(int i) { return i >= 0 && i < DT_COUNT ? kTensorNames[i] : "?"; }

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
        case DT_WQ: return q_dim();
        case DT_WK: case DT_WV: return kv_dim();
        case DT_WO: case DT_W_DOWN: return dim;
        case DT_W_GATE: case DT_W_UP: return ffn_dim;
        default: return 1;
    }
}

int64_t DraftConfig::cols(int t) const {
    switch (t) {
        case DT_WO: return q_dim();
        case DT_W_DOWN: return ffn_dim;
        default: return dim;
    }
}

void DraftConfig::validate(const char* where) const {
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
        if (i == DT_NORM_Q || i == DT_NORM_KV || i == DT_NORM_M) continue;
        double bound = 1.0 / std::sqrt((double)c.cols(i));
        for (float& x : t[i]) x = (float)((2.0 * rng.uniform() - 1.0) * bound);
    }
}

// ---- CRC-32 (zlib polynomial 0xEDB88320) ------------------------------------------------------------
uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
    static uint32_t table[256];
    static bool init = false;
    if (!init) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        init = true;
    }
    crc = ~crc;
    const uint8_t* p = (const uint8_t*)data;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

// ---- file format ------------------------------------------------------------------------------------
static const char kMagic[8] = {'B', 'E', 'A', 'G', 'L', 'E', 'D', 'R'};
static const uint32_t kVersion = 1;

static void put_u32(std::vector<uint8_t>& b, uint32_t v) { b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 4); }
static void put_u64(std::vector<uint8_t>& b, uint64_t v) { b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 8); }

static std::string config_text(const DraftConfig& c, const std::vector<std::pair<std::string, std::string>>& meta) {
    std::string s;
    s += strfmt("dim %d\n", c.dim);
    s += strfmt("n_heads %d\n", c.n_heads);
    s += strfmt("n_kv_heads %d\n", c.n_kv_heads);
    s += strfmt("head_dim %d\n", c.head_dim);
    s += strfmt("ffn_dim %d\n", c.ffn_dim);
    s += strfmt("vocab_size %d\n", c.vocab_size);
    if (c.draft_vocab > 0) s += strfmt("draft_vocab %d\n", c.draft_vocab);
    s += strfmt("norm_eps %.9g\n", c.norm_eps);
    s += strfmt("final_eps %.9g\n", c.final_eps);
    s += strfmt("rope_theta %.9g\n", c.rope_theta);
    s += strfmt("rope_scaling %d\n", c.rope_scaling ? 1 : 0);
    s += strfmt("rope_factor %.9g\n", c.rope_factor);
    s += strfmt("rope_low_freq_factor %.9g\n", c.rope_low_freq_factor);
    s += strfmt("rope_high_freq_factor %.9g\n", c.rope_high_freq_factor);
    s += strfmt("rope_orig_max_pos %d\n", c.rope_orig_max_pos);
    s += strfmt("target_n_layers %d\n", c.target_n_layers);
    s += strfmt("tokenizer_hash %016llx\n", (unsigned long long)c.tokenizer_hash);
    for (auto& kv : meta) {
        BEAGLE_CHECK(!kv.first.empty() && kv.first.find_first_of(" \n") == std::string::npos &&
                         kv.second.find('\n') == std::string::npos,
                     "draft metadata key '%s' must be one word and its value one line", kv.first.c_str());
        s += "meta." + kv.first + " " + kv.second + "\n";
    }
    return s;
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
    const bool has_map = w.cfg.draft_vocab > 0;
    std::string cfg = config_text(w.cfg, w.meta);
    // table size first, to place the data
    size_t table = has_map ? 4 + 3 + 4 + 2 * 8 + 8 + 8 : 0;
    for (int i = 0; i < DT_COUNT; i++) {
        BEAGLE_CHECK(w.t[i].size() == (size_t)w.cfg.numel(i), "save_draft: tensor %s has %zu values, expected %lld",
                     draft_tensor_name(i), w.t[i].size(), (long long)w.cfg.numel(i));
        table += 4 + strlen(draft_tensor_name(i)) + 4 + 2 * 8 + 8 + 8;
    }
    size_t off = 32 + cfg.size() + table;
    off = (off + 63) / 64 * 64;
    std::vector<uint64_t> offsets(DT_COUNT);
    size_t end = off;
    for (int i = 0; i < DT_COUNT; i++) {
        offsets[i] = end;
        end += w.t[i].size() * 4;
        end = (end + 63) / 64 * 64;
    }
    uint64_t map_off = end;
    if (has_map) end = (end + w.d2t.size() * 4 + 63) / 64 * 64;
    size_t file_size = end + 4;
    std::vector<uint8_t> b;
    b.reserve(file_size);
    b.insert(b.end(), kMagic, kMagic + 8);
    put_u32(b, kVersion);
    put_u32(b, DT_COUNT + (has_map ? 1 : 0));
    put_u32(b, (uint32_t)cfg.size());
    put_u32(b, 0);
    put_u64(b, file_size);
    b.insert(b.end(), cfg.begin(), cfg.end());
    for (int i = 0; i < DT_COUNT; i++) {
        const char* name = draft_tensor_name(i);
        put_u32(b, (uint32_t)strlen(name));
        b.insert(b.end(), name, name + strlen(name));
        bool vec = i == DT_NORM_Q || i == DT_NORM_KV || i == DT_NORM_M;
        put_u32(b, vec ? 1 : 2);
        if (vec) {
            put_u64(b, (uint64_t)w.cfg.cols(i));
            put_u64(b, 0);  // unused slot keeps the table size fixed
        } else {
            put_u64(b, (uint64_t)w.cfg.rows(i));
            put_u64(b, (uint64_t)w.cfg.cols(i));
        }
        put_u64(b, offsets[i]);
        put_u64(b, w.t[i].size() * 4);
    }
    if (has_map) {
        put_u32(b, 3);
        b.insert(b.end(), "d2t", "d2t" + 3);
        put_u32(b, 1);
        put_u64(b, w.d2t.size());
        put_u64(b, 0);
        put_u64(b, map_off);
        put_u64(b, w.d2t.size() * 4);
    }
    b.resize(file_size - 4, 0);
    for (int i = 0; i < DT_COUNT; i++) memcpy(b.data() + offsets[i], w.t[i].data(), w.t[i].size() * 4);
    if (has_map) memcpy(b.data() + map_off, w.d2t.data(), w.d2t.size() * 4);
    put_u32(b, crc32_update(0, b.data(), b.size()));
    write_file_atomic(path, b.data(), b.size());
}

static int parse_int(const std::string& path, const std::map<std::string, std::string>& kv, const char* key) {
    auto it = kv.find(key);
    if (it == kv.end()) fail("%s: draft config lacks key '%s'", path.c_str(), key);
    char* end = nullptr;
    long v = strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end || v < INT32_MIN || v > INT32_MAX)
        fail("%s: draft config key '%s': expected an integer, found '%s'", path.c_str(), key, it->second.c_str());
    return (int)v;
}

static float parse_float(const std::string& path, const std::map<std::string, std::string>& kv, const char* key) {
    auto it = kv.find(key);
    if (it == kv.end()) fail("%s: draft config lacks key '%s'", path.c_str(), key);
    char* end = nullptr;
    float v = strtof(it->second.c_str(), &end);
    if (it->second.empty() || *end || !std::isfinite(v))
        fail("%s: draft config key '%s': expected a number, found '%s'", path.c_str(), key, it->second.c_str());
    return v;
}

DraftWeights load_draft(const std::string& path) {
    struct stat st;  // a FIFO or device would block or stream forever: drafts are regular files
    if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        fail("draft path '%s' is not a regular file", path.c_str());
    std::string data = read_file(path);
    const uint8_t* p = (const uint8_t*)data.data();
    size_t size = data.size();
    const char* P = path.c_str();
    if (size < 8 || memcmp(p, kMagic, 8) != 0)
        fail("%s: not a Beagle draft file (expected magic \"BEAGLEDR\" at byte 0)", P);
    if (size < 36) fail("%s: truncated draft file: %zu bytes, the header alone needs 36", P, size);
    auto u32 = [&](size_t off) {
        uint32_t v;
        memcpy(&v, p + off, 4);
        return v;
    };
    auto u64 = [&](size_t off) {
        uint64_t v;
        memcpy(&v, p + off, 8);
        return v;
    };
    uint32_t version = u32(8);
    if (version != kVersion) fail("%s: draft file version %u, this build reads version %u", P, version, kVersion);
    uint64_t want_size = u64(24);
    if (want_size != size)
        fail("%s: draft file is %zu bytes but its header says %llu (%s)", P, size, (unsigned long long)want_size,
             size < want_size ? "truncated" : "trailing bytes");
    uint32_t crc = u32(size - 4), got = crc32_update(0, p, size - 4);
    if (crc != got) fail("%s: draft file checksum mismatch (stored CRC-32 %08x, computed %08x): the file is corrupt", P, crc, got);
    uint32_t n_tensors = u32(12), cfg_len = u32(16);
    if (n_tensors != DT_COUNT && n_tensors != DT_COUNT + 1)
        fail("%s: draft file has %u tensors, expected %d (or %d with a reduced vocabulary)", P, n_tensors, (int)DT_COUNT,
             (int)DT_COUNT + 1);
    if (32 + (uint64_t)cfg_len > size - 4) fail("%s: draft config length %u runs past the end of the file", P, cfg_len);

    // config text
    std::map<std::string, std::string> kv;
    DraftWeights w;
    std::string cfg((const char*)p + 32, cfg_len);
    size_t line_start = 0;
    while (line_start < cfg.size()) {
        size_t nl = cfg.find('\n', line_start);
        if (nl == std::string::npos) fail("%s: draft config is not newline-terminated (byte %zu)", P, 32 + line_start);
        std::string line = cfg.substr(line_start, nl - line_start);
        size_t sp = line.find(' ');
        if (sp == std::string::npos || sp == 0)
            fail("%s: draft config line '%s' at byte %zu is not 'key value'", P, line.c_str(), 32 + line_start);
        std::string key = line.substr(0, sp), val = line.substr(sp + 1);
        if (key.compare(0, 5, "meta.") == 0) w.meta.emplace_back(key.substr(5), val);
        else kv[key] = val;
        line_start = nl + 1;
    }
    DraftConfig& c = w.cfg;
    c.dim = parse_int(path, kv, "dim");
    c.n_heads = parse_int(path, kv, "n_heads");
    c.n_kv_heads = parse_int(path, kv, "n_kv_heads");
    c.head_dim = parse_int(path, kv, "head_dim");
    c.ffn_dim = parse_int(path, kv, "ffn_dim");
    c.vocab_size = parse_int(path, kv, "vocab_size");
    c.draft_vocab = kv.count("draft_vocab") ? parse_int(path, kv, "draft_vocab") : 0;
    if (c.draft_vocab <= 0 && kv.count("draft_vocab"))
        fail("%s: draft config key 'draft_vocab': expected a positive integer, found %d", P, c.draft_vocab);
    if ((n_tensors == DT_COUNT + 1) != (c.draft_vocab > 0))
        fail("%s: draft file has %u tensors but its config %s a reduced vocabulary (draft_vocab)", P, n_tensors,
             c.draft_vocab > 0 ? "declares" : "does not declare");
    c.norm_eps = parse_float(path, kv, "norm_eps");
    c.final_eps = parse_float(path, kv, "final_eps");
    c.rope_theta = parse_float(path, kv, "rope_theta");
    c.rope_scaling = parse_int(path, kv, "rope_scaling") != 0;
    c.rope_factor = parse_float(path, kv, "rope_factor");
    c.rope_low_freq_factor = parse_float(path, kv, "rope_low_freq_factor");
    c.rope_high_freq_factor = parse_float(path, kv, "rope_high_freq_factor");
    c.rope_orig_max_pos = parse_int(path, kv, "rope_orig_max_pos");
    c.target_n_layers = parse_int(path, kv, "target_n_layers");
    {
        auto it = kv.find("tokenizer_hash");
        if (it == kv.end()) fail("%s: draft config lacks key 'tokenizer_hash'", P);
        char* end = nullptr;
        c.tokenizer_hash = strtoull(it->second.c_str(), &end, 16);
        if (it->second.size() != 16 || *end)
            fail("%s: draft config key 'tokenizer_hash': expected 16 hex digits, found '%s'", P, it->second.c_str());
    }
    c.validate(P);

    // tensor table
    size_t off = 32 + cfg_len, data_start = size;
    bool seen[DT_COUNT + 1] = {};
    for (uint32_t k = 0; k < n_tensors; k++) {
        if (off + 4 > size - 4) fail("%s: tensor table entry %u at byte %zu runs past the end", P, k, off);
        uint32_t nl = u32(off);
        if (nl == 0 || nl > 64 || off + 4 + nl + 4 + 32 > size - 4)
            fail("%s: tensor table entry %u at byte %zu: bad name length %u", P, k, off, nl);
        std::string name((const char*)p + off + 4, nl);
        off += 4 + nl;
        int idx = -1;
        for (int i = 0; i < DT_COUNT; i++)
            if (name == kTensorNames[i]) idx = i;
        if (name == "d2t" && c.draft_vocab > 0) idx = DT_COUNT;
        if (idx < 0) fail("%s: unknown tensor '%s' in the draft file (byte %zu)", P, name.c_str(), off);
        if (seen[idx]) fail("%s: tensor '%s' appears twice", P, name.c_str());
        seen[idx] = true;
        uint32_t ndim = u32(off);
        uint64_t d0 = u64(off + 4), d1 = u64(off + 12), toff = u64(off + 20), nbytes = u64(off + 28);
        off += 36;
        if (idx == DT_COUNT) {  // the reduced vocabulary's token map (int32)
            if (ndim != 1 || d0 != (uint64_t)c.draft_vocab || nbytes != d0 * 4)
                fail("%s: tensor 'd2t' has ndim %u, shape [%llu], %llu bytes; the config implies [%d] int32", P, ndim,
                     (unsigned long long)d0, (unsigned long long)nbytes, c.draft_vocab);
            if (toff % 4 || toff > size - 4 || nbytes > size - 4 - toff)
                fail("%s: tensor 'd2t' data [%llu, +%llu) lies outside the file's data area (file %zu bytes)", P,
                     (unsigned long long)toff, (unsigned long long)nbytes, size);
            data_start = std::min(data_start, (size_t)toff);
            w.d2t.resize((size_t)c.draft_vocab);
            memcpy(w.d2t.data(), p + toff, nbytes);
            check_d2t(c, w.d2t, P);
            continue;
        }
        bool vec = idx == DT_NORM_Q || idx == DT_NORM_KV || idx == DT_NORM_M;
        uint64_t rows = vec ? 1 : d0, cols = vec ? d0 : d1;
        if (ndim != (vec ? 1u : 2u) || (int64_t)rows != c.rows(idx) || (int64_t)cols != c.cols(idx))
            fail("%s: tensor '%s' has shape %s[%llu, %llu], the config implies [%lld, %lld]", P, name.c_str(),
                 vec ? "(vector) " : "", (unsigned long long)rows, (unsigned long long)cols, (long long)c.rows(idx),
                 (long long)c.cols(idx));
        if (nbytes != (uint64_t)c.numel(idx) * 4)
            fail("%s: tensor '%s' has %llu bytes, expected %lld (f32)", P, name.c_str(), (unsigned long long)nbytes,
                 (long long)c.numel(idx) * 4);
        if (toff % 4 || toff > size - 4 || nbytes > size - 4 - toff)
            fail("%s: tensor '%s' data [%llu, +%llu) lies outside the file's data area (file %zu bytes)", P,
                 name.c_str(), (unsigned long long)toff, (unsigned long long)nbytes, size);
        data_start = std::min(data_start, (size_t)toff);
        w.t[idx].resize((size_t)c.numel(idx));
        memcpy(w.t[idx].data(), p + toff, nbytes);
        for (size_t i = 0; i < w.t[idx].size(); i++)
            if (!std::isfinite(w.t[idx][i]))
                fail("%s: tensor '%s' element %zu is not finite (%g)", P, name.c_str(), i, w.t[idx][i]);
    }
    if (data_start < off) fail("%s: tensor data at byte %zu overlaps the tensor table (ends at %zu)", P, data_start, off);
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
};

Draft::Draft(const DraftWeights& w, const DraftFrozen& fz, Ops& ops, int ctx, int max_pred, int max_queries)
    : ops_(ops), m_(new DraftModelT<Ops>(ops, w, fz)), ctx_(ctx), max_pred_(max_pred), max_q_(max_queries) {
    BEAGLE_CHECK(ctx >= 1 && max_pred >= 1 && max_queries >= 1, "Draft: ctx %d, max_pred %d, max_queries %d must be >= 1",
                 ctx, max_pred, max_queries);
    const DraftConfig& c = m_->cfg;
    a_.reset(new Acts(ops));
    BufAlloc<Ops>& al = a_->al;
    kt_ = al.alloc((size_t)ctx * c.kv_dim());
    vt_ = al.alloc((size_t)ctx * c.kv_dim());
    kp_ = al.alloc((size_t)max_pred * c.kv_dim());
    vp_ = al.alloc((size_t)max_pred * c.kv_dim());
    stage_t_ = al.alloc((size_t)ctx * c.dim);
    stage_p_ = al.alloc((size_t)max_pred * c.dim);
    query_acts_alloc(al, c, &a_->A, max_queries);
    a_->xn = al.alloc((size_t)max_queries * c.dim);
    a_->rstd = al.alloc(max_queries);
    a_->logits = al.alloc((size_t)max_queries * c.head_rows());
}

Draft::~Draft() = default;  // BufAlloc releases every buffer

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
    if (c.draft_vocab > 0) {  // the rows of the reduced vocabulary, in their stored dtype
        BEAGLE_CHECK(lm_head.host && lm_head.host->data, "draft: reduced vocabulary needs the target's LM head on the host");
        const Tensor& H = *lm_head.host;
        size_t rb = H.row_bytes();
        head_rows_.resize(rb * c.draft_vocab);
        for (int i = 0; i < c.draft_vocab; i++) memcpy(head_rows_.data() + rb * i, H.row(m_->d2t[i]), rb);
        head_sub_.reset(new Tensor());
        head_sub_->name = H.name + "[d2t]";
        head_sub_->dtype = H.dtype;
        head_sub_->ndim = 2;
        head_sub_->shape[0] = c.draft_vocab;
        head_sub_->shape[1] = c.dim;
        head_sub_->data = head_rows_.data();
        head_sub_->nbytes = head_rows_.size();
        m_->head_w = ops_.matmul_weight(*head_sub_);
    }
}

void Draft::use_q8_weights(const DraftWeights& w) {
    const DraftConfig& c = m_->cfg;
    BEAGLE_CHECK(w.cfg.dim == c.dim && w.cfg.ffn_dim == c.ffn_dim && w.cfg.n_heads == c.n_heads &&
                     w.cfg.n_kv_heads == c.n_kv_heads && w.cfg.head_dim == c.head_dim,
                 "use_q8_weights: weights of another draft shape");
    for (int t : {DT_WQ, DT_WK, DT_WV, DT_WO, DT_W_GATE, DT_W_UP, DT_W_DOWN}) {
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
    clear_pred();
}

void Draft::add_true_states(const float* states, int n, bool on_backend) {
    if (n <= 0) return;
    const DraftConfig& c = m_->cfg;
    BEAGLE_CHECK(n_true() + n <= ctx_, "draft: %d true states would exceed its context of %d", n_true() + n, ctx_);
    float* dst = stage_t_ + (size_t)n_true_pending_ * c.dim;
    if (on_backend) ops_.copy(dst, states, (size_t)n * c.dim);
    else ops_.upload(dst, states, (size_t)n * c.dim);
    n_true_pending_ += n;
}

void Draft::clear_pred() {
    n_pred_cached_ = n_pred_pending_ = 0;
    pred_pos_.clear();
}

int Draft::keep_pred(const int* rows, int n) {
    const DraftConfig& c = m_->cfg;
    int first = n_pred();
    BEAGLE_CHECK(first + n <= max_pred_, "draft: %d predicted states would exceed max_pred %d", first + n, max_pred_);
    for (int i = 0; i < n; i++) {
        BEAGLE_CHECK(rows[i] >= 0 && rows[i] < (int)last_pos_.size(), "draft: keep_pred row %d outside the last forward's %zu",
                     rows[i], last_pos_.size());
        ops_.copy(stage_p_ + (size_t)(n_pred_pending_ + i) * c.dim, a_->A.fh + (size_t)rows[i] * c.dim, c.dim);
        pred_pos_.push_back(last_pos_[rows[i]]);
    }
    n_pred_pending_ += n;
    return first;
}

// Lazy appending: K/V of states added since the last forward are computed now, once.
void Draft::ensure_kv() {
    const DraftConfig& c = m_->cfg;
    BufAlloc<Ops>& al = a_->al;
    int kvd = c.kv_dim();
    for (int set = 0; set < 2; set++) {
        int n = set == 0 ? n_true_pending_ : n_pred_pending_;
        if (n == 0) continue;
        int r0 = set == 0 ? n_true_cached_ : n_pred_cached_;
        std::vector<int> pos(n);
        for (int i = 0; i < n; i++) pos[i] = set == 0 ? r0 + i : pred_pos_[r0 + i];
        float* ns = al.alloc((size_t)n * c.dim);
        float* rstd = al.alloc(n);
        float* K = (set == 0 ? kt_ : kp_) + (size_t)r0 * kvd;
        float* V = (set == 0 ? vt_ : vp_) + (size_t)r0 * kvd;
        key_forward(*m_, set == 0 ? stage_t_ : stage_p_, ns, rstd, K, V, n, pos.data());
        al.release(ns);
        al.release(rstd);
        if (set == 0) {
            n_true_cached_ += n;
            n_true_pending_ = 0;
        } else {
            n_pred_cached_ += n;
            n_pred_pending_ = 0;
        }
    }
}

void Draft::forward(const int* tokens, const int* pos, int n, const uint64_t* pred_mask, int mask_words,
                    float* states_out, float* logits_out) {
    const DraftConfig& c = m_->cfg;
    BEAGLE_CHECK(n >= 1 && n <= max_q_, "draft forward: %d queries, allowed 1..%d", n, max_q_);
    ensure_kv();
    BEAGLE_CHECK(n_true_cached_ >= 1, "draft forward: no true states yet (add_true_states first)");
    XAttnKeys keys;
    keys.k0 = kt_;
    keys.v0 = vt_;
    keys.n0 = n_true_cached_;
    keys.k1 = kp_;
    keys.v1 = vp_;
    keys.n1 = n_pred_cached_;
    XAttnMask mask;
    mask.kind = XAttnMask::PREFIX;
    if (concat_ && pred_mask && n_pred_cached_ > 0) {
        BEAGLE_CHECK(mask_words * 64 >= n_pred_cached_, "draft forward: mask of %d words for %d predicted rows", mask_words,
                     n_pred_cached_);
        mask.set1_bits = pred_mask;
        mask.set1_words = mask_words;
    }
    last_pos_.assign(pos, pos + n);
    QueryActs<float>& A = a_->A;
    query_forward(*m_, A, n, tokens, pos, nullptr, keys, mask);
    head_logits(*m_, A.fh, n, a_->xn, a_->rstd, a_->logits);
    if (states_out) ops_.download(states_out, A.fh, (size_t)n * c.dim);
    if (logits_out) ops_.download(logits_out, a_->logits, (size_t)n * c.head_rows());
}

const float* Draft::states_backend() const { return a_->A.fh; }
const float* Draft::logits_backend() const { return a_->logits; }

}  // namespace beagle
