// train_loop.cpp: `beagle train` (see train_loop.h). run_train, top to bottom:
//   setup: the frozen target, the data cut into items (chunks of --seq-len, pos0 offsets), the draft's
//     config (reduced vocabulary), the schedule and the run's config (what a checkpoint must match);
//   state: the weights (random, --init, or the checkpoint's), AdamW, three seeded random streams;
//   resume: the checkpoint's weights, moments, streams, data order and position (checkpoint.h);
//   loop: per optimizer step, for each of B items: trainer.run(item, offset ~ U[0, w), noise seed,
//     1/B); AdamW step at lr(step); record the loss; checkpoint every N steps. Epochs [0, A) are stage
//     1, [A, A + B) stage 2; each epoch shuffles the item order;
//   save: the draft file and the final checkpoint; then the charts, the evaluation (evaluate.h) and
//     the JSON summary (report.h).
// Every random draw comes from one of the three streams (shuffle, window offset, noise seed), whose
// states the checkpoint stores with the data order, step, epoch and AdamW moments; a resumed run
// therefore repeats the straight run's arithmetic exactly.
#include "train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>

#include "../backend/backend.h"
#include "../backend/ops.h"
#include "../core/comm.h"
#include "../core/common.h"
#include "../core/dtype.h"
#include "../core/progress.h"
#include "../core/threadpool.h"
#include "../data/dataset.h"
#include "../io/model_file.h"
#include "adamw.h"
#include "data_parallel.h"
#include "../core/rng.h"
#include "../core/sha256.h"
#include "report.h"
#include "target_states.h"
#include "trainer.h"

