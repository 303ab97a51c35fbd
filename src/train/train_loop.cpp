// train_loop.cpp: `beagle train` (see train_loop.h). The loop, top to bottom:
//   data items = sequences cut into chunks of --seq-len (pos0 offsets), order shuffled per epoch;
//   per optimizer step: zero_grads; for each of B items: trainer.run(item, offset ~ U[0, w),
//   noise seed, 1/B); AdamW step at lr(step); record the loss; checkpoint every N steps.
//   epochs [0, A) are stage 1, [A, A + B) stage 2. At the end: draft file, checkpoint, loss curve,
//   acceptance evaluation (chain and tree through generate_speculative), charts and a JSON summary.
// Every random draw comes from one of three seeded streams (shuffle, window offset, noise seed),
// whose states the checkpoint stores with the data order, step, epoch and AdamW moments; a resumed
// run therefore repeats the straight run's arithmetic exactly.
#include "train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "../backend/backend.h"
#include "../backend/ops.h"
#include "../core/common.h"
#include "../core/dtype.h"
#include "../core/progress.h"
#include "../core/threadpool.h"
#include "../data/dataset.h"
#include "../data/prompts.h"
#include "../decode/session.h"
#include "../io/model_file.h"
#include "adamw.h"
#include "plot.h"
#include "rng.h"
#include "trainer.h"

namespace beagle {

double default_lr(int dim) {
    // SPEC's 3e-5 is for 7B-class drafts (dim 4096); small widths train stably with much more.
    if (dim <= 128) return 3e-3;
    if (dim <= 1024) return 5e-4;
    if (dim <= 2048) return 1e-4;
    return 3e-5;
}

std::string Checkpoint::get(const std::string& key) const {
    for (auto& p : kv)
        if (p.first == key) return p.second;
    return "";
}

// ---- checkpoint file -----------------------------------------------------------------------------

static const char kCkMagic[8] = {'B', 'E', 'A', 'G', 'L', 'E', 'C', 'K'};

static void put_bytes(std::vector<uint8_t>& b, const void* p, size_t n) {
    b.insert(b.end(), (const uint8_t*)p, (const uint8_t*)p + n);
}

void save_checkpoint(const std::string& path, const Checkpoint& c, const DraftConfig& cfg) {
    std::string text;
    for (auto& p : c.kv) text += p.first + " " + p.second + "\n";
    std::vector<uint8_t> b;
    put_bytes(b, kCkMagic, 8);
    uint32_t ver = 1, tl = (uint32_t)text.size();
    uint64_t fsize = 0;
    put_bytes(b, &ver, 4);
    put_bytes(b, &tl, 4);
    put_bytes(b, &fsize, 8);
    put_bytes(b, text.data(), text.size());
    for (const std::vector<float>* set : {c.w, c.m, c.v})
        for (int i = 0; i < DT_COUNT; i++) {
            BEAGLE_CHECK((int64_t)set[i].size() == cfg.numel(i), "checkpoint: tensor %s has %zu values, expected %lld",
                         draft_tensor_name(i), set[i].size(), (long long)cfg.numel(i));
            put_bytes(b, set[i].data(), set[i].size() * 4);
        }
    put_bytes(b, c.order.data(), c.order.size() * 4);
    for (const StepRecord& r : c.history) {
        put_bytes(b, &r.loss, 4);
        put_bytes(b, &r.ce, 4);
        put_bytes(b, &r.vloss, 4);
        int32_t st = r.stage;
        put_bytes(b, &st, 4);
    }
    fsize = b.size() + 4;
    memcpy(&b[16], &fsize, 8);
    uint32_t crc = crc32_update(0, b.data(), b.size());
    put_bytes(b, &crc, 4);
    write_file_atomic(path, b.data(), b.size());
}

static long kv_long(const Checkpoint& c, const std::string& path, const char* key) {
    std::string v = c.get(key);
    char* end = nullptr;
    long x = strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || x < 0 || x > INT32_MAX)  // dims are cast to int: 2^32 + 8 must not read as 8
        fail("%s: checkpoint key '%s': expected a count in 0..2^31-1, found '%s'", path.c_str(), key, v.c_str());
    return x;
}

