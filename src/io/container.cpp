// container.cpp: the binary container of container.h (magic, version, fixed header, text header,
// tables, blobs, CRC-32): atomic writes, validated reads with errors that name path, offset and field.
#include "container.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>

#include "../core/crc32.h"

namespace beagle {

// ---- key/value text ---------------------------------------------------------------------------------

KeyValues KeyValues::parse(const std::string& text, const std::string& where, size_t byte0) {
    KeyValues kv;
    kv.where = where;
    size_t b = 0;
    for (int line = 1; b < text.size(); line++) {
        size_t e = text.find('\n', b);
        if (e == std::string::npos) e = text.size();
        std::string l = text.substr(b, e - b);
        size_t at = byte0 + b;
        b = e + 1;
        if (l.empty()) continue;
        size_t sp = l.find(' ');
        if (sp == std::string::npos || sp == 0)
            fail("%s: line %d (byte %zu): expected 'key value', found '%s'", where.c_str(), line, at, l.c_str());
        std::string key = l.substr(0, sp);
        if (kv.find(key)) fail("%s: line %d (byte %zu): key '%s' appears twice", where.c_str(), line, at, key.c_str());
        kv.items.emplace_back(key, l.substr(sp + 1));
    }
    return kv;
}

std::string KeyValues::text() const {
    std::string s;
    for (auto& p : items) {
        BEAGLE_CHECK(!p.first.empty() && p.first.find_first_of(" \n") == std::string::npos &&
                         p.second.find('\n') == std::string::npos,
                     "%s: key '%s' must be one word and its value one line", where.c_str(), p.first.c_str());
        s += p.first + " " + p.second + "\n";
    }
    return s;
}

const std::string* KeyValues::find(const std::string& key) const {
    for (auto& p : items)
        if (p.first == key) return &p.second;
    return nullptr;
}

std::string KeyValues::get(const std::string& key) const {
    const std::string* v = find(key);
    return v ? *v : "";
}

const std::string& KeyValues::need(const std::string& key) const {
    const std::string* v = find(key);
    if (!v) fail("%s lacks key '%s'", where.c_str(), key.c_str());
    return *v;
}

int64_t KeyValues::integer(const std::string& key, int64_t lo, int64_t hi) const {
    const std::string& v = need(key);
    char* end = nullptr;
    errno = 0;
    long long x = strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || errno || x < lo || x > hi)
        fail("%s key '%s': expected an integer in [%lld, %lld], found '%s'", where.c_str(), key.c_str(), (long long)lo,
             (long long)hi, v.c_str());
    return x;
}

double KeyValues::real(const std::string& key) const {
    const std::string& v = need(key);
    char* end = nullptr;
    double x = strtod(v.c_str(), &end);
    if (v.empty() || *end || !std::isfinite(x))
        fail("%s key '%s': expected a finite number, found '%s'", where.c_str(), key.c_str(), v.c_str());
    return x;
}

uint64_t KeyValues::hex64(const std::string& key) const {
    const std::string& v = need(key);
    char* end = nullptr;
    uint64_t x = strtoull(v.c_str(), &end, 16);
    if (v.size() != 16 || *end || v.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        fail("%s key '%s': expected 16 hex digits, found '%s'", where.c_str(), key.c_str(), v.c_str());
    return x;
}

// ---- writing ----------------------------------------------------------------------------------------

ContainerWriter::ContainerWriter(const ContainerFormat& f) : f_(f) {
    b_.assign(f.header_bytes, 0);
    memcpy(b_.data(), f.magic, 8);
    set_u32(8, f.version);
}

void ContainerWriter::set_u32(size_t at, uint32_t v) {
    BEAGLE_CHECK(at + 4 <= f_.header_bytes, "%s: header field at byte %zu outside the fixed header", f_.name, at);
    memcpy(b_.data() + at, &v, 4);
}

void ContainerWriter::set_u64(size_t at, uint64_t v) {
    BEAGLE_CHECK(at + 8 <= f_.header_bytes, "%s: header field at byte %zu outside the fixed header", f_.name, at);
    memcpy(b_.data() + at, &v, 8);
}

void ContainerWriter::put(const void* p, size_t n) {
    if (n) b_.insert(b_.end(), (const uint8_t*)p, (const uint8_t*)p + n);
}

void ContainerWriter::align(size_t a) { b_.resize((b_.size() + a - 1) / a * a, 0); }

void ContainerWriter::put_text(const KeyValues& kv) {
    BEAGLE_CHECK(f_.text_len_at > 0 && b_.size() == f_.header_bytes, "%s: the text header follows the fixed header",
                 f_.name);
    std::string t = kv.text();
    set_u32(f_.text_len_at, (uint32_t)t.size());
    put(t.data(), t.size());
}

void ContainerWriter::put_table(const std::vector<ContainerBlob>& blobs, size_t alignment) {
    size_t table = 0;
    for (const ContainerBlob& e : blobs) table += 4 + e.name.size() + 4 + 2 * 8 + 8 + 8;
    uint64_t off = (b_.size() + table + alignment - 1) / alignment * alignment;
    for (const ContainerBlob& e : blobs) {
        put_u32((uint32_t)e.name.size());
        put(e.name.data(), e.name.size());
        put_u32(e.ndim);
        put_u64(e.shape[0]);
        put_u64(e.shape[1]);
        put_u64(off);
        put_u64(e.nbytes);
        off = (off + e.nbytes + alignment - 1) / alignment * alignment;
    }
    for (const ContainerBlob& e : blobs) {
        align(alignment);
        put(e.data, e.nbytes);
    }
    align(alignment);
}

void ContainerWriter::write(const std::string& path) {
    set_u64(f_.size_at, (uint64_t)b_.size() + 4);
    uint32_t crc = crc32_update(0, b_.data(), b_.size());
    put_u32(crc);
    write_file_atomic(path, b_.data(), b_.size());
    b_.resize(b_.size() - 4);
}

// ---- reading ----------------------------------------------------------------------------------------

// The first 8 bytes for a message: printable ASCII as is, anything else as '?'.
static std::string magic_found(const uint8_t* p) {
    std::string s = "\"";
    for (int i = 0; i < 8; i++) s += p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
    return s + "\"";
}

static MappedFile map_regular(const std::string& path, const ContainerFormat& f) {
    struct stat st;  // a FIFO or device would block or stream forever: containers are regular files
    if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) fail("%s path '%s' is not a regular file", f.noun, path.c_str());
    return MappedFile(path);
}