namespace beagle {

double default_lr(int dim) {
    // SPEC's 3e-5 is for 7B-class drafts (dim 4096); small widths train stably with much more.
    if (dim <= 128) return 3e-3;
    if (dim <= 1024) return 5e-4;
    if (dim <= 2048) return 1e-4;
    return 3e-5;
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
    auto coverage = [&](const std::vector<int32_t>& v) {
        int64_t c = 0;
        for (int32_t t : v) c += count[t];
        return total ? 100.0 * c / total : 0.0;
    };
    const double best = coverage(ids);  // the most frequent n: the most any n tokens cover
    if (keep) ids = *keep;  // continued training: the init draft's vocabulary (checked by the caller)
    const double covered = coverage(ids);
    std::sort(ids.begin(), ids.end());
    if (!quiet) {
        fprintf(stderr, "train: reduced draft vocabulary: %s %d tokens cover %.2f%% of %lld training targets\n",
                keep ? "the --init draft's" : "the most frequent", n, covered, (long long)total);
        if (keep && best - covered >= 0.5)  // the init draft's tokens were chosen from other data
            fprintf(stderr, "train: the %d most frequent of this data would cover %.2f%%: --new-vocab chooses them (the "
                    "draft cannot propose a token outside its vocabulary)\n", n, best);
    }
    return ids;
}

// ---- setup ---------------------------------------------------------------------------------------

namespace {

using KV = std::vector<std::pair<std::string, std::string>>;

void check_options(const TrainLoopOptions& o) {
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
}

// A chunk of one sequence: the unit of the data order and of a batch.
struct Item {
    uint32_t seq;
    int start, len;
};

std::vector<Item> make_items(const Dataset& ds, const TrainLoopOptions& o) {
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
    return items;
}

struct Schedule {
    int epochs;            // stage 1 + stage 2
    long steps_per_epoch, total_steps, stop_at;
    double lr;
    long warmup, decay_steps;
};

Schedule make_schedule(const TrainLoopOptions& o, int n_items, int dim) {
    Schedule sc;
    sc.epochs = o.stage1_epochs + o.stage2_epochs;
    sc.steps_per_epoch = (n_items + o.batch - 1) / o.batch;
    sc.total_steps = sc.steps_per_epoch * sc.epochs;
    sc.stop_at = o.max_steps > 0 ? std::min(o.max_steps, sc.total_steps) : sc.total_steps;
    sc.lr = o.lr > 0 ? o.lr : default_lr(dim);
    sc.warmup = o.warmup >= 0 ? o.warmup : std::min<long>(2000, std::max<long>(1, sc.total_steps / 20));
    sc.decay_steps = (long)std::lround(o.lr_decay * (double)sc.total_steps);
    return sc;
}

// The run's config: a checkpoint from any other config is refused.
KV run_config(const TrainLoopOptions& o, const DraftConfig& cfg, uint64_t tok_hash, const Dataset& ds, int n_items,
              const Schedule& sc) {
    KV config = {
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
        {"lr", strfmt("%.9g", sc.lr)},
        {"warmup", std::to_string(sc.warmup)},
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
    if (cfg.arch != ARCH_BEAGLE) config.push_back({"arch", draft_arch_name(cfg.arch)});  // absent: beagle
    if (o.ttt) config.push_back({"ttt", "1"});  // absent: off
    if (cfg.arch == ARCH_MEDUSA) config.push_back({"medusa_heads", std::to_string(cfg.medusa_heads)});
    if (!cfg.state_layers.empty()) config.push_back({"state_layers", format_layer_list(cfg.state_layers)});  // absent: none
    if (sc.decay_steps > 0) config.push_back({"lr_decay_steps", std::to_string(sc.decay_steps)});  // absent: constant lr
    if (!o.init.empty()) config.push_back({"init", o.init});
    if (o.new_vocab) config.push_back({"new_vocab", "1"});  // absent: the init draft's vocabulary kept
    return config;
}

// The starting weights: random from the seed, or (--init, continued training) the init draft's, which
// must have the same shapes and, unless --new-vocab, the same reduced vocabulary. The vocabulary is not
// trained: it picks rows of the target's frozen LM head, so with --new-vocab every trained
// tensor carries over and only the draft's candidate tokens change.
DraftWeights initial_weights(const TrainLoopOptions& o, const DraftConfig& cfg, const std::vector<int32_t>& d2t,
                             const DraftWeights& iw) {
    DraftWeights dw;
    dw.init_random(cfg, o.seed);
    dw.d2t = d2t;
    if (o.init.empty()) return dw;
    const DraftConfig& a = iw.cfg;
    if (a.arch != cfg.arch)
        fail("--init '%s': a %s draft, this run trains a %s draft (--arch)", o.init.c_str(), draft_arch_name(a.arch),
             draft_arch_name(cfg.arch));
    if (a.medusa_heads != cfg.medusa_heads)
        fail("--init '%s': a Medusa draft of %d heads, this run trains %d (--medusa-heads)", o.init.c_str(), a.medusa_heads,
             cfg.medusa_heads);
    if (a.dim != cfg.dim || a.n_heads != cfg.n_heads || a.n_kv_heads != cfg.n_kv_heads || a.head_dim != cfg.head_dim ||
        a.ffn_dim != cfg.ffn_dim || a.vocab_size != cfg.vocab_size || (a.draft_vocab != cfg.draft_vocab && !o.new_vocab))
        fail("--init '%s': draft config (dim %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, draft_vocab %d) does not "
             "match this run's (dim %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, draft_vocab %d)%s",
             o.init.c_str(), a.dim, a.n_heads, a.n_kv_heads, a.head_dim, a.ffn_dim, a.vocab_size, a.draft_vocab,
             cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn_dim, cfg.vocab_size, cfg.draft_vocab,
             a.draft_vocab != cfg.draft_vocab ? " (another --draft-vocab: add --new-vocab)" : "");
    if (iw.d2t != d2t && !o.new_vocab)  // cannot happen (d2t was taken from it); kept as the invariant's check
        fail("--init '%s': its reduced vocabulary differs from this run's", o.init.c_str());
    if (!a.state_layers.empty() && a.state_layers != cfg.state_layers)
        fail("--init '%s': fuses other state layers than this run's --state-layers", o.init.c_str());
    for (int k = 0; k < DT_COUNT; k++)
        if (a.has(k)) dw.t[k] = iw.t[k];  // W_mix of a draft without state layers stays zero: it starts as that draft
    if (!o.quiet) printf("train: weights from '%s' (warm start)\n", o.init.c_str());
    return dw;
}

AdamWOptions adamw_options(const TrainLoopOptions& o, const Schedule& sc) {
    AdamWOptions ao;
    ao.lr = (float)sc.lr;
    ao.warmup = (int)sc.warmup;
    ao.decay_from = (int)(sc.total_steps - sc.decay_steps);
    ao.decay_to = (int)sc.total_steps;
    ao.clip = (float)o.clip;
    ao.weight_decay = (float)o.weight_decay;
    return ao;
}

// Seed of random stream `k` of a run (independent splitmix64 streams).
uint64_t stream_seed(uint64_t seed, uint64_t k) {
    TrainRng r(seed ^ (0xA0761D6478BD642FULL * (k + 1)));
    return r.next();
}

void shuffle(std::vector<uint32_t>& order, TrainRng& r) {
    for (int i = (int)order.size() - 1; i > 0; i--) std::swap(order[i], order[r.below(i + 1)]);
}
void shuffle(TrainState& st) { shuffle(st.order, st.shuffle); }

// The items step `step` runs when it starts at position `pos` of st's epoch order, drawn as the loop will
// draw them: from this epoch's order, or at its end from the next epoch's (the shuffle run on a copy of
// the stream). Empty when that step does not run.
std::vector<uint32_t> step_items(const TrainState& st, long step, int pos, const Schedule& sc, int batch, int n_items) {
    if (step >= sc.stop_at) return {};
    std::vector<uint32_t> next;
    const std::vector<uint32_t>* order = &st.order;
    if (pos >= n_items) {
        if (st.epoch + 1 >= sc.epochs) return {};
        next = st.order;
        TrainRng r = st.shuffle;
        shuffle(next, r);
        order = &next;
        pos = 0;
    }
    const int n = std::min(batch, n_items - pos);
    return std::vector<uint32_t>(order->begin() + pos, order->begin() + pos + n);
}

// ---- checkpoints: the run <-> checkpoint.h ---------------------------------------------------------

// Every rank calls it (the AdamW moments are sharded: gathering them is collective); rank 0 writes.
void write_checkpoint(const std::string& path, const KV& config, TrainState& st, DraftModelT<Ops>& model,
                      AdamW& adam, GradTree& tree, bool write) {
    st.adam_steps = adam.steps();
    Checkpoint ck = checkpoint_of(config, st);
    DraftWeights cur;
    model.get_weights(&cur);
    for (int i = 0; i < DT_COUNT; i++) {
        ck.w[i] = cur.t[i];
        if (!model.cfg.has(i)) continue;  // a tensor of another architecture: nothing to save
        ck.m[i] = tree.gather_host(adam.m(i), ck.w[i].size());
        ck.v[i] = tree.gather_host(adam.v(i), ck.w[i].size());
    }
    if (write) save_checkpoint(path, ck, model.cfg);
}

TrainState resume(const std::string& path, const KV& config, const Schedule& sc, DraftWeights& dw,
                  DraftModelT<Ops>& model, AdamW& adam, Ops& ops) {
    Checkpoint ck = load_checkpoint(path);
    TrainState st = resume_state(ck, config, path);
    const int n_items = (int)st.order.size();
    if (st.epoch > sc.epochs || st.pos > n_items || (long)st.history.size() != st.step)
        fail("checkpoint '%s' is inconsistent (epoch %d of %d, position %d of %d, %zu loss records for step %ld)",
             path.c_str(), st.epoch, sc.epochs, st.pos, n_items, st.history.size(), st.step);
    for (int i = 0; i < DT_COUNT; i++) {
        dw.t[i] = ck.w[i];
        if (!model.cfg.has(i)) continue;
        ops.upload(adam.m(i), ck.m[i].data() + adam.lo(i), adam.len(i));  // this rank's slice (ZeRO-1)
        ops.upload(adam.v(i), ck.v[i].data() + adam.lo(i), adam.len(i));
    }
    model.set_weights(dw);
    adam.set_steps(st.adam_steps);
    return st;
}

// ---- states from tokens ----------------------------------------------------------------------------

// Tokens-only data: the states come from -m, computed as datagen would have (its --f32-weights: the weights
// dequantized here). A target other than the one that wrote the answers is allowed (distillation data of
// another model) and said.
void prepare_states_target(const Dataset& ds, ModelFile& mf, const TrainLoopOptions& o) {
    match_datagen_weights(ds, mf);
    const std::string want = ds.meta("target_sha256");
    if (want.empty() || o.quiet) return;
    const std::string have = sha256_file(o.model);
    if (have != want)
        fprintf(stderr, "train: note: the answers in '%s' were written by a target of SHA-256 %.16s.. (%s), -m '%s' is "
                "%.16s..: the states come from -m\n", o.data.c_str(), want.c_str(), ds.meta("model").c_str(),
                o.model.c_str(), have.c_str());
}

// ---- one optimizer step ----------------------------------------------------------------------------

// The run's view of its data: each item's sequence with the target's states, stored in the shards or,
// for tokens-only data, computed by the target (ts).
struct ItemData {
    const Dataset& ds;
    TargetStates* ts;  // null: the shards keep the states
    // The layers a row of SeqView::extras holds: the data's, or those ts computes (the run's).
    size_t extra_layers;
    SeqView seq(const Item& it) const {
        return ts ? ts->view(it.seq, ds.seq(it.seq), it.start + it.len) : ds.seq(it.seq);
    }
    // Tokens-only data: queue the states these items (indices into `all`) will view, each sequence up to
    // the furthest end of its items.
    void prefetch(const std::vector<Item>& all, const std::vector<uint32_t>& which) const {
        if (!ts) return;
        std::map<uint32_t, int> ends;
        for (uint32_t k : which) ends[all[k].seq] = std::max(ends[all[k].seq], all[k].start + all[k].len);
        for (const auto& e : ends) ts->prefetch(e.first, ds.seq(e.first), e.second);
    }
};

// Item `it` as a training batch: its f16 states as f32 in *states, its loss mask in *lmask, and with state
// layers their rows in *extras (cols: Dataset::layer_columns of the run's layers, a subset of the data's).
TrainBatch item_batch(const ItemData& data, const Item& it, const TrainLoopOptions& o, int dim, std::vector<float>* states,
                      std::vector<uint8_t>* lmask, const std::vector<size_t>& cols, std::vector<float>* extras) {
    SeqView v = data.seq(it);
    states->resize((size_t)it.len * dim);
    const uint16_t* src = v.states + (size_t)it.start * dim;
    for (size_t i = 0; i < states->size(); i++) (*states)[i] = f16_to_f32(src[i]);
    // state layers: the data keeps D of them per row; the run fuses E of those
    const size_t E = cols.size(), D = data.extra_layers;
    extras->resize((size_t)it.len * E * dim);
    for (size_t k = 0; k < E; k++) {
        for (int q = 0; q < it.len; q++) {
            const uint16_t* x = v.extras + ((size_t)(it.start + q) * D + cols[k]) * dim;
            float* y = extras->data() + ((size_t)q * E + k) * dim;
            for (int d = 0; d < dim; d++) y[d] = f16_to_f32(x[d]);
        }
    }
    lmask->resize(it.len);
    for (int q = 0; q < it.len; q++) (*lmask)[q] = o.loss_on_prompt || it.start + q >= v.n_prompt;
    TrainBatch b;
    b.tokens = v.tokens + it.start;
    b.states = states->data();
    b.extras = E ? extras->data() : nullptr;
    b.loss_mask = lmask->data();
    b.T = it.len;
    b.pos0 = it.start;
    return b;
}

struct StepLoss {
    double loss = 0, ce = 0, vl = 0;
    int64_t tokens = 0;
};

// Forward and backward of the next nb items of the order: the gradients of loss_k / nb summed over the
// fixed item tree (data_parallel.h), each rank running its share of the items; every rank ends with
// the batch's gradient and every item's loss. Every rank draws every item's window offset and noise
// seed, so the random streams stay in step.
// peak: raised to each iteration's buffer peak. cols: item_batch's state-layer columns. next: the items of
// the next step, whose target states (tokens-only data) are queued before this step's sync.
StepLoss accumulate_grads(DraftTrainer& trainer, GradTree& tree, const ItemData& data, const std::vector<Item>& items,
                          TrainState& st, int nb, const TrainLoopOptions& o, int dim, const std::vector<size_t>& cols,
                          size_t* peak, const std::vector<uint32_t>& next) {
    std::vector<int> offsets(nb);
    std::vector<uint64_t> seeds(nb);
    for (int k = 0; k < nb; k++) {
        offsets[k] = st.offset.below(o.w);
        seeds[k] = st.noise.next();
    }
    const int W = 4;  // per item: loss, ce, vloss, tokens
    std::vector<double> rows((size_t)nb * W, 0.0);
    std::vector<float> states, extras;
    std::vector<uint8_t> lmask;
    std::vector<int> ran;  // the items this rank ran, in order
    tree.run(nb, [&](int k) {
        const Item& it = items[st.order[st.pos + k]];
        TrainBatch b = item_batch(data, it, o, dim, &states, &lmask, cols, &extras);
        trainer.run(b, offsets[k], seeds[k], 1.0f / nb, true);  // losses deferred (make_trainer)
        *peak = std::max(*peak, trainer.mem().peak_bytes());
        rows[(size_t)k * W + 3] = it.len;
        ran.push_back(k);
    });
    data.prefetch(items, next);  // a device backend: runs behind this step's work, lands at its sync
    // This rank's items' losses in one copy (a device backend: one sync per step), in run order.
    const std::vector<IterStats> losses = trainer.finish_losses();
    for (size_t i = 0; i < ran.size(); i++) {
        double* row = &rows[(size_t)ran[i] * W];
        row[0] = losses[i].loss;
        row[1] = losses[i].ce;
        row[2] = losses[i].vloss;
    }
    tree.gather_rows(rows);
    StepLoss r;
    for (int k = 0; k < nb; k++) {  // in item order on every rank
        const double* row = &rows[(size_t)k * W];
        r.loss += row[0] / nb;
        r.ce += row[1] / nb;
        r.vl += row[2] / nb;
        r.tokens += (int64_t)row[3];
    }
    return r;
}

// A device backend, before the first step: a batch of the longest item (every row a loss row), each window offset in turn,
// through a stage's trainer, its gradients dropped (every step starts with zero_grads) and its losses
// too. The caching allocator (cuda_rt.h) then holds blocks for the largest iteration of every stage
// this process will run, and its loss log the size of a full batch, so that no later step calls
// cudaMalloc (allocs_after_first_step). No random stream is drawn: the run's numbers are unchanged.
void warm_up(DraftTrainer& trainer, const ItemData& data, const std::vector<Item>& items, int nb,
             const TrainLoopOptions& o, int dim, const std::vector<size_t>& cols) {
    const Item* longest = &items[0];
    for (const Item& it : items)
        if (it.len > longest->len) longest = &it;
    std::vector<float> states, extras;
    std::vector<uint8_t> lmask;
    TrainBatch b = item_batch(data, *longest, o, dim, &states, &lmask, cols, &extras);
    b.loss_mask = nullptr;  // every row a loss row: the most any item of this length has
    for (int k = 0; k < nb; k++) trainer.run(b, k % o.w, 0, 1.0f / nb, true);
    trainer.finish_losses();
}

std::unique_ptr<DraftTrainer> make_trainer(DraftModelT<Ops>& model, const TrainLoopOptions& o, int stage) {
    TrainOptions to;
    to.stage = stage;
    to.w = o.w;
    to.S = o.S;
    to.sim_grad_through = o.sim_grad_through;
    to.ttt = o.ttt;
    to.noise_std = (float)o.noise;
    to.loss.w_v = (float)o.w_v;
    to.loss.hard_labels = o.hard_labels;
    std::unique_ptr<DraftTrainer> t(new DraftTrainer(model, to));
    t->defer_losses = true;  // accumulate_grads collects them once per optimizer step
    // a device backend: the trainer's buffers stay in its own pool (warm_up fills it at the largest shapes)
    if (model.ops.device_counters()) t->mem().keep_released(true);
    return t;
}

// ---- the run's helpers ---------------------------------------------------------------------------

// A fresh run: the streams seeded from the seed, the first epoch's order shuffled.
TrainState fresh_state(uint64_t seed, int n_items) {
    TrainState st;
    st.shuffle.s = stream_seed(seed, 1);
    st.offset.s = stream_seed(seed, 2);
    st.noise.s = stream_seed(seed, 3);
    st.order.resize(n_items);
    for (int i = 0; i < n_items; i++) st.order[i] = (uint32_t)i;
    shuffle(st);
    return st;
}

void print_plan(const TrainLoopOptions& o, const Dataset& ds, int n_items, const Schedule& sc, const DraftConfig& cfg,
                int threads) {
    int64_t params = 0;
    for (int i = 0; i < DT_COUNT; i++) params += cfg.numel(i);
    fprintf(stderr,
            "train: %zu sequences (%lld tokens) -> %d items of <= %d tokens; %d + %d epochs x %ld steps of batch %d = "
            "%ld steps%s; draft %lld params (ffn %d); lr %g, warm-up %ld, window %d, sim steps %d, %d threads\n",
            ds.n_seqs(), (long long)ds.n_tokens(), n_items, o.seq_len, o.stage1_epochs, o.stage2_epochs,
            sc.steps_per_epoch, o.batch, sc.total_steps,
            sc.stop_at < sc.total_steps ? strfmt(" (stopping at %ld)", sc.stop_at).c_str() : "", (long long)params,
            cfg.ffn_dim, sc.lr, sc.warmup, o.w, o.S, threads);
}

// The trained draft file's metadata.
KV draft_meta(const TrainLoopOptions& o, const Dataset& ds, const Schedule& sc, long steps) {
    return {
        {"trained_by", "beagle train"},
        {"arch", draft_arch_name(o.arch)},
        {"target", o.model},
        {"data", o.data},
        {"data_tokens", std::to_string(ds.n_tokens())},
        {"steps", std::to_string(steps)},
        {"epochs", strfmt("%d+%d", o.stage1_epochs, o.stage2_epochs)},
        {"window", std::to_string(o.w)},
        {"sim_steps", std::to_string(o.S)},
        {"seq_len", std::to_string(o.seq_len)},  // the farthest key a query saw: draft_trained_seq_len
        {"lr", strfmt("%g", sc.lr)},
        {"batch", std::to_string(o.batch)},
        {"seed", std::to_string(o.seed)},
    };
}

// The files next to the draft (report.h), after the acceptance evaluation if there are eval prompts.
void write_reports(const TrainLoopOptions& o, const DraftWeights& final_w, const KV& config, const Dataset& ds,
                   int n_items, const Schedule& sc, const TrainState& st, int threads, double t_start,
                   const TrainTotals& dev, TrainResult* res) {
    int64_t params = 0;
    for (int i = 0; i < DT_COUNT; i++) params += final_w.cfg.numel(i);
    res->loss_png = write_loss_report(o.out, st.history);
    TrainEval ev;
    if (!o.eval_prompts.empty()) {
        ev = evaluate_trained(o, final_w, threads);
        res->evaluated = true;
        res->chain = ev.chain;
        res->tree = ev.tree;
        res->accept_png = write_accept_chart(o.out, o, ev);
    }
    TrainTotals tt = dev;
    tt.config = &config;
    tt.data_seqs = ds.n_seqs();
    tt.data_tokens = ds.n_tokens();
    tt.items = n_items;
    tt.steps = st.step;
    tt.steps_per_epoch = sc.steps_per_epoch;
    tt.tokens_trained = st.tokens_seen;
    tt.train_seconds = st.train_seconds;
    tt.threads = threads;
    tt.arch = final_w.cfg.arch;
    tt.params = params;
    tt.res = res;
    tt.wall_seconds = now_seconds() - t_start;
    res->json_path = write_train_json(o.out, o, tt, st.history, res->evaluated ? &ev : nullptr);
}

}  // namespace

// ---- run_train -------------------------------------------------------------------------------------

TrainResult run_train(const TrainLoopOptions& o_in) {
    check_options(o_in);
    // ranks: every rank runs the whole loop on its share of each batch; rank 0 alone prints, writes
    // checkpoints, the draft and the reports (data_parallel.h)
    std::unique_ptr<Comm> comm = make_comm();
    const int rank = comm->rank(), n_ranks = comm->size();
    TrainLoopOptions o = o_in;
    if (rank != 0) o.quiet = true;
    const std::string ckpt_path = o.ckpt.empty() ? o.out + ".ckpt" : o.ckpt;
    const double t_start = now_seconds();
    remove_stale_temps(ckpt_path);  // half-written checkpoints, drafts and reports of a killed run
    remove_stale_temps(o.out);

    // setup: target (frozen tensors), data, draft config, items, schedule
    std::unique_ptr<ModelFile> mf = load_model(o.model);
    TokenizerSpec spec = o.tokenizer.empty() ? mf->tokenizer : load_tokenizer_file(o.tokenizer);
    uint64_t tok_hash = tokenizer_fingerprint(spec);
    Dataset ds(o.data);
    ds.check_fits(mf->config.dim, mf->config.vocab_size, tok_hash, o.model);
    if (!ds.has_states()) prepare_states_target(ds, *mf, o);
    DraftConfig cfg = draft_config_for_target(mf->config, spec, o.ffn_dim);
    cfg.arch = o.arch;
    cfg.medusa_heads = o.arch == ARCH_MEDUSA ? o.medusa_heads : 0;
    cfg.state_layers = o.state_layers;
    cfg.validate("beagle train --state-layers");
    const std::vector<size_t> cols = ds.layer_columns(cfg.state_layers);  // before anything runs: a layer it lacks stops here
    DraftFrozen fz = frozen_from_target(*mf, true);
    std::vector<int32_t> d2t;
    DraftWeights iw;  // --init: continued training keeps the init draft's reduced vocabulary (unless --new-vocab)
    if (!o.init.empty()) iw = load_draft(o.init);
    if (o.draft_vocab > 0) {
        bool keep = !o.init.empty() && iw.cfg.draft_vocab == o.draft_vocab && !o.new_vocab;
        d2t = reduced_vocab(ds, o.draft_vocab, o.loss_on_prompt, o.quiet, keep ? &iw.d2t : nullptr);
        cfg.draft_vocab = (int)d2t.size();
    }
    const std::vector<Item> items = make_items(ds, o);
    const int n_items = (int)items.size();
    const Schedule sc = make_schedule(o, n_items, cfg.dim);
    const KV config = run_config(o, cfg, tok_hash, ds, n_items, sc);

    // state: weights, AdamW, the random streams and the position in the data
    const int threads = o.threads > 0 ? o.threads : default_threads();
    std::unique_ptr<Ops> ops = make_ops("", threads);
    std::unique_ptr<Comm> dcomm = make_device_comm(*ops, *comm);  // NCCL on the CUDA backend, else none
    std::unique_ptr<TargetStates> ts;  // tokens-only data: the target computes the states
    if (!ds.has_states())  // slots: this step's sequences, the next step's, and warm_up's longest
        ts.reset(new TargetStates(*mf, *ops, ds.longest_seq(), cfg.state_layers, 2 * o.batch + 1));
    const ItemData data{ds, ts.get(), ts ? cfg.state_layers.size() : ds.state_layers().size()};
    DraftWeights dw = initial_weights(o, cfg, d2t, iw);
    DraftModelT<Ops> model(*ops, dw, fz);
    model.enable_grads();
    AdamW adam(model, adamw_options(o, sc), rank, n_ranks);  // ZeRO-1: this rank's slice of the moments
    TrainState st;
    if (!o.resume.empty()) {
        st = resume(o.resume, config, sc, dw, model, adam, *ops);
        if (!o.quiet) fprintf(stderr, "train: resumed from %s at step %ld (epoch %d, item %d)\n", o.resume.c_str(), st.step, st.epoch + 1, st.pos);
    } else {
        st = fresh_state(o.seed, n_items);
    }
    std::string last_good = o.resume.empty() ? "" : strfmt("%s (step %ld)", o.resume.c_str(), st.step);
    if (!o.quiet) print_plan(o, ds, n_items, sc, cfg, threads);
    GradTree tree(model, *comm, dcomm ? *dcomm : *comm);
    if (!o.quiet && n_ranks > 1)
        fprintf(stderr, "train: %d ranks (%s%s), global batch %d: each rank runs its share of every batch\n", n_ranks,
                comm->name(), dcomm ? strfmt(", gradients over %s", dcomm->name()).c_str() : "", o.batch);

    // the loop
    std::unique_ptr<DraftTrainer> trainers[2];  // per stage, made when first needed (a device backend: all up front)
    size_t iter_peak[2] = {0, 0};  // per stage: the largest iteration's buffer peak (BufAlloc), this process's steps
    long stage_steps[2] = {0, 0};
    double stage_seconds[2] = {0, 0};
    std::unique_ptr<Progress> prog;
    const long step0 = st.step;  // the bar counts this process's steps (its rate and ETA stay right after a resume)
    if (!o.quiet) prog.reset(new Progress(step0 ? strfmt("train (from step %ld)", step0) : "train", sc.stop_at - step0, "step"));
    double t_loop = now_seconds(), t_seg = t_loop;
    int64_t seg_tokens = 0, run_tokens = 0;  // since the last checkpoint; since this process started
    const DeviceCounters* dev = ops->device_counters();  // a device backend: count each step's runtime work
    TrainTotals devt;
    devt.has_device = dev != nullptr;
    // Each step queues the next step's target states before its sync (one rank: with several, each would
    // compute every item's; they compute their own share when they view them).
    auto next_items = [&](long step, int pos) {
        return n_ranks == 1 ? step_items(st, step, pos, sc, o.batch, n_items) : std::vector<uint32_t>();
    };
    data.prefetch(items, next_items(st.step, st.pos));
    if (dev && st.step < sc.stop_at)  // the stages still to run: their largest iterations' buffers now
        for (int stage = 1; stage <= 2; stage++) {
            const bool runs = stage == 1 ? st.epoch < o.stage1_epochs : o.stage2_epochs > 0;
            if (!runs) continue;
            trainers[stage - 1] = make_trainer(model, o, stage);
            warm_up(*trainers[stage - 1], data, items, std::min(o.batch, n_items), o, cfg.dim, cols);
        }
    auto checkpoint = [&]() {
        double now = now_seconds();
        st.train_seconds += now - t_seg;
        st.tokens_seen += seg_tokens;
        t_seg = now;
        seg_tokens = 0;
        write_checkpoint(ckpt_path, config, st, model, adam, tree, rank == 0);
        last_good = strfmt("%s (step %ld)", ckpt_path.c_str(), st.step);
    };
    while (st.step < sc.stop_at) {
        if (st.pos >= n_items) {  // next epoch
            st.epoch++;
            st.pos = 0;
            if (st.epoch >= sc.epochs) break;
            shuffle(st);
        }
        const int stage = st.epoch < o.stage1_epochs ? 1 : 2;
        if (!trainers[stage - 1]) trainers[stage - 1] = make_trainer(model, o, stage);
        DraftTrainer& trainer = *trainers[stage - 1];
        const int nb = std::min(o.batch, n_items - st.pos);
        const DeviceCounters c0 = dev ? *dev : DeviceCounters();
        model.zero_grads();
        const double t_step = now_seconds();
        StepLoss sl = accumulate_grads(trainer, tree, data, items, st, nb, o, cfg.dim, cols, &iter_peak[stage - 1],
                                       next_items(st.step + 1, st.pos + nb));
        seg_tokens += sl.tokens;
        run_tokens += sl.tokens;
        const char* last = last_good.empty() ? "none written yet" : last_good.c_str();
        if (!std::isfinite(sl.loss))
            fail("training stopped: the loss is %g at step %ld (epoch %d, stage %d); the weights were not updated. Last "
                 "good checkpoint: %s",
                 sl.loss, st.step + 1, st.epoch + 1, stage,
                 last_good.empty() ? "none written yet (raise the checkpoint rate with --ckpt-every)" : last);
        try {
            adam.step();
            if (n_ranks > 1) tree.share_weights();  // every rank updated its slice; now all hold the new weights
        } catch (const Error& e) {
            fail("training stopped at step %ld (epoch %d, stage %d): %s. Last good checkpoint: %s", st.step + 1,
                 st.epoch + 1, stage, e.what(), last);
        }
        if (dev) {
            const DeviceCounters d = *dev - c0;
            devt.launches += d.launches;
            devt.syncs += d.syncs;
            if (devt.device_steps > 0) devt.allocs_after_first_step += d.allocs;
            devt.device_steps++;
            devt.peak_device_bytes = d.peak_device_bytes;
        }
        stage_seconds[stage - 1] += now_seconds() - t_step;
        stage_steps[stage - 1]++;
        st.step++;
        st.pos += nb;
        st.history.push_back({(float)sl.loss, (float)sl.ce, (float)sl.vl, stage});
        if (o.ckpt_every > 0 && st.step % o.ckpt_every == 0 && st.step < sc.stop_at) checkpoint();
        if (prog) {
            double el = now_seconds() - t_loop;
            const std::vector<StepRecord>& h = st.history;
            prog->update(st.step - step0,
                         strfmt("ep %d/%d st %d  loss %.4f (ce %.3f vl %.3f)  %.0f tok/s", st.epoch + 1, sc.epochs, stage,
                                tail_mean(h, 0, 20, &StepRecord::loss), tail_mean(h, 0, 20, &StepRecord::ce),
                                tail_mean(h, 0, 20, &StepRecord::vloss), el > 0 ? (double)run_tokens / el : 0.0));
        }
    }
    checkpoint();
    TrainResult res;
    for (int k = 0; k < 2; k++) {
        res.iteration_peak_bytes[k] = iter_peak[k];
        res.stage_steps[k] = stage_steps[k];
        res.stage_seconds[k] = stage_seconds[k];
    }
    res.history = st.history;
    res.steps = (int)st.step;
    if (ts) {
        res.states_computed = true;
        res.state_tokens = ts->tokens();
        res.state_seconds = ts->seconds();
        if (!o.quiet && ts->seconds() > 0)
            fprintf(stderr, "train: the target's states: %lld positions prefilled in %.1f s (%.0f tok/s), %.0f%% of the loop\n",
                    (long long)ts->tokens(), ts->seconds(), ts->tokens() / ts->seconds(),
                    100 * ts->seconds() / std::max(1e-9, now_seconds() - t_loop));
    }
    res.draft_path = o.out;
    res.rank = rank;
    res.ranks = n_ranks;
    if (const long run_steps = st.step - step0) {
        const double loop_s = now_seconds() - t_loop;
        res.sec_per_step = loop_s / run_steps;
        res.comm_share = tree.seconds_communicating() / loop_s;
        res.bytes_per_step = (double)tree.bytes_sent() / run_steps;
        if (!o.quiet && launched_by_mpirun())
            fprintf(stderr, "train: %d ranks: %.4f s per step, %.1f%% of it in exchanges (waits for the other ranks included), "
                    "%.3f MB sent per step by rank 0 (gradients + weight slices)\n", n_ranks, res.sec_per_step, 100 * res.comm_share,
                    res.bytes_per_step / 1e6);
    }
    if (prog)
        prog->finish(strfmt("loss %.4f, %lld tokens, %.1f s", tail_mean(st.history, 0, 20, &StepRecord::loss),
                            (long long)st.tokens_seen, st.train_seconds));

    if (rank != 0) return res;

    // save: the draft file
    DraftWeights final_w;
    model.get_weights(&final_w);
    final_w.meta = draft_meta(o, ds, sc, st.step);
    save_draft(o.out, final_w);

    // report: loss curve and TSV, acceptance on held-out prompts, JSON summary
    write_reports(o, final_w, config, ds, n_items, sc, st, threads, t_start, devt, &res);
    return res;
}

}  // namespace beagle
