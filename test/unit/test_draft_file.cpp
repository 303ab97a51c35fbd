// test_draft_file.cpp: the draft file format (src/model/draft.cpp on src/io/container.h). The shipped
// drafts load and save back to their exact bytes; round trip (config, tensors, metadata bit-exact);
// CRC-32 against zlib's check value; corrupt, truncated, extended, wrong-magic, wrong-version,
// bad-config, bad-shape, non-finite and wrong-count files give clear errors; a draft for another
// target (dim, vocabulary, heads, layers, tokenizer) is rejected with a clear error.
// With the SmolLM2 model present: frozen tensors dequantized from the GGUF, a draft config for it,
// and a random draft runs on it; a draft for another config is rejected.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>

#include "backend/cpu/cpu_ops.h"
#include "core/common.h"
#include "core/crc32.h"
#include "model/draft.h"
#include "testlib.h"
#include "model/draft_layers.h"
#include "core/rng.h"

using namespace beagle;

static std::string tmpdir() {
    const char* t = getenv("TMPDIR");
    return std::string(t ? t : "/tmp") + "/beagle_test_draft_file_" + std::to_string(getpid());
}

// rewrite a file's bytes and fix its CRC, so the loader's structural checks are reached
static void patch_and_fix(const std::string& path, const std::string& out, size_t off, const void* bytes, size_t n) {
    std::string d = read_file(path);
    memcpy(&d[off], bytes, n);
    uint32_t crc = crc32_update(0, d.data(), d.size() - 4);
    memcpy(&d[d.size() - 4], &crc, 4);
    write_file_atomic(out, d.data(), d.size());
}

static size_t find(const std::string& path, const std::string& needle) {
    std::string d = read_file(path);
    size_t p = d.find(needle);
    if (p == std::string::npos) {
        fprintf(stderr, "needle '%s' not in file\n", needle.c_str());
        exit(1);
    }
    return p;
}

