// dataset.cpp: the training data on disk (dataset.h): shards written atomically by `beagle datagen`,
// memory-mapped and validated for `beagle train`.
#include "dataset.h"

#include "../model/draft.h"  // kMaxStateLayers

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>

namespace beagle {

// Fixed header: 12 u32 dim, 16 u32 vocab, 20 u32 n_seqs, 24 u64 n_tokens, 32 u64 tokenizer_hash,
// 40 u64 file_size (see dataset.h); no text header.
static const ContainerFormat kShard = {{'B', 'E', 'A', 'G', 'L', 'E', 'D', 'S'}, "Beagle data shard", "data shard", 1, 48, 40, 0};
// The same with state layers: 48 u32 E, 52 u32 layers[8]; the sequence table at 96.
static const ContainerFormat kShardX = {{'B', 'E', 'A', 'G', 'L', 'E', 'D', 'X'}, "Beagle data shard with state layers", "data shard", 1, 96, 40, 0};
// Tokens only: the fixed header and sequence table of kShard, then the tokens.
static const ContainerFormat kShardT = {{'B', 'E', 'A', 'G', 'L', 'E', 'T', 'K'}, "Beagle token shard", "data shard", 1, 48, 40, 0};
static size_t align64(size_t x) { return (x + 63) / 64 * 64; }

// The fixed header and the sequence table, common to every shard kind.
static void put_header(ContainerWriter& f, int dim, int vocab, uint64_t tokenizer_hash, const std::vector<SeqData>& seqs,
                       uint64_t n_tokens) {
    f.set_u32(12, (uint32_t)dim);
    f.set_u32(16, (uint32_t)vocab);
    f.set_u32(20, (uint32_t)seqs.size());
    f.set_u64(24, n_tokens);
    f.set_u64(32, tokenizer_hash);
}

static void put_table_and_tokens(ContainerWriter& f, const std::vector<SeqData>& seqs) {
    uint64_t first = 0;
    for (const SeqData& s : seqs) {
        f.put_u64(first);
        f.put_u32((uint32_t)s.tokens.size());
        f.put_u32((uint32_t)s.n_prompt);
        first += s.tokens.size();
    }
    f.align(64);
    for (const SeqData& s : seqs) f.put(s.tokens.data(), s.tokens.size() * 4);
}

void write_shard(const std::string& path, int dim, int vocab, uint64_t tokenizer_hash, const std::vector<SeqData>& seqs,
                 const std::vector<int>& state_layers) {
    const size_t E = state_layers.size();
    BEAGLE_CHECK(E <= (size_t)kMaxStateLayers, "write_shard: %zu state layers, at most %d", E, kMaxStateLayers);
    uint64_t n_tokens = 0;
    for (const SeqData& s : seqs) {
        BEAGLE_CHECK(s.states.size() == s.tokens.size() * (size_t)dim, "write_shard: sequence states do not match tokens");
        BEAGLE_CHECK(s.extras.size() == s.tokens.size() * E * dim, "write_shard: sequence extras do not match tokens");
        n_tokens += s.tokens.size();
    }
    ContainerWriter f(E ? kShardX : kShard);
    f.reserve(96 + seqs.size() * 16 + 192 + n_tokens * (4 + (size_t)dim * 2 * (1 + E)) + 4);
    put_header(f, dim, vocab, tokenizer_hash, seqs, n_tokens);
    if (E) {
        f.set_u32(48, (uint32_t)E);
        for (size_t k = 0; k < E; k++) f.set_u32(52 + 4 * k, (uint32_t)state_layers[k]);
    }
    put_table_and_tokens(f, seqs);
    f.align(64);
    for (const SeqData& s : seqs) f.put(s.states.data(), s.states.size() * 2);
    if (E) {
        f.align(64);
        for (const SeqData& s : seqs) f.put(s.extras.data(), s.extras.size() * 2);
    }
    f.write(path);
}

void write_token_shard(const std::string& path, int dim, int vocab, uint64_t tokenizer_hash, const std::vector<SeqData>& seqs) {
    uint64_t n_tokens = 0;
    for (const SeqData& s : seqs) n_tokens += s.tokens.size();
    ContainerWriter f(kShardT);
    f.reserve(48 + seqs.size() * 16 + 128 + n_tokens * 4 + 4);
    put_header(f, dim, vocab, tokenizer_hash, seqs, n_tokens);
    put_table_and_tokens(f, seqs);
    f.write(path);
}

std::vector<std::pair<std::string, std::string>> read_meta(const std::string& path) {
    return KeyValues::parse(read_file(path), path).items;
}

void write_meta(const std::string& path, const std::vector<std::pair<std::string, std::string>>& kv) {
    std::string s = KeyValues{path, kv}.text();
    write_file_atomic(path, s.data(), s.size());
}

Dataset::Dataset(const std::string& dir) : dir_(dir) {
    if (!is_directory(dir)) fail("data directory '%s' does not exist (make one with beagle datagen)", dir.c_str());
    if (file_exists(dir + "/meta.txt")) meta_ = read_meta(dir + "/meta.txt");
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d) fail("cannot list '%s'", dir.c_str());
    while (struct dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n.rfind("shard-", 0) == 0 && n.size() > 10 && n.substr(n.size() - 4) == ".bin") names.push_back(n);
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    if (names.empty()) fail("data directory '%s' holds no shard-*.bin files", dir.c_str());
    check_complete(names);
    for (const std::string& n : names) {
        shard_names_.push_back(n);
        shard_first_.push_back(seqs_.size());
        const std::string magic = read_file_prefix(dir + "/" + n, 8);
        const bool x = magic == std::string("BEAGLEDX", 8);   // with state layers
        const bool tk = magic == std::string("BEAGLETK", 8);  // tokens only
        files_.emplace_back(new ContainerReader(dir + "/" + n, x ? kShardX : tk ? kShardT : kShard));
        const ContainerReader& f = *files_.back();
        const char* P = f.path().c_str();
        if (files_.size() == 1) has_states_ = !tk;
        else if (has_states_ == tk)
            fail("%s: %s, the first shard %s: shards of one directory are all tokens-only or all keep states", P,
                 tk ? "tokens only" : "keeps the target's states", tk ? "keeps them" : "tokens only");
        const size_t H = x ? 96 : 48;  // the sequence table
        std::vector<int> layers;
        if (x) {
            uint32_t E = f.u32(48, "state layer count");
            if (E < 1 || E > (uint32_t)kMaxStateLayers) fail("%s: %u state layers, expected 1..%d", P, E, kMaxStateLayers);
            for (uint32_t k = 0; k < E; k++) {
                uint32_t l = f.u32(52 + 4 * k, "state layers");
                if (l > 100000 || (k > 0 && (int)l <= layers.back()))
                    fail("%s: state layer %u at %u, expected increasing layer numbers", P, l, k);
                layers.push_back((int)l);
            }
        }
        uint32_t dim = f.u32(12, "dim"), vocab = f.u32(16, "vocab"), ns = f.u32(20, "n_seqs");
        uint64_t nt = f.u64(24, "n_tokens"), th = f.u64(32, "tokenizer_hash");
        if (dim == 0 || dim > 65536 || vocab == 0)
            fail("%s: header has dim %u and vocab %u, expected dim in 1..65536 and vocab >= 1", P, dim, vocab);
        size_t tok_off = align64(H + (size_t)ns * 16);
        size_t st_off = align64(checked_add(tok_off, checked_mul(nt, 4, "shard tokens"), "shard tokens"));
        uint64_t need = checked_add(st_off, checked_mul(checked_mul(nt, dim, "shard states"), 2, "shard states"), "shard size");
        if (tk) need = tok_off + nt * 4;  // (no overflow: st_off above was checked)
        const uint64_t xw = (uint64_t)layers.size() * dim, x_off = align64(need);  // extras: after the states
        if (x) need = checked_add(x_off, checked_mul(checked_mul(nt, xw, "shard extras"), 2, "shard extras"), "shard size");
        if (need != f.data_end())
            fail("%s: size %zu does not match its header (%llu tokens of dim %u need %llu bytes)", P, f.data_end() + 4,
                 (unsigned long long)nt, dim, (unsigned long long)(need + 4));
        if (files_.size() == 1) {
            dim_ = (int)dim;
            vocab_ = (int)vocab;
            tok_hash_ = th;
            state_layers_ = layers;
        } else if ((int)dim != dim_ || (int)vocab != vocab_ || th != tok_hash_) {
            fail("%s: made by another model than the other shards (dim %u vocab %u vs dim %d vocab %d)", P, dim, vocab,
                 dim_, vocab_);
        } else if (layers != state_layers_) {
            fail("%s: keeps %zu state layers, the first shard %zu (or other layers): shards of one directory keep the "
                 "same", P, layers.size(), state_layers_.size());
        }
        const uint16_t* extras = x ? (const uint16_t*)f.bytes(x_off, nt * xw * 2, "extras") : nullptr;
        const int32_t* tokens = (const int32_t*)f.bytes(tok_off, nt * 4, "tokens");
        const uint16_t* states = tk ? nullptr : (const uint16_t*)f.bytes(st_off, nt * dim * 2, "states");
        for (uint32_t i = 0; i < ns; i++) {
            uint64_t first = f.u64(H + i * 16, "sequence table");
            uint32_t len = f.u32(H + i * 16 + 8, "sequence table"), np = f.u32(H + i * 16 + 12, "sequence table");
            if (first > nt || len > nt - first || np > len)
                fail("%s: sequence %u out of bounds (first %llu, len %u, prompt %u, %llu tokens)", P, i,
                     (unsigned long long)first, len, np, (unsigned long long)nt);
            SeqView v;
            v.tokens = tokens + first;
            v.states = states ? states + first * dim : nullptr;
            v.extras = extras ? extras + first * xw : nullptr;
            v.len = (int)len;
            v.n_prompt = (int)np;
            for (uint32_t k = 0; k < len; k++)
                if (v.tokens[k] < 0 || v.tokens[k] >= (int)vocab)
                    fail("%s: sequence %u token %u = %d outside the vocabulary [0, %u)", P, i, k, v.tokens[k], vocab);
            seqs_.push_back(v);
        }
        n_tokens_ += (int64_t)nt;
    }
}

