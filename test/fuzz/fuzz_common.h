// fuzz_common.h: what every libFuzzer harness in test/fuzz/ shares: a per-process scratch directory
// on tmpfs for loaders that take a path, the size/CRC fix-up for Beagle's own checksummed formats,
// and FUZZ_TARGET(fn), which turns `void fn(const uint8_t*, size_t)` into LLVMFuzzerTestOneInput.
// A harness accepts beagle::Error (bad input, cleanly reported); anything else is a finding: a crash,
// a sanitizer report, a leak, a hang, or another exception type (abort()).
// Built with -DFUZZ_REPLAY instead (normal -O2 build, no libFuzzer), the same harness gets a main()
// that replays files given on the command line and prints "<file>: error: <message>" or
// "<file>: accepted" per file (scripts: test/fuzz/fuzz.mk, test/cli/test_fuzz_regress.sh).
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/crc32.h"
#include "model/draft.h"
#include "test_loaders_util.h"
#include "tokenizer/tokenizer.h"

namespace fuzz {

// A directory made once per process under /dev/shm (tmpfs; $TMPDIR or /tmp if absent), removed at
// exit. Files are rewritten for every input.
struct ScratchDir {
    std::string path;
    ScratchDir() {
        const char* shm = "/dev/shm";
        const char* t = getenv("TMPDIR");
        std::string base = access(shm, W_OK) == 0 ? shm : (t && *t ? t : "/tmp");
        std::string tmpl = base + "/beagle_fuzz_XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back(0);
        if (!mkdtemp(buf.data())) {
            perror("mkdtemp");
            abort();
        }
        path = buf.data();
    }
    ~ScratchDir() {
        std::string cmd = "rm -rf '" + path + "'";
        if (system(cmd.c_str()) != 0) fprintf(stderr, "fuzz: could not remove %s\n", path.c_str());
    }
    // Write `n` bytes to <dir>/<name>; returns the path.
    std::string put(const std::string& name, const void* data, size_t n) const {
        std::string p = path + "/" + name;
        FILE* f = fopen(p.c_str(), "wb");
        if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
            perror(p.c_str());
            abort();
        }
        return p;
    }
    std::string put(const std::string& name, const std::string& s) const { return put(name, s.data(), s.size()); }
    void remove(const std::string& name) const { unlink((path + "/" + name).c_str()); }
};

// The tiny llama of the HF harnesses' fixed companion files and of their seeds (make_seeds.cpp):
// dim 8, 1 layer, 2 heads / 1 KV head (head_dim 4), ffn 16, vocab 16.
static const lt::TinyLlama kTinyHF = {8, 1, 2, 1, 16, 16};

inline std::string bytes(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

inline const ScratchDir& scratch() {
    static ScratchDir d;
    return d;
}

// Beagle's own formats (draft, checkpoint, data shard) store their file size as a u64 at `size_off`
// and end with a CRC-32 of everything before. Random mutations almost never keep both right, so the
// harnesses load each input twice: as is (the size and CRC checks), and with both fields rewritten
// (everything behind them). Returns false when the input is too short to hold the fields.
inline bool fix_size_crc(std::string& b, size_t size_off) {
    if (b.size() < size_off + 8 + 4) return false;
    uint64_t n = b.size();
    memcpy(&b[size_off], &n, 8);
    uint32_t crc = beagle::crc32_update(0, b.data(), b.size() - 4);
    memcpy(&b[b.size() - 4], &crc, 4);
    return true;
}

// Writes the input to <scratch>/<name> and calls load(path) on it as is (an Error accepted), then
// again after fix_size_crc (an Error propagates to FUZZ_TARGET).
template <class Load>
void load_raw_and_fixed(const uint8_t* data, size_t n, const char* name, size_t size_off, Load load) {
    std::string b((const char*)data, n);
    try {
        load(scratch().put(name, b));
    } catch (const beagle::Error&) {
    }
    if (fix_size_crc(b, size_off)) load(scratch().put(name, b));
}

// Pieces of an input split at NUL bytes (for harnesses that take several strings).
inline std::vector<std::string> split_nul(const uint8_t* data, size_t n, size_t max_parts) {
    std::vector<std::string> out(1);
    for (size_t i = 0; i < n; i++) {
        if (data[i] == 0 && out.size() < max_parts) out.emplace_back();
        else out.back() += (char)data[i];
    }
    return out;
}


// A tokenizer built from a parsed spec must encode and decode without crashing: a few fixed texts
// (spaces, digits, accents, CJK, an emoji that needs byte fallback, special-token spellings), with
// and without special-token parsing; every id must be inside the vocabulary. An Error from one
// text (e.g. a character the vocabulary cannot spell) is fine; the other texts still run.
inline void exercise_tokenizer(const beagle::TokenizerSpec& spec) {
    if (spec.kind == beagle::TokenizerSpec::NONE) return;
    auto tok = beagle::Tokenizer::create(spec);
    static const char* texts[] = {
        "Hello world", "  two  spaces\n\nand lines\t", "12345 + 678 = 13023", "caf\xc3\xa9 na\xc3\xafve",
        "\xe4\xbd\xa0\xe5\xa5\xbd", "\xf0\x9f\x90\xb6 dog", "<s></s><unk><|im_start|>user\nhi<|im_end|>", "",
    };
    for (const char* t : texts)
        for (int special = 0; special < 2; special++) {
            std::vector<int> ids;
            try {
                ids = tok->encode(t, true, special != 0);
            } catch (const beagle::Error&) {
                continue;
            }
            for (int id : ids)
                if (id < 0 || id >= tok->vocab_size()) {
                    fprintf(stderr, "encode('%s') gave id %d outside [0, %d)\n", t, id, tok->vocab_size());
                    abort();
                }
            (void)tok->decode(ids, special != 0);
        }
}

}  // namespace fuzz

#ifdef FUZZ_REPLAY
#define FUZZ_TARGET(fn)                                                                     \
    int main(int argc, char** argv) {                                                       \
        for (int i = 1; i < argc; i++) {                                                    \
            std::string b = beagle::read_file(argv[i]);                                     \
            try {                                                                           \
                fn((const uint8_t*)b.data(), b.size());                                     \
                printf("%s: accepted\n", argv[i]);                                          \
            } catch (const beagle::Error& e) {                                              \
                printf("%s: error: %s\n", argv[i], e.what());                               \
            }                                                                               \
        }                                                                                   \
        return 0;                                                                           \
    }
#else
#define FUZZ_TARGET(fn)                                                                     \
    extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {                  \
        try {                                                                               \
            fn(data, n);                                                                    \
        } catch (const beagle::Error&) {                                                    \
        }                                                                                   \
        return 0;                                                                           \
    }
#endif