ContainerReader::ContainerReader(const std::string& path, const ContainerFormat& f) : f_(f), mf_(map_regular(path, f)) {
    const char* P = path.c_str();
    const size_t n = mf_.size;
    if (n < 8 || memcmp(mf_.data, f.magic, 8) != 0)
        fail("%s: not a %s (expected magic \"%.8s\" at byte 0, found %s)", P, f.name, f.magic,
             n < 8 ? strfmt("a file of %zu bytes", n).c_str() : magic_found(mf_.data).c_str());
    if (n < f.header_bytes + 4)
        fail("%s: truncated %s: %zu bytes, the header and checksum alone need %zu", P, f.name, n, f.header_bytes + 4);
    uint32_t version;
    uint64_t want;
    memcpy(&version, mf_.data + 8, 4);
    memcpy(&want, mf_.data + f.size_at, 8);
    if (version != f.version) fail("%s: %s version %u, this build reads version %u", P, f.name, version, f.version);
    if (want != n)
        fail("%s: %s is %zu bytes but its header (byte %zu) says %llu (%s)", P, f.name, n, f.size_at,
             (unsigned long long)want, n < want ? "truncated" : "trailing bytes");
    uint32_t stored, computed = crc32_update(0, mf_.data, n - 4);
    memcpy(&stored, mf_.data + n - 4, 4);
    if (stored != computed)
        fail("%s: checksum mismatch (stored CRC-32 %08x at byte %zu, computed %08x): the file is corrupt", P, stored, n - 4,
             computed);
}

const uint8_t* ContainerReader::bytes(uint64_t off, uint64_t n, const char* what) const {
    if (off > data_end() || n > data_end() - off)
        fail("%s: %s [%llu, +%llu) lies outside the file's data area (%zu bytes before the checksum)", path().c_str(), what,
             (unsigned long long)off, (unsigned long long)n, data_end());
    return mf_.data + off;
}

uint32_t ContainerReader::u32(size_t off, const char* what) const {
    uint32_t v;
    memcpy(&v, bytes(off, 4, what), 4);
    return v;
}

uint64_t ContainerReader::u64(size_t off, const char* what) const {
    uint64_t v;
    memcpy(&v, bytes(off, 8, what), 8);
    return v;
}

KeyValues ContainerReader::text(const std::string& where) const {
    uint32_t len = u32(f_.text_len_at, "text header length");
    const char* t = (const char*)bytes(f_.header_bytes, len, "text header");
    return KeyValues::parse(std::string(t, len), where, f_.header_bytes);
}

size_t ContainerReader::text_end() const { return f_.header_bytes + u32(f_.text_len_at, "text header length"); }

std::vector<ContainerBlob> ContainerReader::table(size_t off, uint32_t n, size_t* end) const {
    const char* P = path().c_str();
    std::vector<ContainerBlob> t;
    uint64_t data_start = data_end();
    for (uint32_t k = 0; k < n; k++) {
        uint32_t nl = u32(off, "table entry");
        if (nl == 0 || nl > 64) fail("%s: table entry %u at byte %zu: name length %u, expected 1..64", P, k, off, nl);
        ContainerBlob e;
        e.name.assign((const char*)bytes(off + 4, (uint64_t)nl + 4 + 32, "table entry"), nl);
        off += 4 + nl;
        for (const ContainerBlob& o : t)
            if (o.name == e.name) fail("%s: tensor '%s' appears twice in the table (entry %u)", P, e.name.c_str(), k);
        e.ndim = u32(off, "table entry");
        e.shape[0] = u64(off + 4, "table entry");
        e.shape[1] = u64(off + 12, "table entry");
        e.offset = u64(off + 20, "table entry");
        e.nbytes = u64(off + 28, "table entry");
        off += 36;
        std::string what = "tensor '" + e.name + "' data";
        e.data = bytes(e.offset, e.nbytes, what.c_str());
        if (e.offset % 4) fail("%s: %s at byte %llu, expected a multiple of 4", P, what.c_str(), (unsigned long long)e.offset);
        data_start = std::min(data_start, e.offset);
        t.push_back(e);
    }
    if (data_start < off) fail("%s: tensor data at byte %llu overlaps the table (ends at %zu)", P, (unsigned long long)data_start, off);
    *end = off;
    return t;
}

}  // namespace beagle