// A directory that beagle datagen was stopped in (kill, full disk) holds only some of its shards, each
// complete (written atomically); training on it would silently use part of the data. meta.txt says how
// many shards the finished run has: ceil(items / shard_seqs), named shard-00000.bin on.
void Dataset::check_complete(const std::vector<std::string>& names) const {
    std::string items = meta("items"), per = meta("shard_seqs");
    if (items.empty() || per.empty()) return;  // no datagen meta.txt (hand-made data): nothing to compare with
    auto count = [&](const std::string& v, const char* key) {
        char* end = nullptr;
        long long x = strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end || x < 1 || x > INT32_MAX)
            fail("%s/meta.txt: %s must be an integer in 1..%d, got '%s'", dir_.c_str(), key, INT32_MAX, v.c_str());
        return x;
    };
    long long n = (count(items, "items") + count(per, "shard_seqs") - 1) / count(per, "shard_seqs");
    long long have = 0;
    std::string first_missing;
    for (long long i = 0; i < n; i++) {
        std::string name = strfmt("shard-%05lld.bin", i);
        if (std::binary_search(names.begin(), names.end(), name)) have++;
        else if (first_missing.empty()) first_missing = name;
    }
    if (have < n)
        fail("data directory '%s' is incomplete: %lld of its %lld shards (%s is missing); beagle datagen stopped "
             "before the end: run the same beagle datagen command again to finish it",
             dir_.c_str(), have, n, first_missing.c_str());
}