Checkpoint load_checkpoint(const std::string& path) {
    MappedFile mf(path);
    const uint8_t* p = mf.data;
    size_t n = mf.size;
    if (n < 28 || memcmp(p, kCkMagic, 8) != 0)
        fail("%s: not a Beagle training checkpoint (bad magic or shorter than its 24-byte header)", path.c_str());
    uint32_t ver, tl;
    uint64_t fsize;
    memcpy(&ver, p + 8, 4);
    memcpy(&tl, p + 12, 4);
    memcpy(&fsize, p + 16, 8);
    if (ver != 1) fail("%s: checkpoint version %u, this build reads version 1", path.c_str(), ver);
    if (fsize != n) fail("%s: truncated or padded: header says %llu bytes, file has %zu", path.c_str(), (unsigned long long)fsize, n);
    uint32_t want, crc = crc32_update(0, p, n - 4);
    memcpy(&want, p + n - 4, 4);
    if (crc != want) fail("%s: checksum mismatch (file corrupt): stored %08x, computed %08x", path.c_str(), want, crc);
    if ((uint64_t)24 + tl > n - 4) fail("%s: config text of %u bytes runs past the end of the file", path.c_str(), tl);
    Checkpoint c;
    std::string text((const char*)p + 24, tl);
    size_t b = 0;
    while (b < text.size()) {
        size_t e = text.find('\n', b);
        if (e == std::string::npos) e = text.size();
        std::string l = text.substr(b, e - b);
        b = e + 1;
        if (l.empty()) continue;
        size_t sp = l.find(' ');
        if (sp == std::string::npos) fail("%s: bad checkpoint config line '%s'", path.c_str(), l.c_str());
        c.kv.emplace_back(l.substr(0, sp), l.substr(sp + 1));
    }
    DraftConfig cfg;
    cfg.dim = (int)kv_long(c, path, "dim");
    cfg.n_heads = (int)kv_long(c, path, "n_heads");
    cfg.n_kv_heads = (int)kv_long(c, path, "n_kv_heads");
    cfg.head_dim = (int)kv_long(c, path, "head_dim");
    cfg.ffn_dim = (int)kv_long(c, path, "ffn_dim");
    cfg.vocab_size = (int)kv_long(c, path, "vocab");
    cfg.validate(path.c_str());
    uint64_t items = (uint64_t)kv_long(c, path, "items"), hist = (uint64_t)kv_long(c, path, "n_history");
    uint64_t need = 24 + tl;
    for (int i = 0; i < DT_COUNT; i++) need = checked_add(need, checked_mul((uint64_t)cfg.numel(i), 12, "checkpoint"), "checkpoint");
    need = checked_add(need, checked_mul(items, 4, "checkpoint"), "checkpoint");
    need = checked_add(need, checked_mul(hist, 16, "checkpoint"), "checkpoint");
    if (need + 4 != n)
        fail("%s: size %zu does not match its config (%llu bytes expected for %llu items, %llu steps)", path.c_str(), n,
             (unsigned long long)(need + 4), (unsigned long long)items, (unsigned long long)hist);
    size_t off = 24 + tl;
    for (std::vector<float>* set : {c.w, c.m, c.v})
        for (int i = 0; i < DT_COUNT; i++) {
            set[i].resize((size_t)cfg.numel(i));
            memcpy(set[i].data(), p + off, set[i].size() * 4);
            off += set[i].size() * 4;
        }
    c.order.resize(items);
    memcpy(c.order.data(), p + off, items * 4);
    off += items * 4;
    c.history.resize(hist);
    for (StepRecord& r : c.history) {
        int32_t st;
        memcpy(&r.loss, p + off, 4);
        memcpy(&r.ce, p + off + 4, 4);
        memcpy(&r.vloss, p + off + 8, 4);
        memcpy(&st, p + off + 12, 4);
        r.stage = st;
        off += 16;
    }
    for (uint32_t x : c.order)
        if (x >= items) fail("%s: data order entry %u outside [0, %llu)", path.c_str(), x, (unsigned long long)items);
    return c;
}

// ---- reduced vocabulary (EAGLE-3 style) ----------------------------------------------------------
std::vector<int32_t> reduced_vocab(const Dataset& ds, int n, bool loss_on_prompt, bool quiet, const std::vector<int32_t>* keep) {
    BEAGLE_CHECK(n >= 1 && n <= ds.vocab(), "beagle train: --draft-vocab must be in 1..%d (the vocabulary), got %d",
                 ds.vocab(), n);
    std::vector<int64_t> count(ds.vocab(), 0);
    int64_t total = 0;
    for (size_t i = 0; i < ds.n_seqs(); i++) {
        SeqView v = ds.seq(i);
        for (int j = std::max(1, loss_on_prompt ? 1 : v.n_prompt); j < v.len; j++) {  // tokens the draft predicts
            BEAGLE_CHECK(v.tokens[j] >= 0 && v.tokens[j] < ds.vocab(), "data: token %d outside the vocabulary", v.tokens[j]);
            count[v.tokens[j]]++;
            total++;
        }
    }
    std::vector<int32_t> ids(ds.vocab());
    for (int i = 0; i < ds.vocab(); i++) ids[i] = i;
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return count[a] > count[b]; });
    ids.resize(n);
    if (keep) ids = *keep;  // continued training: the init draft's vocabulary (checked by the caller)
    int64_t covered = 0;
    for (int32_t t : ids) covered += count[t];
    std::sort(ids.begin(), ids.end());
    if (!quiet)
        fprintf(stderr, "train: reduced draft vocabulary: %s %d tokens cover %.2f%% of %lld training targets\n",
                keep ? "the --init draft's" : "the most frequent", n, total ? 100.0 * covered / total : 0.0, (long long)total);
    return ids;
}

// ---- evaluation ----------------------------------------------------------------------------------

