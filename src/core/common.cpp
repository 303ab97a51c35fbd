// common.cpp: errors, checked arithmetic, whole-file reads and mmap, large-buffer allocation, clocks
// and UTF-8 validation (common.h), used by every layer above src/core/.
#include "common.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace beagle {

static std::string vstrfmt(const char* fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(nullptr, 0, fmt, ap2);
    va_end(ap2);
    std::string s(n > 0 ? n : 0, '\0');
    if (n > 0) vsnprintf(&s[0], n + 1, fmt, ap);
    return s;
}

std::string strfmt(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrfmt(fmt, ap);
    va_end(ap);
    return s;
}

void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrfmt(fmt, ap);
    va_end(ap);
    throw Error(s);
}

uint64_t checked_mul(uint64_t a, uint64_t b, const char* what) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        fail("size overflow computing %s: %llu * %llu", what, (unsigned long long)a, (unsigned long long)b);
    return r;
}

uint64_t checked_add(uint64_t a, uint64_t b, const char* what) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r))
        fail("size overflow computing %s: %llu + %llu", what, (unsigned long long)a, (unsigned long long)b);
    return r;
}

MappedFile::MappedFile(const std::string& p) : path(p) {
    struct stat pre;  // check before open(): opening a FIFO or device would block or misbehave
    if (::stat(p.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode) && !S_ISDIR(pre.st_mode))
        fail("'%s' is not a regular file", p.c_str());
    int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) fail("cannot open '%s': %s", p.c_str(), strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        fail("cannot stat '%s': %s", p.c_str(), strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        fail("'%s' is a directory, expected a file", p.c_str());
    }
    size = (size_t)st.st_size;
    if (size > 0) {
#ifdef BEAGLE_FUZZ
        // Fuzz builds (test/fuzz/fuzz.mk) read the file into an exact-size heap block instead, so
        // that AddressSanitizer reports any read past its end (a read past a mapping's end within
        // its last page goes unnoticed).
        uint8_t* m = (uint8_t*)malloc(size);
        size_t got = 0;
        while (m && got < size) {
            ssize_t r = ::read(fd, m + got, size - got);
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (!m || got != size) {
            free(m);
            ::close(fd);
            fail("cannot read '%s'", p.c_str());
        }
        data = m;
#else
        void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            fail("cannot mmap '%s': %s", p.c_str(), strerror(e));
        }
        data = (const uint8_t*)m;
#endif
    }
    ::close(fd);
}

// Frees what the constructor got: a mapping, or (fuzz builds) a heap block.
static void release(const uint8_t* data, size_t size) {
    if (!data || !size) return;
#ifdef BEAGLE_FUZZ
    free((void*)data);
#else
    munmap((void*)data, size);
#endif
}

MappedFile::~MappedFile() { release(data, size); }

MappedFile::MappedFile(MappedFile&& o) noexcept : path(std::move(o.path)), data(o.data), size(o.size) {
    o.data = nullptr;
    o.size = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
    if (this != &o) {
        release(data, size);
        path = std::move(o.path);
        data = o.data;
        size = o.size;
        o.data = nullptr;
        o.size = 0;
    }
    return *this;
}

std::string read_file(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) fail("cannot open '%s': %s", path.c_str(), strerror(errno));
    std::string s;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    bool err = ferror(f);
    fclose(f);
    if (err) fail("error reading '%s' (is it a directory?)", path.c_str());
    return s;
}

std::string read_file_prefix(const std::string& path, size_t n) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) fail("cannot open '%s': %s", path.c_str(), strerror(errno));
    std::string s(n, '\0');
    s.resize(fread(&s[0], 1, n, f));
    fclose(f);
    return s;
}

bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp." + std::to_string(getpid())) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd_ < 0) fail("cannot create '%s': %s", tmp_.c_str(), strerror(errno));
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) {
        ::close(fd_);
        ::unlink(tmp_.c_str());
    }
}

