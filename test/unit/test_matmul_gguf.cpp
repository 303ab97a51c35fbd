// test_matmul_gguf.cpp: cpu_matmul on real tensors of the SmolLM2-135M GGUF (BEAGLE_MODEL).
//  * no arguments: finds blk.0.attn_q.weight (Q4_1 576x576), blk.0.ffn_down.weight (Q4_1 576x1536) and
//    token_embd.weight (Q8_0 49152x576) with a tiny test-local GGUF locator (independent of src/io/),
//    and checks both ISAs (and AVX-512's row-group kernel on the packed copy) and both activation widths (int16, int8) against the double-precision
//    reference with the derived bounds of matmul_ref.h, plus bitwise T=1 vs T=5 invariance on the real
//    weights.
//  * --apply DTYPE ROWS COLS T W_FILE X_FILE Y_FILE [ISA]: (ISA avx2, avx512 or avx512-packed) y = matmul of raw weight bytes and f32 x read
//    from files (used by test/oracles/test_matmul_gguf.py, whose reference is the gguf package's dequantizer);
//    the activation width comes from env BEAGLE_ACT_BITS (default 16) and is printed.
//  * --quantize-q8_0 IN OUT: quantize_row_q8_0 of raw f32 values (test_matmul_gguf.py compares the bytes
//    with the gguf package's Q8_0 quantizer).
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/common.h"
#include "core/quantize.h"
#include "testlib.h"
#include "matmul_ref.h"

using namespace beagle;

// ---- tiny GGUF tensor locator (bounds-checked; enough to find tensors by name)
struct GgufTensor {
    std::string name;
    int ggml_type = -1;
    uint64_t ne[4] = {1, 1, 1, 1};
    uint32_t n_dims = 0;
    uint64_t offset = 0;  // absolute file offset once located
};

struct Cursor {
    const uint8_t* p;
    size_t n, at = 0;
    template <class V>
    V get() {
        if (at + sizeof(V) > n) fail("gguf: truncated at byte %zu", at);
        V v;
        memcpy(&v, p + at, sizeof(V));
        at += sizeof(V);
        return v;
    }
    std::string str() {
        uint64_t len = get<uint64_t>();
        if (len > n - at) fail("gguf: string of %llu bytes at byte %zu runs past the end", (unsigned long long)len, at);
        std::string s((const char*)p + at, len);
        at += len;
        return s;
    }
    void skip_value(uint32_t type) {
        static const int sizes[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        if (type == 8) {
            str();
        } else if (type == 9) {
            uint32_t et = get<uint32_t>();
            uint64_t cnt = get<uint64_t>();
            for (uint64_t i = 0; i < cnt; i++) skip_value(et);
        } else if (type < 13) {
            if (sizes[type] > (int64_t)(n - at)) fail("gguf: truncated value at byte %zu", at);
            at += sizes[type];
        } else {
            fail("gguf: unknown value type %u at byte %zu", type, at);
        }
    }
};

static std::vector<GgufTensor> gguf_tensors(const MappedFile& f) {
    Cursor c{f.data, f.size};
    if (c.get<uint32_t>() != 0x46554747u) fail("%s: not a GGUF file", f.path.c_str());
    c.get<uint32_t>();  // version
    uint64_t n_tensors = c.get<uint64_t>(), n_kv = c.get<uint64_t>();
    uint64_t alignment = 32;
    for (uint64_t i = 0; i < n_kv; i++) {
        std::string key = c.str();
        uint32_t type = c.get<uint32_t>();
        if (key == "general.alignment" && type == 4)
            alignment = c.get<uint32_t>();
        else
            c.skip_value(type);
    }
    std::vector<GgufTensor> ts(n_tensors);
    for (auto& t : ts) {
        t.name = c.str();
        t.n_dims = c.get<uint32_t>();
        if (t.n_dims > 4) fail("gguf: tensor %s has %u dims", t.name.c_str(), t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; d++) t.ne[d] = c.get<uint64_t>();
        t.ggml_type = (int)c.get<uint32_t>();
        t.offset = c.get<uint64_t>();
    }
    uint64_t data_start = (c.at + alignment - 1) / alignment * alignment;
    for (auto& t : ts) t.offset += data_start;
    return ts;
}

static DType dtype_of_ggml(int t) {
    switch (t) {
        case 0: return DType::F32;
        case 1: return DType::F16;
        case 2: return DType::Q4_0;
        case 3: return DType::Q4_1;
        case 8: return DType::Q8_0;
        case 30: return DType::BF16;
    }
    fail("ggml type %d not handled by this test", t);
}

static DType dtype_by_name(const std::string& s) {
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                    DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K})
        if (s == dtype_name(t)) return t;
    fail("unknown dtype '%s'", s.c_str());
}

