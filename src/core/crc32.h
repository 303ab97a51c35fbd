// crc32.h: zlib's CRC-32 (polynomial 0xEDB88320), the checksum trailing every Beagle container file
// (src/io/container.h: draft files, training checkpoints, data shards).
#pragma once
#include <cstddef>
#include <cstdint>

namespace beagle {

uint32_t crc32_update(uint32_t crc, const void* data, size_t n);  // start with 0; incremental

}  // namespace beagle
