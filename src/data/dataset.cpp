// dataset.cpp: see dataset.h.
#include "dataset.h"

#include <dirent.h>

#include <algorithm>
#include <cstring>

#include "../model/draft.h"  // crc32_update

namespace beagle {

static const char kMagic[8] = {'B', 'E', 'A', 'G', 'L', 'E', 'D', 'S'};
static size_t align64(size_t x) { return (x + 63) / 64 * 64; }

void write_shard(const std::string& path, int dim, int vocab, uint64_t tokenizer_hash, const std::vector<SeqData>& seqs) {
    uint64_t n_tokens = 0;
    for (const SeqData& s : seqs) {
        BEAGLE_CHECK(s.states.size() == s.tokens.size() * (size_t)dim, "write_shard: sequence states do not match tokens");
        n_tokens += s.tokens.size();
    }
    size_t table = 48 + seqs.size() * 16;
    size_t tok_off = align64(table);
    size_t st_off = align64(tok_off + n_tokens * 4);
    size_t size = st_off + n_tokens * dim * 2 + 4;
    std::vector<uint8_t> b(size, 0);
    memcpy(&b[0], kMagic, 8);
    uint32_t u32;
    uint64_t u64;
    u32 = 1; memcpy(&b[8], &u32, 4);
    u32 = (uint32_t)dim; memcpy(&b[12], &u32, 4);
    u32 = (uint32_t)vocab; memcpy(&b[16], &u32, 4);
    u32 = (uint32_t)seqs.size(); memcpy(&b[20], &u32, 4);
    memcpy(&b[24], &n_tokens, 8);
    memcpy(&b[32], &tokenizer_hash, 8);
    u64 = size; memcpy(&b[40], &u64, 8);
    uint64_t first = 0;
    for (size_t i = 0; i < seqs.size(); i++) {
        uint8_t* e = &b[48 + i * 16];
        uint32_t len = (uint32_t)seqs[i].tokens.size(), np = (uint32_t)seqs[i].n_prompt;
        memcpy(e, &first, 8);
        memcpy(e + 8, &len, 4);
        memcpy(e + 12, &np, 4);
        memcpy(&b[tok_off + first * 4], seqs[i].tokens.data(), len * 4);
        memcpy(&b[st_off + first * dim * 2], seqs[i].states.data(), (size_t)len * dim * 2);
        first += len;
    }
    uint32_t crc = crc32_update(0, b.data(), size - 4);
    memcpy(&b[size - 4], &crc, 4);
    write_file_atomic(path, b.data(), b.size());
}

std::vector<std::pair<std::string, std::string>> read_meta(const std::string& path) {
    std::string text = read_file(path);
    std::vector<std::pair<std::string, std::string>> kv;
    size_t b = 0;
    int line = 0;
    while (b < text.size()) {
        size_t e = text.find('\n', b);
        if (e == std::string::npos) e = text.size();
        std::string l = text.substr(b, e - b);
        line++;
        b = e + 1;
        if (l.empty()) continue;
        size_t sp = l.find(' ');
        if (sp == std::string::npos) fail("%s: line %d: expected 'key value', found '%s'", path.c_str(), line, l.c_str());
        kv.emplace_back(l.substr(0, sp), l.substr(sp + 1));
    }
    return kv;
}

void write_meta(const std::string& path, const std::vector<std::pair<std::string, std::string>>& kv) {
    std::string s;
    for (auto& p : kv) s += p.first + " " + p.second + "\n";
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
    for (const std::string& n : names) {
        std::string path = dir + "/" + n;
        maps_.emplace_back(new MappedFile(path));
        const MappedFile& m = *maps_.back();
        const uint8_t* p = m.data;
        if (m.size < 52 || memcmp(p, kMagic, 8) != 0)
            fail("%s: not a Beagle data shard (bad magic or shorter than the 52-byte header)", path.c_str());
        uint32_t ver, dim, vocab, ns;
        uint64_t nt, th, fsize;
        memcpy(&ver, p + 8, 4);
        memcpy(&dim, p + 12, 4);
        memcpy(&vocab, p + 16, 4);
        memcpy(&ns, p + 20, 4);
        memcpy(&nt, p + 24, 8);
        memcpy(&th, p + 32, 8);
        memcpy(&fsize, p + 40, 8);
        if (ver != 1) fail("%s: shard version %u, this build reads version 1", path.c_str(), ver);
        if (fsize != m.size) fail("%s: truncated or padded: header says %llu bytes, file has %zu", path.c_str(), (unsigned long long)fsize, m.size);
        if (dim == 0 || dim > 65536 || vocab == 0) fail("%s: bad dims (dim %u, vocab %u)", path.c_str(), dim, vocab);
        size_t table = 48 + (size_t)ns * 16;
        size_t tok_off = align64(table);
        size_t st_off = align64(checked_add(tok_off, checked_mul(nt, 4, "shard tokens"), "shard tokens"));
        uint64_t need = checked_add(st_off, checked_mul(checked_mul(nt, dim, "shard states"), 2, "shard states"), "shard size");
        if (checked_add(need, 4, "shard size") != m.size)
            fail("%s: size %zu does not match its header (%llu tokens of dim %u need %llu bytes)", path.c_str(), m.size,
                 (unsigned long long)nt, dim, (unsigned long long)(need + 4));
        uint32_t crc, want;
        memcpy(&want, p + m.size - 4, 4);
        crc = crc32_update(0, p, m.size - 4);
        if (crc != want) fail("%s: checksum mismatch (file corrupt): stored %08x, computed %08x", path.c_str(), want, crc);
        if (seqs_.empty() && maps_.size() == 1) {
            dim_ = (int)dim;
            vocab_ = (int)vocab;
            tok_hash_ = th;
        } else if ((int)dim != dim_ || (int)vocab != vocab_ || th != tok_hash_) {
            fail("%s: made by another model than the other shards (dim %u vocab %u vs dim %d vocab %d)", path.c_str(), dim,
                 vocab, dim_, vocab_);
        }
        for (uint32_t i = 0; i < ns; i++) {
            uint64_t first;
            uint32_t len, np;
            memcpy(&first, p + 48 + i * 16, 8);
            memcpy(&len, p + 48 + i * 16 + 8, 4);
            memcpy(&np, p + 48 + i * 16 + 12, 4);
            if (first > nt || len > nt - first || np > len)
                fail("%s: sequence %u out of bounds (first %llu, len %u, prompt %u, %llu tokens)", path.c_str(), i,
                     (unsigned long long)first, len, np, (unsigned long long)nt);
            SeqView v;
            v.tokens = (const int32_t*)(p + tok_off) + first;
            v.states = (const uint16_t*)(p + st_off) + first * dim;
            v.len = (int)len;
            v.n_prompt = (int)np;
            for (uint32_t k = 0; k < len; k++)
                if (v.tokens[k] < 0 || v.tokens[k] >= (int)vocab)
                    fail("%s: sequence %u token %u = %d outside the vocabulary [0, %u)", path.c_str(), i, k, v.tokens[k], vocab);
            seqs_.push_back(v);
        }
        n_tokens_ += (int64_t)nt;
    }
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

}  // namespace beagle
