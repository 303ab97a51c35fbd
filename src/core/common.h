// common.h: errors, checked arithmetic, files (read whole / memory-mapped), timing.
// Every loader and CLI path reports bad input by throwing beagle::Error with a message that says
// what was expected, what was found and where; main() prints it and exits non-zero.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace beagle {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// printf-style formatting into std::string.
std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Throw Error(strfmt(...)).
[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#define BEAGLE_CHECK(cond, ...) \
    do {                        \
        if (!(cond)) ::beagle::fail(__VA_ARGS__); \
    } while (0)

// Overflow-checked size arithmetic for loaders (throws with `what` in the message).
uint64_t checked_mul(uint64_t a, uint64_t b, const char* what);
uint64_t checked_add(uint64_t a, uint64_t b, const char* what);

// A read-only memory map of a whole file. Movable, not copyable.
struct MappedFile {
    std::string path;
    const uint8_t* data = nullptr;
    size_t size = 0;
    MappedFile() = default;
    explicit MappedFile(const std::string& path);  // throws Error if missing/unreadable
    ~MappedFile();
    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
};

std::string read_file(const std::string& path);  // throws Error if missing/unreadable
// The first n bytes of a file (fewer if it is shorter: a magic number's sniff); Error if it cannot be opened.
std::string read_file_prefix(const std::string& path, size_t n);
bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
// A file written in pieces and put in place at once: the constructor creates path + ".tmp.<pid>",
// write() appends, commit() fsyncs and renames it over path. Destroyed uncommitted (an error on the
// way), the temp file is removed and path is as it was. Not copyable.
class AtomicFile {
public:
    explicit AtomicFile(const std::string& path);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    void write(const void* data, size_t n);
    uint64_t size() const { return written_; }
    void commit();

private:
    [[noreturn]] void fail_and_remove(const char* doing, int err);
    std::string path_, tmp_;
    int fd_ = -1;
    uint64_t written_ = 0;
};
// Atomic write of one buffer (AtomicFile).
void write_file_atomic(const std::string& path, const void* data, size_t n);
// The temp files of write_file_atomic that a killed process left behind: PATH.tmp.<pid> where PATH is
// path_prefix followed by anything and process <pid> is gone, removed (a resumed datagen or train calls
// it on its outputs). Returns how many were removed.
int remove_stale_temps(const std::string& path_prefix);

double now_seconds();          // monotonic clock
double thread_cpu_seconds();   // CPU time of the calling thread (a busy machine's preemptions do not count)
size_t peak_rss_bytes();       // from getrusage (ru_maxrss)

// Host memory for large, long-lived buffers that are streamed (packed weights, KV caches, the bandwidth
// probe). From 2 MiB up: aligned to 2 MiB and advised MADV_HUGEPAGE, so where transparent huge pages are
// "madvise" or "always" the kernel backs it with 2 MiB pages. A decode step streams every weight once
// (~100 MB for SmolLM2-135M): with 4 KiB pages that is ~24k TLB misses a token, each a page walk in the
// middle of the stream (docs/benchmarks/cpu.md, notes). Smaller buffers: 64-byte aligned, no advice.
// BEAGLE_HUGEPAGES=0 turns the advice off everywhere (for side-by-side timing). Not zeroed; free with free().
void* alloc_large(size_t bytes);
bool huge_pages_enabled();   // BEAGLE_HUGEPAGES is not "0" (read once)
size_t anon_huge_bytes();    // this process's memory in transparent huge pages now (/proc/self/smaps_rollup), 0 if unknown

// UTF-8: true if s is valid UTF-8; else *bad_offset gets the first bad byte offset.
bool utf8_valid(const std::string& s, size_t* bad_offset = nullptr);
// s with each invalid byte replaced by U+FFFD (JSON output; a reply cut inside a character).
std::string utf8_sanitize(const std::string& s);

}  // namespace beagle