AcceptEval eval_acceptance(Session& s, const DraftWeights& dw, const std::vector<std::vector<int>>& prompts, int n,
                           const BeagleDraftParams& p) {
    check_draft_fits_target(dw.cfg, s.mf->config, s.tok->spec(), "(the trained draft)");
    DraftFrozen fz = frozen_from_target(*s.mf, false);
    std::unique_ptr<Drafter> d = make_beagle_drafter(dw, fz, s, p);
    SamplingParams sp;
    sp.temperature = 0;
    SpecParams spp;
    spp.max_tree = std::max(64, p.tree ? p.total_tokens : p.gamma + 1);
    AcceptEval r;
    std::vector<int> acc;
    double t0 = now_seconds();
    for (const std::vector<int>& pr : prompts) {
        int room = s.llama->ctx() - (int)pr.size() - spp.max_tree - 1;
        int m = std::min(n, room);
        if (m < 1) continue;
        SpecStats st;
        generate_speculative(s, *d, pr, m, sp, spp, nullptr, &st);
        r.prompts++;
        r.rounds += st.rounds;
        r.tokens += st.gen_tokens_after_root;
        if (r.reached_by_depth.size() < st.reached_by_depth.size()) {
            r.reached_by_depth.resize(st.reached_by_depth.size());
            acc.resize(st.reached_by_depth.size());
        }
        for (size_t k = 0; k < st.reached_by_depth.size(); k++) {
            r.reached_by_depth[k] += st.reached_by_depth[k];
            acc[k] += st.accept_by_depth[k];
        }
    }
    r.seconds = now_seconds() - t0;
    r.tau = r.rounds ? (double)r.tokens / r.rounds : 1.0;
    for (size_t k = 0; k < acc.size(); k++)
        r.accept_by_depth.push_back(r.reached_by_depth[k] ? (double)acc[k] / r.reached_by_depth[k] : 0.0);
    return r;
}

// ---- the loop ------------------------------------------------------------------------------------

namespace {

struct Item {
    uint32_t seq;
    int start, len;
};

// Seed of random stream `k` of a run (independent splitmix64 streams).
uint64_t stream_seed(uint64_t seed, uint64_t k) {
    TrainRng r(seed ^ (0xA0761D6478BD642FULL * (k + 1)));
    return r.next();
}

std::string json_str(const std::string& s) {
    std::string o = "\"";
    for (unsigned char ch : s) {
        if (ch == '"' || ch == '\\') o += '\\', o += (char)ch;
        else if (ch < 0x20) o += strfmt("\\u%04x", ch);
        else o += (char)ch;
    }
    return o + "\"";
}

std::string json_arr(const std::vector<double>& v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); i++) o += strfmt("%s%.4f", i ? ", " : "", v[i]);
    return o + "]";
}

std::string json_arr(const std::vector<int>& v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); i++) o += strfmt("%s%d", i ? ", " : "", v[i]);
    return o + "]";
}

std::string eval_json(const AcceptEval& e) {
    return strfmt("{\"tau\": %.4f, \"rounds\": %d, \"tokens\": %d, \"prompts\": %d, \"accept_by_depth\": %s, "
                  "\"reached_by_depth\": %s, \"seconds\": %.2f}",
                  e.tau, e.rounds, e.tokens, e.prompts, json_arr(e.accept_by_depth).c_str(),
                  json_arr(e.reached_by_depth).c_str(), e.seconds);
}

// mean of the last k records of one stage (0 = every stage)
double tail_mean(const std::vector<StepRecord>& h, int stage, int k, float StepRecord::*field) {
    double s = 0;
    int n = 0;
    for (size_t i = h.size(); i-- > 0 && n < k;)
        if (stage == 0 || h[i].stage == stage) s += h[i].*field, n++;
    return n ? s / n : NAN;
}

std::vector<double> moving_average(const std::vector<double>& y, int k) {
    std::vector<double> o(y.size());
    double s = 0;
    for (size_t i = 0; i < y.size(); i++) {
        s += y[i];
        if (i >= (size_t)k) s -= y[i - k];
        o[i] = s / std::min<size_t>(i + 1, k);
    }
    return o;
}

}  // namespace

