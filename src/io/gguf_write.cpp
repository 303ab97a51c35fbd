// gguf_write.cpp: GgufWriter (gguf_write.h). Layout: "GGUF", u32 version 3, u64 tensor count, u64
// metadata count, the metadata entries, the tensor infos (name, u32 ndim, u64 dims innermost first, u32
// type, u64 offset into the data section), zero padding to the alignment (32 unless general.alignment
// says otherwise), then the tensors, each starting at a multiple of it from the data section's start.
#include "gguf_write.h"

#include <algorithm>
#include <cstring>

namespace beagle {

namespace {

enum : uint32_t { T_U32 = 4, T_I32 = 5, T_F32 = 6, T_BOOL = 7, T_STRING = 8, T_ARRAY = 9 };

template <class T>
void put(std::vector<uint8_t>& b, T v) {
    const uint8_t* p = (const uint8_t*)&v;
    b.insert(b.end(), p, p + sizeof v);
}

void put_str(std::vector<uint8_t>& b, const std::string& s) {
    put<uint64_t>(b, s.size());
    b.insert(b.end(), s.begin(), s.end());
}

}  // namespace

uint32_t dtype_to_ggml(DType t) {
    switch (t) {
        case DType::F32: return 0;
        case DType::F16: return 1;
        case DType::Q4_0: return 2;
        case DType::Q4_1: return 3;
        case DType::Q5_0: return 6;
        case DType::Q5_1: return 7;
        case DType::Q8_0: return 8;
        case DType::Q4_K: return 12;
        case DType::Q5_K: return 13;
        case DType::Q6_K: return 14;
        case DType::I32: return 26;
        case DType::BF16: return 30;
    }
    fail("dtype_to_ggml: unknown dtype %d", (int)t);
}

void GgufWriter::set_alignment(uint64_t a) {
    if (a == 0 || (a & (a - 1)) || a > (1u << 20)) fail("GGUF writer: alignment %llu is not a power of two up to 2^20", (unsigned long long)a);
    if (!infos_.empty()) fail("GGUF writer: alignment set after tensors were added");
    align_ = a;
}

bool GgufWriter::has(const std::string& key) const { return std::find(keys_.begin(), keys_.end(), key) != keys_.end(); }

void GgufWriter::key_header(const std::string& key, uint32_t type) {
    if (has(key)) fail("GGUF writer: metadata key '%s' given twice", key.c_str());
    if (file_) fail("GGUF writer: metadata key '%s' added after the header was written", key.c_str());
    keys_.push_back(key);
    n_kv_++;
    put_str(meta_, key);
    put<uint32_t>(meta_, type);
}

void GgufWriter::raw(const std::string& key, const uint8_t* entry, size_t n) {
    if (has(key)) fail("GGUF writer: metadata key '%s' given twice", key.c_str());
    if (n < 12 + key.size()) fail("GGUF writer: stored entry of '%s' is %zu bytes, too short", key.c_str(), n);
    keys_.push_back(key);
    n_kv_++;
    meta_.insert(meta_.end(), entry, entry + n);
}

void GgufWriter::str(const std::string& key, const std::string& v) { key_header(key, T_STRING); put_str(meta_, v); }
void GgufWriter::u32(const std::string& key, uint32_t v) { key_header(key, T_U32); put(meta_, v); }
void GgufWriter::f32(const std::string& key, float v) { key_header(key, T_F32); put(meta_, v); }
void GgufWriter::boolean(const std::string& key, bool v) { key_header(key, T_BOOL); put<uint8_t>(meta_, v ? 1 : 0); }

void GgufWriter::strs(const std::string& key, const std::vector<std::string>& v) {
    key_header(key, T_ARRAY);
    put<uint32_t>(meta_, T_STRING);
    put<uint64_t>(meta_, v.size());
    for (const std::string& s : v) put_str(meta_, s);
}

void GgufWriter::f32s(const std::string& key, const std::vector<float>& v) {
    key_header(key, T_ARRAY);
    put<uint32_t>(meta_, T_F32);
    put<uint64_t>(meta_, v.size());
    for (float x : v) put(meta_, x);
}

void GgufWriter::i32s(const std::string& key, const std::vector<int>& v) {
    key_header(key, T_ARRAY);
    put<uint32_t>(meta_, T_I32);
    put<uint64_t>(meta_, v.size());
    for (int x : v) put<int32_t>(meta_, x);
}

void GgufWriter::tensor(const std::string& name, DType t, int ndim, const int64_t* shape) {
    if (file_) fail("GGUF writer: tensor '%s' added after the header was written", name.c_str());
    if (ndim < 1 || ndim > 4) fail("GGUF writer: tensor '%s' has %d dimensions, expected 1 to 4", name.c_str(), ndim);
    for (const Info& i : infos_)
        if (i.name == name) fail("GGUF writer: tensor '%s' given twice", name.c_str());
    Info info{name, t, ndim, {1, 1, 1, 1}, 0, 0};
    uint64_t rows = 1;
    for (int d = 0; d < ndim; d++) {
        info.shape[d] = shape[d];
        if (d < ndim - 1) rows *= (uint64_t)shape[d];
    }
    const uint64_t cols = (uint64_t)shape[ndim - 1];
    if (cols % (uint64_t)dtype_block_elems(t) != 0)
        fail("GGUF writer: tensor '%s' is %s but its row length %llu is not a multiple of %d", name.c_str(), dtype_name(t),
             (unsigned long long)cols, (int)dtype_block_elems(t));
    info.nbytes = rows * dtype_row_bytes(t, cols);
    info.offset = data_bytes_;
    data_bytes_ = padded(data_bytes_ + info.nbytes);
    infos_.push_back(info);
}

void GgufWriter::begin(const std::string& path) {
    if (file_) fail("GGUF writer: begin('%s') called twice", path.c_str());
    std::vector<uint8_t> h;
    h.insert(h.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(h, 3);
    put<uint64_t>(h, infos_.size());
    put<uint64_t>(h, n_kv_);
    h.insert(h.end(), meta_.begin(), meta_.end());
    for (const Info& i : infos_) {
        put_str(h, i.name);
        put<uint32_t>(h, (uint32_t)i.ndim);
        for (int d = i.ndim - 1; d >= 0; d--) put<uint64_t>(h, (uint64_t)i.shape[d]);  // innermost first
        put<uint32_t>(h, dtype_to_ggml(i.dtype));
        put<uint64_t>(h, i.offset);
    }
    h.resize(padded(h.size()), 0);
    path_ = path;
    file_ = std::make_unique<AtomicFile>(path);
    file_->write(h.data(), h.size());
}

void GgufWriter::data(const void* p, size_t n) {
    if (!file_) fail("GGUF writer: tensor data before begin()");
    if (next_ >= infos_.size()) fail("GGUF '%s': more tensor data than the %zu tensors declared", path_.c_str(), infos_.size());
    const Info& i = infos_[next_];
    if (n != i.nbytes)
        fail("GGUF '%s': tensor '%s' data is %zu bytes, expected %llu", path_.c_str(), i.name.c_str(), n,
             (unsigned long long)i.nbytes);
    file_->write(p, n);
    const std::vector<uint8_t> zeros(padded(n) - n, 0);
    file_->write(zeros.data(), zeros.size());
    next_++;
}

void GgufWriter::finish() {
    if (!file_) fail("GGUF writer: finish() before begin()");
    if (next_ != infos_.size())
        fail("GGUF '%s': %zu of %zu tensors written", path_.c_str(), next_, infos_.size());
    file_->commit();
    file_.reset();
}

}  // namespace beagle