std::vector<size_t> Dataset::layer_columns(const std::vector<int>& layers) const {
    std::vector<size_t> cols;
    if (!has_states_) {  // tokens only: the trainer computes exactly these layers, in this order
        for (size_t j = 0; j < layers.size(); j++) cols.push_back(j);
        return cols;
    }
    for (int l : layers) {
        const size_t j = std::find(state_layers_.begin(), state_layers_.end(), l) - state_layers_.begin();
        if (j == state_layers_.size())
            fail("data '%s' does not keep layer %d (it keeps %s; datagen --state-layers)", dir_.c_str(), l,
                 state_layers_.empty() ? "none" : format_layer_list(state_layers_).c_str());
        cols.push_back(j);
    }
    return cols;
}

std::string Dataset::meta(const std::string& key) const {
    for (auto& p : meta_)
        if (p.first == key) return p.second;
    return "";
}

void Dataset::check_fits(int dim, int vocab, uint64_t tokenizer_hash, const std::string& model_path) const {
    if (dim != dim_ || vocab != vocab_ || (tokenizer_hash && tok_hash_ && tokenizer_hash != tok_hash_))
        fail("data in '%s' was made by another model (dim %d, vocab %d, tokenizer %016llx; model '%s' has dim %d, vocab "
             "%d, tokenizer %016llx)%s",
             dir_.c_str(), dim_, vocab_, (unsigned long long)tok_hash_, model_path.c_str(), dim, vocab,
             (unsigned long long)tokenizer_hash, meta("model").empty() ? "" : (" — it came from " + meta("model")).c_str());
}

int Dataset::longest_seq() const {
    int n = 1;
    for (const SeqView& v : seqs_) n = std::max(n, v.len);
    return n;
}

// Creates dir (or finds it) and writes meta there; a resumed run must use the same settings ("model", the
// path, may differ). Half-written shards of a killed run are removed.
void open_data_dir(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& meta) {
    mkdir(dir.c_str(), 0755);
    if (!is_directory(dir)) fail("cannot create directory '%s'", dir.c_str());
    remove_stale_temps(dir + "/");
    std::string meta_path = dir + "/meta.txt";
    if (!file_exists(meta_path)) return write_meta(meta_path, meta);
    auto old = read_meta(meta_path);
    for (auto& kv : meta)
        for (auto& ov : old)
            if (ov.first == kv.first && ov.second != kv.second && kv.first != "model")
                fail("'%s' holds data made with %s = %s, this run has %s (use another -o DIR)", dir.c_str(),
                     kv.first.c_str(), ov.second.c_str(), kv.second.c_str());
}

}  // namespace beagle