static std::vector<uint8_t> read_all(const std::string& path) {
    std::string s = read_file(path);
    return std::vector<uint8_t>(s.begin(), s.end());
}

static int apply_mode(int argc, char** argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: %s --apply DTYPE ROWS COLS T W_FILE X_FILE Y_FILE [ISA]\n", argv[0]);
        return 2;
    }
    DType dt = dtype_by_name(argv[2]);
    int64_t rows = atoll(argv[3]), cols = atoll(argv[4]);
    int T = atoi(argv[5]);
    std::vector<uint8_t> wb = read_all(argv[6]), xb = read_all(argv[7]);
    if (wb.size() != dtype_row_bytes(dt, cols) * rows) fail("weight file has %zu bytes, expected %llu", wb.size(),
                                                             (unsigned long long)(dtype_row_bytes(dt, cols) * rows));
    if (xb.size() != (size_t)T * cols * 4) fail("x file has %zu bytes, expected %lld", xb.size(), (long long)T * cols * 4);
    // ISA[-packed]: the ISA's kernel, on the row-group copy with "-packed"
    std::string isa = argc > 9 ? argv[9] : "";
    const bool packed = isa.size() > 7 && isa.compare(isa.size() - 7, 7, "-packed") == 0;
    if (packed) isa.resize(isa.size() - 7);
    if (argc > 9) cpu_matmul_set_isa(isa.c_str());
    Weight W;
    W.data = wb.data();
    W.dtype = dt;
    W.rows = rows;
    W.cols = cols;
    std::vector<uint8_t> pk;
    if (packed) {
        pk = cpu_pack_weight(W, cpu_pack_rows());
        W.packed = pk.data();
        W.packed_rows = cpu_pack_rows();
    }
    std::vector<float> y((size_t)T * rows);
    ThreadPool pool(2);
    cpu_matmul(y.data(), (const float*)xb.data(), W, T, pool);
    write_file_atomic(argv[8], y.data(), y.size() * 4);
    printf("isa %s act_bits %d\n", cpu_matmul_isa(), cpu_matmul_act_bits());
    return 0;
}

// --quantize-q8_0 IN OUT: f32 values (a multiple of 32) -> Q8_0 blocks by quantize_row_q8_0, for
// test_matmul_gguf.py to compare with the gguf package's quantizer byte for byte.
static int quantize_mode(int argc, char** argv) {
    if (argc != 4) fail("usage: test_matmul_gguf --quantize-q8_0 IN OUT");
    std::vector<uint8_t> xb = read_all(argv[2]);
    if (xb.size() % (32 * 4) != 0) fail("input has %zu bytes, expected a multiple of 128", xb.size());
    const int64_t n = (int64_t)xb.size() / 4;
    std::vector<uint8_t> out(dtype_row_bytes(DType::Q8_0, (uint64_t)n));
    quantize_row_q8_0((const float*)xb.data(), out.data(), n);
    write_file_atomic(argv[3], out.data(), out.size());
    return 0;
}