TrainResult run_train(const TrainLoopOptions& o) {
    BEAGLE_CHECK(!o.model.empty(), "beagle train: -m MODEL is required");
    BEAGLE_CHECK(!o.data.empty(), "beagle train: --data DIR is required (make it with beagle datagen)");
    BEAGLE_CHECK(!o.out.empty(), "beagle train: -o DRAFT is required");
    BEAGLE_CHECK(o.stage1_epochs >= 0 && o.stage2_epochs >= 0 && o.stage1_epochs + o.stage2_epochs >= 1,
                 "beagle train: need --stage1-epochs + --stage2-epochs >= 1 (got %d + %d)", o.stage1_epochs, o.stage2_epochs);
    BEAGLE_CHECK(o.w >= 1 && o.w <= 64, "beagle train: --window must be in 1..64, got %d", o.w);
    if (o.stage2_epochs > 0)
        BEAGLE_CHECK(o.S >= 1 && o.S <= o.w, "beagle train: stage 2 needs 1 <= --sim-steps <= --window, got %d and %d", o.S, o.w);
    BEAGLE_CHECK(o.batch >= 1 && o.batch <= 4096, "beagle train: --batch must be in 1..4096, got %d", o.batch);
    BEAGLE_CHECK(o.seq_len >= 2, "beagle train: --seq-len must be >= 2, got %d", o.seq_len);
    BEAGLE_CHECK(o.lr >= 0 && std::isfinite(o.lr), "beagle train: --lr must be >= 0, got %g", o.lr);
    BEAGLE_CHECK(o.lr_decay >= 0 && o.lr_decay <= 1, "beagle train: --lr-decay must be in [0, 1], got %g", o.lr_decay);
    BEAGLE_CHECK(o.clip >= 0 && o.weight_decay >= 0 && o.noise >= 0 && o.w_v >= 0,
                 "beagle train: --clip, --weight-decay, --noise, --vloss-weight must be >= 0");
    BEAGLE_CHECK(o.max_steps >= 0 && o.ckpt_every >= 0, "beagle train: --max-steps and --ckpt-every must be >= 0");
    BEAGLE_CHECK(o.ffn_dim >= 0, "beagle train: --ffn must be >= 0, got %d", o.ffn_dim);
    const std::string ckpt_path = o.ckpt.empty() ? o.out + ".ckpt" : o.ckpt;
    double t_start = now_seconds();

    // target (frozen tensors) and data
    std::unique_ptr<ModelFile> mf = load_model(o.model);
    TokenizerSpec spec = o.tokenizer.empty() ? mf->tokenizer : load_tokenizer_file(o.tokenizer);
    uint64_t tok_hash = tokenizer_fingerprint(spec);
    Dataset ds(o.data);
    ds.check_fits(mf->config.dim, mf->config.vocab_size, tok_hash, o.model);
    DraftConfig cfg = draft_config_for_target(mf->config, spec, o.ffn_dim);
    DraftFrozen fz = frozen_from_target(*mf, true);
    std::vector<int32_t> d2t;
    DraftWeights iw;  // --init: continued training keeps the init draft's reduced vocabulary
    if (!o.init.empty()) iw = load_draft(o.init);
    if (o.draft_vocab > 0) {
        bool keep = !o.init.empty() && iw.cfg.draft_vocab == o.draft_vocab;
        d2t = reduced_vocab(ds, o.draft_vocab, o.loss_on_prompt, o.quiet, keep ? &iw.d2t : nullptr);
        cfg.draft_vocab = (int)d2t.size();
    }

    std::vector<Item> items;
    for (size_t i = 0; i < ds.n_seqs(); i++) {
        SeqView v = ds.seq(i);
        for (int s0 = 0; s0 < v.len; s0 += o.seq_len) {
            int len = std::min(o.seq_len, v.len - s0);
            // a chunk is useful if some row q >= 1 (it has a true state before it) is a loss row
            int first_loss = std::max(1, o.loss_on_prompt ? 0 : v.n_prompt - s0);
            if (first_loss < len) items.push_back({(uint32_t)i, s0, len});
        }
    }
    if (items.empty()) fail("data in '%s' has no sequence with a generated part to train on", o.data.c_str());
    const int n_items = (int)items.size();
    const int E = o.stage1_epochs + o.stage2_epochs;
    const long steps_per_epoch = (n_items + o.batch - 1) / o.batch;
    const long total_steps = steps_per_epoch * E;
    const long stop_at = o.max_steps > 0 ? std::min(o.max_steps, total_steps) : total_steps;
    const double lr = o.lr > 0 ? o.lr : default_lr(cfg.dim);
    const long warmup = o.warmup >= 0 ? o.warmup : std::min<long>(2000, std::max<long>(1, total_steps / 20));

    // the run's config: a checkpoint from any other config is refused
    std::vector<std::pair<std::string, std::string>> config = {
        {"format", "beagle-train-ckpt 1"},
        {"dim", std::to_string(cfg.dim)},
        {"n_heads", std::to_string(cfg.n_heads)},
        {"n_kv_heads", std::to_string(cfg.n_kv_heads)},
        {"head_dim", std::to_string(cfg.head_dim)},
        {"ffn_dim", std::to_string(cfg.ffn_dim)},
        {"vocab", std::to_string(cfg.vocab_size)},
        {"draft_vocab", std::to_string(cfg.draft_vocab)},
        {"tokenizer_hash", strfmt("%016llx", (unsigned long long)tok_hash)},
        {"data_seqs", std::to_string(ds.n_seqs())},
        {"data_tokens", std::to_string(ds.n_tokens())},
        {"items", std::to_string(n_items)},
        {"stage1_epochs", std::to_string(o.stage1_epochs)},
        {"stage2_epochs", std::to_string(o.stage2_epochs)},
        {"window", std::to_string(o.w)},
        {"sim_steps", std::to_string(o.S)},
        {"sim_grad_through", o.sim_grad_through ? "1" : "0"},
        {"lr", strfmt("%.9g", lr)},
        {"warmup", std::to_string(warmup)},
        {"clip", strfmt("%.9g", o.clip)},
        {"weight_decay", strfmt("%.9g", o.weight_decay)},
        {"batch", std::to_string(o.batch)},
        {"seq_len", std::to_string(o.seq_len)},
        {"seed", std::to_string(o.seed)},
        {"noise", strfmt("%.9g", o.noise)},
        {"vloss_weight", strfmt("%.9g", o.w_v)},
        {"hard_labels", o.hard_labels ? "1" : "0"},
        {"loss_on_prompt", o.loss_on_prompt ? "1" : "0"},
    };
    const long decay_steps = (long)std::lround(o.lr_decay * (double)total_steps);
    if (decay_steps > 0) config.push_back({"lr_decay_steps", std::to_string(decay_steps)});  // absent: constant lr
    if (!o.init.empty()) config.push_back({"init", o.init});

    // state
    int threads = o.threads > 0 ? o.threads : default_threads();
    std::unique_ptr<Ops> ops = make_ops("", threads);
    DraftWeights dw;
    dw.init_random(cfg, o.seed);
    dw.d2t = d2t;
    if (!o.init.empty()) {  // warm start (continued training): same shapes and the same reduced vocabulary
        const DraftConfig& a = iw.cfg;
        if (a.dim != cfg.dim || a.n_heads != cfg.n_heads || a.n_kv_heads != cfg.n_kv_heads || a.head_dim != cfg.head_dim ||
            a.ffn_dim != cfg.ffn_dim || a.vocab_size != cfg.vocab_size || a.draft_vocab != cfg.draft_vocab)
            fail("--init '%s': draft config (dim %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, draft_vocab %d) does not "
                 "match this run's (dim %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, draft_vocab %d)",
                 o.init.c_str(), a.dim, a.n_heads, a.n_kv_heads, a.head_dim, a.ffn_dim, a.vocab_size, a.draft_vocab,
                 cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn_dim, cfg.vocab_size, cfg.draft_vocab);
        if (iw.d2t != d2t)  // cannot happen (d2t was taken from it); kept as the invariant's check
            fail("--init '%s': its reduced vocabulary differs from this run's", o.init.c_str());
        for (int k = 0; k < DT_COUNT; k++) dw.t[k] = iw.t[k];
        if (!o.quiet) printf("train: weights from '%s' (warm start)\n", o.init.c_str());
    }
    DraftModelT<Ops> model(*ops, dw, fz);
    model.enable_grads();
    AdamWOptions ao;
    ao.lr = (float)lr;
    ao.warmup = (int)warmup;
    ao.decay_from = (int)(total_steps - decay_steps);
    ao.decay_to = (int)total_steps;
    ao.clip = (float)o.clip;
    ao.weight_decay = (float)o.weight_decay;
    AdamW adam(model, ao);
    TrainRng shuffle_rng(stream_seed(o.seed, 1)), offset_rng(stream_seed(o.seed, 2)), noise_rng(stream_seed(o.seed, 3));
    std::vector<uint32_t> order(n_items);
    for (int i = 0; i < n_items; i++) order[i] = (uint32_t)i;
    auto shuffle = [&]() {
        for (int i = n_items - 1; i > 0; i--) std::swap(order[i], order[shuffle_rng.below(i + 1)]);
    };
    long step = 0;
    int epoch = 0, pos = 0;
    double train_seconds = 0;
    int64_t tokens_seen = 0;
    std::vector<StepRecord> history;
    TrainResult res;

    if (!o.resume.empty()) {
        Checkpoint ck = load_checkpoint(o.resume);
        for (auto& kv : config) {
            std::string have = ck.get(kv.first);
            if (have != kv.second)
                fail("checkpoint '%s' was made with %s = %s, this run has %s = %s (use the same data and flags, or start "
                     "afresh without --resume)",
                     o.resume.c_str(), kv.first.c_str(), have.empty() ? "(absent)" : have.c_str(), kv.first.c_str(),
                     kv.second.c_str());
        }
        for (int i = 0; i < DT_COUNT; i++) {
            dw.t[i] = ck.w[i];
            ops->upload(adam.m(i), ck.m[i].data(), ck.m[i].size());
            ops->upload(adam.v(i), ck.v[i].data(), ck.v[i].size());
        }
        model.set_weights(dw);
        step = kv_long(ck, o.resume, "step");
        epoch = (int)kv_long(ck, o.resume, "epoch");
        pos = (int)kv_long(ck, o.resume, "pos");
        adam.set_steps((int)kv_long(ck, o.resume, "adam_steps"));
        shuffle_rng.s = std::stoull(ck.get("rng_shuffle"), nullptr, 16);
        offset_rng.s = std::stoull(ck.get("rng_offset"), nullptr, 16);
        noise_rng.s = std::stoull(ck.get("rng_noise"), nullptr, 16);
        train_seconds = std::atof(ck.get("train_seconds").c_str());
        tokens_seen = std::atoll(ck.get("tokens_seen").c_str());
        order = ck.order;
        history = ck.history;
        if (epoch > E || pos > n_items || (long)history.size() != step)
            fail("checkpoint '%s' is inconsistent (epoch %d of %d, position %d of %d, %zu loss records for step %ld)",
                 o.resume.c_str(), epoch, E, pos, n_items, history.size(), step);
        if (!o.quiet) fprintf(stderr, "train: resumed from %s at step %ld (epoch %d, item %d)\n", o.resume.c_str(), step, epoch + 1, pos);
    } else {
        shuffle();
    }
    std::string last_good = o.resume.empty() ? "" : strfmt("%s (step %ld)", o.resume.c_str(), step);

    auto write_ckpt = [&]() {
        Checkpoint ck;
        ck.kv = config;
        ck.kv.push_back({"step", std::to_string(step)});
        ck.kv.push_back({"epoch", std::to_string(epoch)});
        ck.kv.push_back({"pos", std::to_string(pos)});
        ck.kv.push_back({"adam_steps", std::to_string(adam.steps())});
        ck.kv.push_back({"rng_shuffle", strfmt("%016llx", (unsigned long long)shuffle_rng.s)});
        ck.kv.push_back({"rng_offset", strfmt("%016llx", (unsigned long long)offset_rng.s)});
        ck.kv.push_back({"rng_noise", strfmt("%016llx", (unsigned long long)noise_rng.s)});
        ck.kv.push_back({"train_seconds", strfmt("%.3f", train_seconds)});
        ck.kv.push_back({"tokens_seen", std::to_string(tokens_seen)});
        ck.kv.push_back({"n_history", std::to_string(history.size())});
        DraftWeights cur;
        model.get_weights(&cur);
        for (int i = 0; i < DT_COUNT; i++) {
            ck.w[i] = cur.t[i];
            ck.m[i].resize((size_t)cfg.numel(i));
            ck.v[i].resize((size_t)cfg.numel(i));
            ops->download(ck.m[i].data(), adam.m(i), ck.m[i].size());
            ops->download(ck.v[i].data(), adam.v(i), ck.v[i].size());
        }
        ck.order = order;
        ck.history = history;
        save_checkpoint(ckpt_path, ck, cfg);
        last_good = strfmt("%s (step %ld)", ckpt_path.c_str(), step);
    };

    if (!o.quiet) {
        int64_t params = 0;
        for (int i = 0; i < DT_COUNT; i++) params += cfg.numel(i);
        fprintf(stderr,
                "train: %zu sequences (%lld tokens) -> %d items of <= %d tokens; %d + %d epochs x %ld steps of batch %d = "
                "%ld steps%s; draft %lld params (ffn %d); lr %g, warm-up %ld, window %d, sim steps %d, %d threads\n",
                ds.n_seqs(), (long long)ds.n_tokens(), n_items, o.seq_len, o.stage1_epochs, o.stage2_epochs,
                steps_per_epoch, o.batch, total_steps, stop_at < total_steps ? strfmt(" (stopping at %ld)", stop_at).c_str() : "",
                (long long)params, cfg.ffn_dim, lr, warmup, o.w, o.S, threads);
    }

    // debug hook (tests): BEAGLE_DEBUG_NAN_STEP=N poisons one input state of step N with NaN
    long nan_step = -1;
    if (const char* e = getenv("BEAGLE_DEBUG_NAN_STEP")) nan_step = atol(e);

    std::unique_ptr<DraftTrainer> trainer;
    int trainer_stage = 0;
    std::vector<float> states;
    std::vector<uint8_t> lmask;
    std::unique_ptr<Progress> prog;
    const long step0 = step;  // the bar counts this process's steps (its rate and ETA stay right after a resume)
    if (!o.quiet) prog.reset(new Progress(step0 ? strfmt("train (from step %ld)", step0) : "train", stop_at - step0, "step"));
    double t_loop = now_seconds(), t_seg = t_loop;
    int64_t seg_tokens = 0, run_tokens = 0;  // since the last checkpoint; since this process started
    while (step < stop_at) {
        if (pos >= n_items) {  // next epoch
            epoch++;
            pos = 0;
            if (epoch >= E) break;
            shuffle();
        }
        int stage = epoch < o.stage1_epochs ? 1 : 2;
        if (stage != trainer_stage) {
            TrainOptions to;
            to.stage = stage;
            to.w = o.w;
            to.S = o.S;
            to.sim_grad_through = o.sim_grad_through;
            to.noise_std = (float)o.noise;
            to.loss.w_v = (float)o.w_v;
            to.loss.hard_labels = o.hard_labels;
            trainer.reset(new DraftTrainer(model, to));
            trainer_stage = stage;
        }
        int nb = std::min(o.batch, n_items - pos);
        model.zero_grads();
        double loss = 0, ce = 0, vl = 0;
        for (int k = 0; k < nb; k++) {
            const Item& it = items[order[pos + k]];
            SeqView v = ds.seq(it.seq);
            states.resize((size_t)it.len * cfg.dim);
            const uint16_t* src = v.states + (size_t)it.start * cfg.dim;
            for (size_t i = 0; i < states.size(); i++) states[i] = f16_to_f32(src[i]);
            if (step + 1 == nan_step && k == 0) states[(size_t)(it.len - 1) * cfg.dim] = NAN;
            lmask.resize(it.len);
            for (int r = 0; r < it.len; r++) lmask[r] = o.loss_on_prompt || it.start + r >= v.n_prompt;
            TrainBatch b;
            b.tokens = v.tokens + it.start;
            b.states = states.data();
            b.loss_mask = lmask.data();
            b.T = it.len;
            b.pos0 = it.start;
            int offset = offset_rng.below(o.w);
            uint64_t noise_seed = noise_rng.next();
            IterStats st = trainer->run(b, offset, noise_seed, 1.0f / nb, true);
            loss += st.loss / nb;
            ce += st.ce / nb;
            vl += st.vloss / nb;
            seg_tokens += it.len;
            run_tokens += it.len;
        }
        if (!std::isfinite(loss))
            fail("training stopped: the loss is %g at step %ld (epoch %d, stage %d); the weights were not updated. Last "
                 "good checkpoint: %s",
                 loss, step + 1, epoch + 1, stage, last_good.empty() ? "none written yet (raise the checkpoint rate with --ckpt-every)" : last_good.c_str());
        try {
            adam.step();
        } catch (const Error& e) {
            fail("training stopped at step %ld (epoch %d, stage %d): %s. Last good checkpoint: %s", step + 1, epoch + 1,
                 stage, e.what(), last_good.empty() ? "none written yet" : last_good.c_str());
        }
        step++;
        pos += nb;
        history.push_back({(float)loss, (float)ce, (float)vl, stage});
        if (o.ckpt_every > 0 && step % o.ckpt_every == 0 && step < stop_at) {
            double now = now_seconds();
            train_seconds += now - t_seg;
            tokens_seen += seg_tokens;
            t_seg = now;
            seg_tokens = 0;
            write_ckpt();
        }
        if (prog) {
            double el = now_seconds() - t_loop;
            prog->update(step - step0, strfmt("ep %d/%d st %d  loss %.4f (ce %.3f vl %.3f)  %.0f tok/s", epoch + 1, E, stage,
                                      tail_mean(history, 0, 20, &StepRecord::loss), tail_mean(history, 0, 20, &StepRecord::ce),
                                      tail_mean(history, 0, 20, &StepRecord::vloss),
                                      el > 0 ? (double)run_tokens / el : 0.0));
        }
    }
    train_seconds += now_seconds() - t_seg;
    tokens_seen += seg_tokens;
    write_ckpt();
    if (prog)
        prog->finish(strfmt("loss %.4f, %lld tokens, %.1f s", tail_mean(history, 0, 20, &StepRecord::loss),
                            (long long)tokens_seen, train_seconds));

    // the draft file
    DraftWeights final_w;
    model.get_weights(&final_w);
    final_w.meta = {
        {"trained_by", "beagle train"},
        {"target", o.model},
        {"data", o.data},
        {"data_tokens", std::to_string(ds.n_tokens())},
        {"steps", std::to_string(step)},
        {"epochs", strfmt("%d+%d", o.stage1_epochs, o.stage2_epochs)},
        {"window", std::to_string(o.w)},
        {"sim_steps", std::to_string(o.S)},
        {"lr", strfmt("%g", lr)},
        {"batch", std::to_string(o.batch)},
        {"seed", std::to_string(o.seed)},
    };
    save_draft(o.out, final_w);
    res.history = history;
    res.steps = (int)step;
    res.draft_path = o.out;

    // loss curve
    res.loss_png = o.out + ".loss.png";
    {
        LineChart lc;
        lc.title = "Beagle draft training loss";
        lc.xlabel = "optimizer step";
        lc.ylabel = "loss (CE + w_v * SmoothL1)";
        std::vector<double> x, y, yce;
        for (size_t i = 0; i < history.size(); i++) {
            x.push_back((double)(i + 1));
            y.push_back(history[i].loss);
            yce.push_back(history[i].ce);
        }
        int k = std::max<int>(1, (int)history.size() / 50);
        if (k > 1) lc.series.push_back({"loss per step", x, y, 0xb0c8e8, 1});
        std::string avg = k > 1 ? strfmt(", mean of %d steps", k) : "";
        lc.series.push_back({"loss" + avg, x, moving_average(y, k), 0x1f5fb4, 3});
        lc.series.push_back({"CE part" + avg, x, moving_average(yce, k), 0xd9661f, 2});
        for (size_t i = 1; i < history.size(); i++)
            if (history[i].stage != history[i - 1].stage) lc.vlines.push_back({(double)i + 0.5, "stage 2"});
        write_line_chart(res.loss_png, lc);
        std::string tsv = "step\tstage\tloss\tce\tvloss\n";
        for (size_t i = 0; i < history.size(); i++)
            tsv += strfmt("%zu\t%d\t%.6f\t%.6f\t%.6f\n", i + 1, history[i].stage, history[i].loss, history[i].ce, history[i].vloss);
        write_file_atomic(o.out + ".loss.tsv", tsv.data(), tsv.size());
    }

    // acceptance on held-out prompts
    double eval_seconds = 0;
    bool eval_chat = false;
    if (!o.eval_prompts.empty()) {
        double te = now_seconds();
        Session s(o.model, o.tokenizer, threads, 0, 64);
        std::vector<Prompt> ps = load_prompts(o.eval_prompts);
        std::vector<std::vector<int>> prompts;
        eval_chat = !o.eval_no_chat && !s.tok->spec().chat_template.empty();  // as beagle datagen does
        for (size_t i = 0; i < ps.size() && (int)prompts.size() < o.eval_n; i++)
            prompts.push_back(s.encode_prompt(ps[i].text, eval_chat, ""));
        BEAGLE_CHECK(!prompts.empty(), "no evaluation prompts in '%s'", o.eval_prompts.c_str());
        BeagleDraftParams chain, tree;
        chain.tree = false;
        chain.gamma = o.gamma;
        tree.tree = true;
        tree.depth = o.depth;
        tree.topk = o.topk;
        tree.total_tokens = o.total_tokens;
        chain.concat = tree.concat = !o.eval_no_concat;
        res.chain = eval_acceptance(s, final_w, prompts, o.eval_tokens, chain);
        res.tree = eval_acceptance(s, final_w, prompts, o.eval_tokens, tree);
        res.evaluated = true;
        eval_seconds = now_seconds() - te;
        res.accept_png = o.out + ".accept.png";
        BarChart bc;
        bc.title = strfmt("Acceptance by depth (%d prompts, greedy): tau chain %.2f, tree %.2f", res.tree.prompts,
                          res.chain.tau, res.tree.tau);
        bc.xlabel = "draft depth (rate = accepted / reached, given the path so far)";
        bc.ylabel = "acceptance rate";
        bc.ymax = 1.1;
        size_t D = std::max(res.chain.accept_by_depth.size(), res.tree.accept_by_depth.size());
        for (size_t d = 0; d < D; d++) bc.categories.push_back(strfmt("depth %zu", d + 1));
        std::vector<double> cv(res.chain.accept_by_depth), tv(res.tree.accept_by_depth);
        cv.resize(D, NAN);
        tv.resize(D, NAN);
        bc.groups.push_back({strfmt("chain (gamma %d)", o.gamma), cv, 0x4c72b0});
        bc.groups.push_back({strfmt("tree (depth %d, top-k %d, %d nodes)", o.depth, o.topk, o.total_tokens), tv, 0xdd8452});
        write_bar_chart(res.accept_png, bc);
        if (!o.quiet)
            fprintf(stderr, "eval: %d prompts x %d tokens: tau chain %.3f (accept by depth %s), tree %.3f (%s)\n",
                    res.tree.prompts, o.eval_tokens, res.chain.tau, json_arr(res.chain.accept_by_depth).c_str(), res.tree.tau,
                    json_arr(res.tree.accept_by_depth).c_str());
    }

    // JSON summary
    res.json_path = o.out + ".json";
    {
        std::string cfgj = "{";
        for (size_t i = 0; i < config.size(); i++) {
            const std::string& v = config[i].second;
            bool num = !v.empty() && v.find_first_not_of("0123456789.-+e") == std::string::npos && config[i].first != "tokenizer_hash";
            cfgj += strfmt("%s%s: %s", i ? ", " : "", json_str(config[i].first).c_str(), num ? v.c_str() : json_str(v).c_str());
        }
        cfgj += "}";
        std::string js = "{\n";
        js += strfmt("  \"draft\": %s,\n  \"target\": %s,\n  \"data\": %s,\n", json_str(o.out).c_str(), json_str(o.model).c_str(),
                     json_str(o.data).c_str());
        js += strfmt("  \"config\": %s,\n", cfgj.c_str());
        js += strfmt("  \"data_seqs\": %zu, \"data_tokens\": %lld, \"items\": %d,\n", ds.n_seqs(), (long long)ds.n_tokens(), n_items);
        js += strfmt("  \"epochs\": [%d, %d], \"steps\": %ld, \"steps_per_epoch\": %ld, \"tokens_trained\": %lld,\n",
                     o.stage1_epochs, o.stage2_epochs, step, steps_per_epoch, (long long)tokens_seen);
        js += strfmt("  \"train_seconds\": %.1f, \"eval_seconds\": %.1f, \"threads\": %d,\n", train_seconds, eval_seconds, threads);
        auto num = [](double x) { return std::isfinite(x) ? strfmt("%.5f", x) : std::string("null"); };
        js += strfmt("  \"final_loss\": {\"stage1\": %s, \"stage1_ce\": %s, \"stage2\": %s, \"stage2_ce\": %s, \"last\": %s},\n",
                     num(tail_mean(history, 1, 20, &StepRecord::loss)).c_str(),
                     num(tail_mean(history, 1, 20, &StepRecord::ce)).c_str(),
                     num(tail_mean(history, 2, 20, &StepRecord::loss)).c_str(),
                     num(tail_mean(history, 2, 20, &StepRecord::ce)).c_str(),
                     num(tail_mean(history, 0, 20, &StepRecord::loss)).c_str());
        if (res.evaluated) {
            js += strfmt("  \"eval\": {\"prompts_file\": %s, \"prompts\": %d, \"tokens_per_prompt\": %d, \"greedy\": true, "
                         "\"concat\": %s, \"chat\": %s,\n",
                         json_str(o.eval_prompts).c_str(), res.tree.prompts, o.eval_tokens, o.eval_no_concat ? "false" : "true",
                         eval_chat ? "true" : "false");
            js += strfmt("    \"chain\": {\"gamma\": %d, \"stats\": %s},\n", o.gamma, eval_json(res.chain).c_str());
            js += strfmt("    \"tree\": {\"depth\": %d, \"topk\": %d, \"total_tokens\": %d, \"stats\": %s}},\n", o.depth, o.topk,
                         o.total_tokens, eval_json(res.tree).c_str());
            js += strfmt("  \"tau_chain\": %.4f, \"tau_tree\": %.4f,\n", res.chain.tau, res.tree.tau);
            js += strfmt("  \"accept_by_depth\": {\"chain\": %s, \"tree\": %s},\n", json_arr(res.chain.accept_by_depth).c_str(),
                         json_arr(res.tree.accept_by_depth).c_str());
        }
        js += strfmt("  \"wall_seconds\": %.1f\n}\n", now_seconds() - t_start);
        write_file_atomic(res.json_path, js.data(), js.size());
    }
    return res;
}

}  // namespace beagle
