// sha256.h: SHA-256 (FIPS 180-4), the identity of a model file as `sha256sum` prints it: beagle datagen
// records the target's, so that training from tokens can tell whether its -m file wrote them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace beagle {

class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t n);
    std::string hex();  // the digest as 64 lowercase hex digits (ends the hash: call once)

private:
    void block(const uint8_t* p);
    uint32_t h_[8];
    uint8_t buf_[64];
    size_t used_ = 0;
    uint64_t bytes_ = 0;
};

// The SHA-256 of a whole file, read in chunks; throws Error naming the path if it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace beagle