int main(int argc, char** argv) {
    const bool apply = argc > 1 && strcmp(argv[1], "--apply") == 0;
    if (apply || (argc > 1 && strcmp(argv[1], "--quantize-q8_0") == 0)) {
        try {
            return apply ? apply_mode(argc, argv) : quantize_mode(argc, argv);
        } catch (const Error& e) {
            fprintf(stderr, "error: %s\n", e.what());
            return 1;
        }
    }
    const char* env = getenv("BEAGLE_MODEL");
    std::string path = env ? env : "weights/SmolLM2-135M-Instruct.Q4_1.gguf";
    CHECK(file_exists(path), "model %s not found (run `make model`)", path.c_str());
    if (!file_exists(path)) return test_summary("test_matmul_gguf");
    MappedFile f(path);
    std::vector<GgufTensor> ts = gguf_tensors(f);

    // ISA-packed: the row-group copy of that ISA (cpu_pack_weight), int16 activations
    std::vector<const char*> isas = {"avx2", "avx2-packed"};
    if (cpu_has_avx512_vnni()) {
        isas.push_back("avx512");
        isas.push_back("avx512-packed");
    }
    ThreadPool pool(2);
    std::mt19937_64 g(5);
    for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_down.weight", "token_embd.weight"}) {
        const GgufTensor* t = nullptr;
        for (auto& x : ts)
            if (x.name == name) t = &x;
        CHECK(t != nullptr, "tensor %s not in %s", name, path.c_str());
        if (!t) continue;
        DType dt = dtype_of_ggml(t->ggml_type);
        int64_t cols = (int64_t)t->ne[0], rows = (int64_t)t->ne[1];
        uint64_t bytes = dtype_row_bytes(dt, cols) * rows;
        CHECK(t->offset + bytes <= f.size, "%s runs past the end of the file", name);
        if (t->offset + bytes > f.size) continue;
        Weight W;
        W.data = f.data + t->offset;
        W.dtype = dt;
        W.rows = rows;
        W.cols = cols;
        const int T = 5;
        std::vector<float> x((size_t)T * cols);
        std::normal_distribution<double> nd(0.0, 1.0);
        for (auto& v : x) v = (float)nd(g);
        for (const char* isa : isas)
            for (int bits : {16, 8}) {
                const bool packed = strstr(isa, "-packed") != nullptr;
                if (packed && bits != 16) continue;  // 8-bit activations never use the packed copy
                if (packed && !cpu_can_pack(dt)) continue;
                const int G = strncmp(isa, "avx512", 6) == 0 ? 16 : 8;
                std::vector<uint8_t> pk = packed ? cpu_pack_weight(W, G) : std::vector<uint8_t>();
                W.packed = packed ? pk.data() : nullptr;
                W.packed_rows = packed ? G : 0;
                cpu_matmul_set_isa(G == 16 ? "avx512" : "avx2");
                cpu_matmul_set_act_bits(bits);
                std::vector<float> y((size_t)T * rows), y1(rows);
                cpu_matmul(y.data(), x.data(), W, T, pool);
                bool ok = check_result(dt, f.data + t->offset, x, y.data(), rows, cols, T, isa, bits);
                CHECK(ok, "%s int%d %s (%s %lld x %lld) vs double reference", isa, bits, name, dtype_name(dt),
                      (long long)rows, (long long)cols);
                bool same = true;
                for (int tt = 0; tt < T; tt++) {
                    cpu_matmul(y1.data(), x.data() + (size_t)tt * cols, W, 1, pool);
                    same &= memcmp(y1.data(), y.data() + (size_t)tt * rows, rows * 4) == 0;
                }
                CHECK(same, "%s int%d %s: T=1 rows differ bitwise from the T=5 call", isa, bits, name);
                printf("%s int%-2d %-22s %s %6lld x %-5lld ok=%d invariant=%d\n", isa, bits, name, dtype_name(dt),
                       (long long)rows, (long long)cols, ok, same);
            }
    }
    cpu_matmul_set_isa("auto");
    cpu_matmul_set_act_bits(16);
    printf("checked %d output values\n", g_cases);
    return test_summary("test_matmul_gguf");
}
