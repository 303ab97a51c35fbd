// test_sha256.cpp: Sha256 (src/core/sha256.h) gives FIPS 180-2's published digests (the empty message, "abc",
// the 448-bit two-block message, a million 'a'; and hashlib's at the padding's edges), whatever the sizes of the pieces the message is fed in
// (1, 55, 56, 63, 64, 65 and 1000 bytes: every padding and buffering path), and sha256_file the same digest
// as the bytes fed at once. (test_train_from_tokens.sh checks a model file's against Python's hashlib.)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/sha256.h"
#include "testlib.h"

using namespace beagle;

static std::string digest(const std::string& msg, size_t piece) {
    Sha256 h;
    for (size_t i = 0; i < msg.size(); i += piece) h.update(msg.data() + i, std::min(piece, msg.size() - i));
    return h.hex();
}

int main() {
    struct Vec { std::string msg, hex; };
    const Vec vecs[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
        // the padding's edges (55 bytes: one block; 64; 119: 55 past a block), digests from Python's hashlib
        {std::string(55, 'a'), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {std::string(64, 'a'), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {std::string(119, 'a'), "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
    };
    for (const Vec& v : vecs)
        for (size_t piece : {(size_t)1, (size_t)55, (size_t)56, (size_t)63, (size_t)64, (size_t)65, (size_t)1000, v.msg.size() + 1}) {
            if (piece == 1 && v.msg.size() > 100000) continue;  // (a million single-byte calls: slow under the sanitizers)
            const std::string got = digest(v.msg, piece);
            CHECK(got == v.hex, "message of %zu bytes fed %zu at a time: %s, expected %s", v.msg.size(), piece, got.c_str(),
                  v.hex.c_str());
        }
    const std::string path = "/tmp/test_sha256." + std::to_string(getpid());
    std::string msg;
    for (int i = 0; i < 3 * (1 << 20) + 77; i++) msg += (char)(i * 131 % 251);  // past the reader's 1 MiB chunks
    FILE* f = fopen(path.c_str(), "wb");
    CHECK(f && fwrite(msg.data(), 1, msg.size(), f) == msg.size(), "cannot write %s", path.c_str());
    if (f) fclose(f);
    CHECK(sha256_file(path) == digest(msg, msg.size() + 1), "sha256_file differs from the bytes hashed at once");
    std::remove(path.c_str());
    CHECK_THROWS(sha256_file(path), "cannot open");
    return test_summary("sha256");
}
