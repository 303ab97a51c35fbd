// container.h: the one binary container behind Beagle's own files: the draft file (model/draft.cpp),
// the training checkpoint (train/checkpoint.cpp) and the data shards (data/dataset.cpp). A container
// is, little-endian:
//   0 magic (8 bytes)  8 u32 version  ... the format's fixed header fields (u64 file size at
//   size_at; u32 length of the text header at text_len_at) ...  then at header_bytes: the text header
//   ("key value\n" lines, if the format has one), tables and blobs (tensors), and last a u32 CRC-32
//   (zlib) of every byte before it.
// Each format names its fixed-header offsets in a ContainerFormat, so every format keeps its own byte
// layout: its files are read and written byte for byte the same through the container. Writes are atomic (temp file, fsync, rename);
// reads validate magic, version, size and CRC up front and check every later access against the file,
// with errors that say what was expected, what was found and where (path, byte offset, field).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../core/common.h"

namespace beagle {

struct ContainerFormat {
    char magic[8];
    const char* name;        // in messages: "not a <name>", e.g. "Beagle draft file"
    const char* noun;        // in messages: "<noun> path '...' is not a regular file", e.g. "draft"
    uint32_t version;        // the one version this build reads and writes (u32 at byte 8)
    size_t header_bytes;     // fixed header size: the text header / first table starts here
    size_t size_at;          // u64 total file size (CRC included)
    size_t text_len_at;      // u32 byte length of the text header; 0 = the format has none
};

// "key value" lines: a container's text header (and beagle datagen's meta.txt).
struct KeyValues {
    std::string where;  // messages start with it, e.g. "weights/d.bin: draft config"
    std::vector<std::pair<std::string, std::string>> items;

    // Lines "key value" (key: one word, value: the rest of the line); blank lines skipped, the last
    // newline optional; a line without a space or a repeated key is an error naming line and byte.
    static KeyValues parse(const std::string& text, const std::string& where, size_t byte0 = 0);
    std::string text() const;  // the lines back; throws unless every key is one word and value one line

    const std::string* find(const std::string& key) const;  // nullptr if absent
    std::string get(const std::string& key) const;           // "" if absent
    const std::string& need(const std::string& key) const;   // throws "WHERE lacks key 'K'"
    // Typed values; each throws "WHERE key 'K': expected ..., found 'V'".
    int64_t integer(const std::string& key, int64_t lo, int64_t hi) const;
    double real(const std::string& key) const;   // finite
    uint64_t hex64(const std::string& key) const;  // exactly 16 hex digits
};

// A named blob in a table: u32 name_len, name, u32 ndim, u64 shape[2] (unused dims 0), u64 offset,
// u64 nbytes. The draft file's tensor table.
struct ContainerBlob {
    std::string name;
    uint32_t ndim = 1;
    uint64_t shape[2] = {0, 0};
    const void* data = nullptr;  // writing: the bytes; reading: where they are in the mapped file
    uint64_t nbytes = 0;
    uint64_t offset = 0;         // reading: byte offset in the file
};

class ContainerWriter {
public:
    explicit ContainerWriter(const ContainerFormat& f);  // magic, version, zeroed fixed header
    void set_u32(size_t at, uint32_t v);  // a fixed-header field
    void set_u64(size_t at, uint64_t v);
    void put(const void* p, size_t n);    // append
    void put_u32(uint32_t v) { put(&v, 4); }
    void put_u64(uint64_t v) { put(&v, 8); }
    void align(size_t a);                 // zero-pad to a multiple of a
    void put_text(const KeyValues& kv);   // the text header and its length field (text_len_at)
    // The table, padding to `alignment`, then each blob's bytes, each padded to `alignment`.
    void put_table(const std::vector<ContainerBlob>& blobs, size_t alignment);
    void reserve(size_t n) { b_.reserve(n); }
    // Sets the file size field, appends the CRC and writes path atomically (temp + fsync + rename).
    void write(const std::string& path);

private:
    const ContainerFormat& f_;
    std::vector<uint8_t> b_;
};

class ContainerReader {
public:
    // Maps path and checks, in this order: a regular file, the magic, the fixed header's length, the
    // version, the size field against the file's size, the CRC. Throws Error naming path and field.
    ContainerReader(const std::string& path, const ContainerFormat& f);
    const std::string& path() const { return mf_.path; }
    size_t data_end() const { return mf_.size - 4; }  // the CRC's offset: every field lies before it

    // Bounds-checked reads of [off, off + n) before the CRC; `what` names the field in errors.
    uint32_t u32(size_t off, const char* what) const;
    uint64_t u64(size_t off, const char* what) const;
    const uint8_t* bytes(uint64_t off, uint64_t n, const char* what) const;
    KeyValues text(const std::string& where) const;  // the text header (format with text_len_at)
    size_t text_end() const;                         // first byte after the text header
    // n table entries at off; checks names (1..64 bytes, no repeats) and that each blob lies after
    // the table and before the CRC, 4-byte aligned. *end: first byte after the table.
    std::vector<ContainerBlob> table(size_t off, uint32_t n, size_t* end) const;

private:
    const ContainerFormat& f_;
    MappedFile mf_;
};

}  // namespace beagle
