// gguf_write.h: a GGUF v3 writer (little-endian): metadata entries, typed or copied as another GGUF
// stores them, the tensor infos, then each tensor's bytes in order, streamed into an atomic file, so a
// model larger than memory is written one tensor at a time. `beagle quantize` writes its output with it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../core/common.h"
#include "../core/dtype.h"

namespace beagle {

// The ggml type id of a stored dtype (GGUF's tensor type field).
uint32_t dtype_to_ggml(DType t);

class GgufWriter {
public:
    // Tensor data alignment: GGUF's default 32, or the general.alignment the caller writes (a power of two).
    void set_alignment(uint64_t a);

    // Metadata, in the order added; a key given twice is an Error.
    void raw(const std::string& key, const uint8_t* entry, size_t n);  // a whole stored entry (model_file.h)
    void str(const std::string& key, const std::string& v);
    void u32(const std::string& key, uint32_t v);
    void f32(const std::string& key, float v);
    void boolean(const std::string& key, bool v);
    void strs(const std::string& key, const std::vector<std::string>& v);
    void f32s(const std::string& key, const std::vector<float>& v);
    void i32s(const std::string& key, const std::vector<int>& v);
    bool has(const std::string& key) const;

    // A tensor's info (shape outermost first, as Tensor). Its bytes follow later through data().
    void tensor(const std::string& name, DType t, int ndim, const int64_t* shape);

    // Creates path's temp file and writes the header, metadata, tensor infos and the padding before
    // the data; then data() takes each tensor's bytes, in the order tensor() was called, exactly its
    // size; finish() checks all came and puts the file in place.
    void begin(const std::string& path);
    void data(const void* p, size_t n);
    void finish();

    uint64_t bytes_written() const { return file_ ? file_->size() : 0; }

private:
    struct Info {
        std::string name;
        DType dtype;
        int ndim;
        int64_t shape[4];
        uint64_t nbytes, offset;
    };
    void key_header(const std::string& key, uint32_t type);
    uint64_t padded(uint64_t n) const { return (n + align_ - 1) / align_ * align_; }
    uint64_t align_ = 32;
    std::vector<uint8_t> meta_;
    std::vector<std::string> keys_;
    uint64_t n_kv_ = 0;
    std::vector<Info> infos_;
    uint64_t data_bytes_ = 0;
    size_t next_ = 0;
    std::string path_;
    std::unique_ptr<AtomicFile> file_;
};

}  // namespace beagle