int main() {
    // zlib's CRC-32 check value
    CHECK(crc32_update(0, "123456789", 9) == 0xCBF43926u, "crc32('123456789') = %08x", crc32_update(0, "123456789", 9));
    CHECK(crc32_update(crc32_update(0, "1234", 4), "56789", 5) == 0xCBF43926u, "crc32 is incremental");

    std::string dir = tmpdir();
    if (system(("mkdir -p " + dir).c_str()) != 0) return 1;
    std::string path = dir + "/d.bdr", bad = dir + "/bad.bdr";
    // the shipped drafts: loaded and saved again, byte for byte the shipped files (the container
    // module writes the layout these files were written in)
    const char* root = getenv("BEAGLE_ROOT");
    for (const char* name : {"weights/beagle-stories260K.bin", "weights/beagle-smollm2-135m.bin"}) {
        std::string p = std::string(root ? root : ".") + "/" + name;
        CHECK(file_exists(p), "shipped draft %s is missing", p.c_str());
        if (!file_exists(p)) continue;
        save_draft(dir + "/resaved.bdr", load_draft(p));
        CHECK(read_file(dir + "/resaved.bdr") == read_file(p), "%s: load + save changed its bytes", name);
    }

    DraftConfig c;
    c.dim = 16;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 4;
    c.ffn_dim = 24;
    c.vocab_size = 40;
    c.rope_theta = 500000.0f;
    c.rope_scaling = true;
    c.rope_factor = 8;
    c.target_n_layers = 30;
    c.tokenizer_hash = 0x0123456789abcdefULL;
    DraftWeights w;
    w.init_random(c, 77);
    w.meta = {{"step", "1234"}, {"data", "sharegpt 68k conversations"}};
    save_draft(path, w);
    DraftWeights r = load_draft(path);
    CHECK(r.cfg.dim == c.dim && r.cfg.n_heads == c.n_heads && r.cfg.n_kv_heads == c.n_kv_heads &&
              r.cfg.head_dim == c.head_dim && r.cfg.ffn_dim == c.ffn_dim && r.cfg.vocab_size == c.vocab_size &&
              r.cfg.rope_theta == c.rope_theta && r.cfg.rope_scaling && r.cfg.rope_factor == 8 &&
              r.cfg.target_n_layers == 30 && r.cfg.tokenizer_hash == c.tokenizer_hash &&
              r.cfg.norm_eps == c.norm_eps && r.cfg.final_eps == c.final_eps,
          "config round trip");
    for (int i = 0; i < DT_COUNT; i++)
        CHECK(r.t[i].size() == w.t[i].size() && (w.t[i].empty() || !memcmp(r.t[i].data(), w.t[i].data(), w.t[i].size() * 4)),
              "tensor %s round trip", draft_tensor_name(i));
    CHECK(r.meta == w.meta, "metadata round trip");

    std::string good = read_file(path);
    // corrupt one data byte
    {
        std::string d = good;
        d[d.size() - 100] ^= 0x10;
        write_file_atomic(bad, d.data(), d.size());
        CHECK_THROWS(load_draft(bad), "checksum mismatch");
    }
    // truncated, extended, empty, wrong magic
    write_file_atomic(bad, good.data(), good.size() - 100);
    CHECK_THROWS(load_draft(bad), "truncated");
    write_file_atomic(bad, good.data(), 20);
    CHECK_THROWS(load_draft(bad), "truncated");
    {
        std::string d = good + "xx";
        write_file_atomic(bad, d.data(), d.size());
        CHECK_THROWS(load_draft(bad), "trailing bytes");
    }
    write_file_atomic(bad, "", 0);
    CHECK_THROWS(load_draft(bad), "not a Beagle draft file");
    {
        std::string d = good;
        d[0] = 'X';
        write_file_atomic(bad, d.data(), d.size());
        CHECK_THROWS(load_draft(bad), "BEAGLEDR");
    }
    CHECK_THROWS(load_draft(dir + "/missing.bdr"), "missing.bdr");
    // structural errors behind a valid CRC
    uint32_t v2 = 2;
    patch_and_fix(path, bad, 8, &v2, 4);
    CHECK_THROWS(load_draft(bad), "version 2");
    uint32_t nt = 11;
    patch_and_fix(path, bad, 12, &nt, 4);
    CHECK_THROWS(load_draft(bad), "11 tensors");
    patch_and_fix(path, bad, find(path, "ffn_dim 24"), "ffn_dxm", 7);
    CHECK_THROWS(load_draft(bad), "lacks key 'ffn_dim'");
    patch_and_fix(path, bad, find(path, "dim 16\n"), "dim 1x", 6);
    CHECK_THROWS(load_draft(bad), "expected an integer");
    patch_and_fix(path, bad, find(path, "n_kv_heads 2"), "n_kv_heads 3", 12);
    CHECK_THROWS(load_draft(bad), "multiple of n_kv_heads");
    {
        // the shape of "wk" (rows) in the tensor table
        size_t p = find(path, std::string("\x02\x00\x00\x00wk", 6)) + 6 + 4;
        uint64_t rows = 9;
        patch_and_fix(path, bad, p, &rows, 8);
        CHECK_THROWS(load_draft(bad), "tensor 'wk' has shape");
        // its data offset beyond the file
        uint64_t off = good.size() + 64;
        patch_and_fix(path, bad, p + 16, &off, 8);
        CHECK_THROWS(load_draft(bad), "outside the file");
        // a NaN in its data
        uint64_t data_off;
        memcpy(&data_off, good.data() + p + 16, 8);
        float nan = NAN;
        patch_and_fix(path, bad, data_off + 8, &nan, 4);
        CHECK_THROWS(load_draft(bad), "not finite");
    }
    // random header/table mutations behind a valid CRC: a clean Error or a valid load, never a crash
    {
        TrainRng frng(123);
        size_t header = find(path, "w_down") + 64;  // through the end of the tensor table
        int errors = 0, loads = 0;
        for (int it = 0; it < 400; it++) {
            std::string d = good;
            int flips = 1 + frng.below(3);
            for (int k = 0; k < flips; k++) d[frng.below((int)header)] = (char)frng.below(256);
            uint32_t crc = crc32_update(0, d.data(), d.size() - 4);
            memcpy(&d[d.size() - 4], &crc, 4);
            write_file_atomic(bad, d.data(), d.size());
            try {
                load_draft(bad);
                loads++;
            } catch (const Error&) {
                errors++;
            }
        }
        CHECK(errors + loads == 400 && errors > 100, "mutations: %d errors, %d loads", errors, loads);
    }
    // a draft for another target
    LlamaConfig t;
    t.dim = 16;
    t.n_heads = 4;
    t.n_kv_heads = 2;
    t.head_dim = 4;
    t.vocab_size = 40;
    t.n_layers = 30;
    TokenizerSpec tok;
    check_draft_fits_target(r.cfg, t, tok, path);  // the target has no tokenizer: fingerprint not checked
    t.dim = 32;
    CHECK_THROWS(check_draft_fits_target(r.cfg, t, tok, path), "dim 16, this target has dim 32");
    t.dim = 16;
    t.vocab_size = 41;
    CHECK_THROWS(check_draft_fits_target(r.cfg, t, tok, path), "vocabulary of 40 tokens, this target has 41");
    t.vocab_size = 40;
    t.n_kv_heads = 4;
    CHECK_THROWS(check_draft_fits_target(r.cfg, t, tok, path), "heads");
    t.n_kv_heads = 2;
    t.n_layers = 12;
    CHECK_THROWS(check_draft_fits_target(r.cfg, t, tok, path), "30-layer target");
    t.n_layers = 30;
    for (int i = 0; i < 40; i++) tok.tokens.push_back("tok" + std::to_string(i));
    r.cfg.tokenizer_hash = tokenizer_fingerprint(tok);
    check_draft_fits_target(r.cfg, t, tok, path);
    tok.tokens[7] = "other";
    CHECK_THROWS(check_draft_fits_target(r.cfg, t, tok, path), "different tokenizer");
    // frozen tensors of the wrong size
    {
        CpuOps ops(1);
        DraftFrozen fz;
        fz.vocab = 41;
        fz.dim = 16;
        CHECK_THROWS(DraftModelT<Ops>(ops, w, fz), "frozen target tensors");
    }
    // reduced draft vocabulary (EAGLE-3 style): the token map round-trips and is validated
    {
        DraftWeights rv = w;
        for (int t = 0; t < c.vocab_size; t += 3) rv.d2t.push_back(t);
        rv.cfg.draft_vocab = (int)rv.d2t.size();
        std::string rvp = dir + "/rv.bdr";
        save_draft(rvp, rv);
        DraftWeights rr = load_draft(rvp);
        CHECK(rr.cfg.draft_vocab == rv.cfg.draft_vocab && rr.d2t == rv.d2t, "reduced vocabulary round trip");
        for (int i = 0; i < DT_COUNT; i++) CHECK(rr.t[i] == rv.t[i], "tensor %d round trip (reduced vocabulary)", i);
        std::string g = read_file(rvp);
        size_t at = find(rvp, "d2t");  // table entry: name, ndim, shape, unused, offset, bytes
        uint64_t doff;
        memcpy(&doff, g.data() + at + 3 + 4 + 16, 8);
        int32_t dup = rv.d2t[1];  // entry 2 := entry 1: not increasing
        patch_and_fix(rvp, bad, doff + 8, &dup, 4);
        CHECK_THROWS(load_draft(bad), "must be increasing");
        int32_t big = c.vocab_size + 5;  // last entry outside the vocabulary
        patch_and_fix(rvp, bad, doff + 4 * (rv.d2t.size() - 1), &big, 4);
        CHECK_THROWS(load_draft(bad), "must be increasing target ids in [0, 40)");
        DraftWeights wb = rv;
        wb.d2t.pop_back();
        CHECK_THROWS(save_draft(bad, wb), "map has 13 entries, draft_vocab is 14");
        wb = rv;
        wb.cfg.draft_vocab = c.vocab_size + 1;
        CHECK_THROWS(save_draft(bad, wb), "draft_vocab 41 outside");
    }
    // state layers (EAGLE-3-style fused states): the config key and W_mix round-trip; a file without the
    // key has no w_mix and the bytes of before; bad lists, a layer the target lacks and an EAGLE draft
    // with state layers are refused
    {
        DraftConfig sc = c;
        sc.state_layers = {1, 3};
        DraftWeights sw;
        sw.init_random(sc, 11);
        bool zero = true;
        for (float x : sw.t[DT_MIX]) zero = zero && x == 0.0f;
        CHECK(sw.t[DT_MIX].size() == (size_t)2 * c.dim * c.dim && zero, "W_mix: 2 dim x dim, zero at init");
        for (size_t i = 0; i < sw.t[DT_MIX].size(); i++) sw.t[DT_MIX][i] = 0.01f * (float)(i % 17);
        std::string sp = dir + "/sl.bdr";
        save_draft(sp, sw);
        DraftWeights sr = load_draft(sp);
        CHECK(sr.cfg.state_layers == sc.state_layers, "state layers round trip");
        for (int i = 0; i < DT_COUNT; i++) CHECK(sr.t[i] == sw.t[i], "tensor %d round trip (state layers)", i);
        CHECK(read_file(sp).find("state_layers 1,3\n") != std::string::npos, "config line 'state_layers 1,3'");
        CHECK(read_file(path).find("state_layers") == std::string::npos && !r.cfg.has(DT_MIX),
              "a draft without state layers has no key and no w_mix");
        std::string g = read_file(sp);
        const size_t at = g.find("state_layers 1,3");
        patch_and_fix(sp, bad, at + 13, "3,1", 3);  // not increasing
        CHECK_THROWS(load_draft(bad), "expected increasing layers");
        patch_and_fix(sp, bad, at + 13, "1,x", 3);
        CHECK_THROWS(load_draft(bad), "not a comma-separated list of layer numbers");
        LlamaConfig t2 = t;
        t2.n_layers = 3;  // layer 3 is not there
        CHECK_THROWS(check_draft_fits_target(sr.cfg, t2, tok, sp), "fuses the states of layer 3");
        DraftConfig ec = sc;
        ec.arch = ARCH_EAGLE;
        CHECK_THROWS(ec.validate("eagle"), "state layers are a Beagle or MoA draft's");
    }
    // bad metadata cannot be written
    {
        DraftWeights wb = w;
        wb.meta = {{"two words", "x"}};
        CHECK_THROWS(save_draft(bad, wb), "metadata");
    }

    // the real target, if present
    const char* model = getenv("BEAGLE_MODEL");
    if (model && file_exists(model)) {
        std::unique_ptr<ModelFile> mf = load_model(model);
        DraftConfig dc = draft_config_for_target(mf->config, mf->tokenizer, 256);
        CHECK(dc.dim == mf->config.dim && dc.vocab_size == mf->config.vocab_size && dc.ffn_dim == 256 &&
                  dc.tokenizer_hash != 0,
              "draft config for the target");
        check_draft_fits_target(dc, mf->config, mf->tokenizer, "smollm2-draft");
        CHECK_THROWS(check_draft_fits_target(r.cfg, mf->config, mf->tokenizer, path), "dim 16, this target has dim 576");
        DraftFrozen fz = frozen_from_target(*mf);
        CHECK(fz.embd.size() == (size_t)dc.vocab_size * dc.dim && fz.out_norm.size() == (size_t)dc.dim,
              "frozen tensor sizes");
        // spot-check the dequantized embedding against the stored row (independent reference: F32 norm)
        bool finite = true;
        for (size_t i = 0; i < fz.embd.size(); i += 997) finite = finite && std::isfinite(fz.embd[i]);
        CHECK(finite, "dequantized embedding is finite");
        DraftWeights dw;
        dw.init_random(dc, 1);
        save_draft(dir + "/smol.bdr", dw);
        DraftWeights dl = load_draft(dir + "/smol.bdr");
        check_draft_fits_target(dl.cfg, mf->config, mf->tokenizer, dir + "/smol.bdr");
        CpuOps ops(2);
        Draft d(dl, fz, ops, 64, 8, 4);
        TrainRng rng(3);
        std::vector<float> st(10 * dc.dim);
        for (float& x : st) x = (float)rng.normal();
        d.add_true_states(st.data(), 10);
        int tokq = 42, pos = 10;
        std::vector<float> fh(dc.dim), lg(dc.vocab_size);
        d.forward(&tokq, &pos, 1, nullptr, 0, fh.data(), lg.data());
        bool ok = true;
        for (float v : lg) ok = ok && std::isfinite(v);
        CHECK(ok, "draft logits on SmolLM2 are finite");
        // the target's stored (Q8_0) embedding/head instead of f32 tables: same f^ bits, close logits
        Draft dq(dl, frozen_from_target(*mf, false), ops, 64, 8, 4);
        dq.use_target_weights(ops.weight(mf->weights.tok_embd), ops.matmul_weight(mf->weights.lm_head));
        dq.add_true_states(st.data(), 10);
        std::vector<float> fh2(dc.dim), lg2(dc.vocab_size);
        double t0 = now_seconds();
        d.forward(&tokq, &pos, 1, nullptr, 0, fh.data(), lg.data());
        double t1 = now_seconds();
        dq.forward(&tokq, &pos, 1, nullptr, 0, fh2.data(), lg2.data());
        double t2 = now_seconds();
        CHECK(!memcmp(fh.data(), fh2.data(), dc.dim * 4), "f^ with the target's Q8_0 embedding != f32 table");
        double md = 0, mz = 0;
        for (int v = 0; v < dc.vocab_size; v++) {
            md = std::max(md, (double)std::fabs(lg[v] - lg2[v]));
            mz = std::max(mz, (double)std::fabs(lg[v]));
        }
        // the target's matmul quantizes activations to 8 bits: ~1% of the logit scale
        CHECK(md <= 0.02 * mz, "logits via the target's head differ by %g (scale %g)", md, mz);
        printf("draft step: f32 head %.1f ms, target Q8_0 head %.1f ms, max logit diff %.3g of %.3g\n",
               (t1 - t0) * 1e3, (t2 - t1) * 1e3, md, mz);
        // reduced vocabulary: its logits are exactly the full head's rows for d2t, with the f32 table
        // and with the target's stored (Q8_0) head gathered row by row
        DraftWeights rvw = dl;
        for (int t = 0; t < dc.vocab_size; t += 7) rvw.d2t.push_back(t);
        rvw.cfg.draft_vocab = (int)rvw.d2t.size();
        Draft dr(rvw, fz, ops, 64, 8, 4);
        Draft drq(rvw, frozen_from_target(*mf, false), ops, 64, 8, 4);
        drq.use_target_weights(ops.weight(mf->weights.tok_embd), ops.matmul_weight(mf->weights.lm_head));
        std::vector<float> fh3(dc.dim), lg3(rvw.d2t.size()), lg4(rvw.d2t.size());
        dr.add_true_states(st.data(), 10);
        drq.add_true_states(st.data(), 10);
        dr.forward(&tokq, &pos, 1, nullptr, 0, fh3.data(), lg3.data());
        CHECK(!memcmp(fh.data(), fh3.data(), dc.dim * 4), "f^ with a reduced vocabulary differs");
        drq.forward(&tokq, &pos, 1, nullptr, 0, nullptr, lg4.data());
        int bad3 = 0, bad4 = 0;
        for (size_t i = 0; i < rvw.d2t.size(); i++) {
            bad3 += lg3[i] != lg[rvw.d2t[i]];
            bad4 += lg4[i] != lg2[rvw.d2t[i]];
        }
        CHECK(bad3 == 0 && bad4 == 0, "reduced-vocabulary logits differ from the full head's rows: %d (f32), %d (Q8_0) of %zu",
              bad3, bad4, rvw.d2t.size());
        // Draft::use_q8_weights: the matrices from a Q8_0 copy. Each weight moves by <= max|w_block|/254
        // (+ the f16 rounding of d), ~0.6% rms of a Gaussian weight, so f^ (residual sums of a few such
        // matmuls) moves by well under 2%; more would mean a wrong layout, 0 that the copy is unused.
        Draft d8(dl, fz, ops, 64, 8, 4);
        d8.use_q8_weights(dl);
        d8.add_true_states(st.data(), 10);
        std::vector<float> fh8(dc.dim), lg8(dc.vocab_size);
        d8.forward(&tokq, &pos, 1, nullptr, 0, fh8.data(), lg8.data());
        double e2 = 0, n2 = 0;
        for (int i = 0; i < dc.dim; i++) {
            e2 += ((double)fh8[i] - fh[i]) * ((double)fh8[i] - fh[i]);
            n2 += (double)fh[i] * fh[i];
        }
        const double rel8 = std::sqrt(e2 / n2);
        CHECK(rel8 > 0 && rel8 < 0.02, "Q8_0 draft weights: f^ differs from the f32 forward by %.3g (rel L2), expected (0, 0.02)",
              rel8);
        printf("Q8_0 draft weights: f^ rel L2 diff %.3g from f32\n", rel8);
        printf("SmolLM2 draft: dim %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, tokenizer %016llx\n", dc.dim,
               dc.n_heads, dc.n_kv_heads, dc.head_dim, dc.ffn_dim, dc.vocab_size, (unsigned long long)dc.tokenizer_hash);
    } else {
        SKIP_PART("BEAGLE_MODEL (%s) not found (make model): the real-target part did not run", model ? model : "unset");
    }
    if (system(("rm -rf " + dir).c_str()) != 0) return 1;
    return test_summary("test_draft_file");
}