void AtomicFile::fail_and_remove(const char* doing, int err) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
    fail("cannot write '%s': %s (%s its temp file '%s', removed)%s", path_.c_str(), strerror(err), doing, tmp_.c_str(),
         file_exists(path_) ? "; the previous file is unchanged" : "");
}

void AtomicFile::write(const void* data, size_t n) {
    if (fd_ < 0) fail("cannot write '%s': the file is already committed or closed", path_.c_str());
    const uint8_t* p = (const uint8_t*)data;
    size_t left = n;
    while (left > 0) {
        ssize_t w = ::write(fd_, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            fail_and_remove(strfmt("after %llu bytes of", (unsigned long long)(written_ + n - left)).c_str(), errno);
        }
        p += w;
        left -= (size_t)w;
    }
    written_ += n;
}

void AtomicFile::commit() {
    if (fd_ < 0) fail("cannot write '%s': the file is already committed or closed", path_.c_str());
    if (fsync(fd_) != 0) fail_and_remove("flushing", errno);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
        int e = errno;
        ::unlink(tmp_.c_str());
        fail("cannot write '%s': %s (closing its temp file '%s', removed)", path_.c_str(), strerror(e), tmp_.c_str());
    }
    if (rename(tmp_.c_str(), path_.c_str()) != 0) {
        int e = errno;
        ::unlink(tmp_.c_str());
        fail("cannot rename '%s' to '%s': %s", tmp_.c_str(), path_.c_str(), strerror(e));
    }
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
    AtomicFile f(path);
    f.write(data, n);
    f.commit();
}

int remove_stale_temps(const std::string& path_prefix) {
    size_t slash = path_prefix.rfind('/');
    std::string dir = slash == std::string::npos ? "." : path_prefix.substr(0, slash + 1);
    std::string name = slash == std::string::npos ? path_prefix : path_prefix.substr(slash + 1);
    DIR* d = opendir(dir.c_str());
    if (!d) return 0;
    int removed = 0;
    while (struct dirent* e = readdir(d)) {
        std::string n = e->d_name;
        size_t t = n.rfind(".tmp.");
        if (n.compare(0, name.size(), name) != 0 || t == std::string::npos || t < name.size()) continue;
        std::string pid = n.substr(t + 5);
        if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
        if (kill((pid_t)atol(pid.c_str()), 0) == 0 || errno != ESRCH) continue;  // its writer may still run
        std::string p = (slash == std::string::npos ? "" : dir) + n;
        if (unlink(p.c_str()) == 0) removed++;
    }
    closedir(d);
    return removed;
}

double now_seconds() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double thread_cpu_seconds() {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

size_t peak_rss_bytes() {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

bool huge_pages_enabled() {
    static const bool on = [] {
        const char* e = getenv("BEAGLE_HUGEPAGES");
        return !(e && strcmp(e, "0") == 0);
    }();
    return on;
}

void* alloc_large(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    const bool advise = bytes >= huge && huge_pages_enabled();
    void* p = nullptr;
    if (posix_memalign(&p, advise ? huge : 64, bytes ? bytes : 1) != 0)
        fail("out of memory allocating %zu bytes", bytes);
    if (advise) madvise(p, bytes / huge * huge, MADV_HUGEPAGE);  // only advice: EINVAL (no THP) leaves 4 KiB pages
    return p;
}

size_t anon_huge_bytes() {
    FILE* f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

bool utf8_valid(const std::string& s, size_t* bad_offset) {
    const unsigned char* p = (const unsigned char*)s.data();
    size_t n = s.size(), i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else goto bad;
        if (i + len > n) goto bad;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) goto bad;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            goto bad;
        i += len;
        continue;
    bad:
        if (bad_offset) *bad_offset = i;
        return false;
    }
    return true;
}

std::string utf8_sanitize(const std::string& s) {
    std::string out, rest = s;
    size_t bad;
    while (!utf8_valid(rest, &bad)) {
        out.append(rest, 0, bad);
        out += "\xEF\xBF\xBD";
        rest.erase(0, bad + 1);
    }
    return out + rest;
}

}  // namespace beagle
