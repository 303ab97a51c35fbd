// test_train_loop.cpp: the `beagle train` loop (src/train/train_loop.cpp) on tiny real data (the
// stories260K target, `beagle datagen --sample 6`, 40 new tokens each):
//   - resume is bit-exact: a straight run vs runs cut at step 7 (mid-epoch, stage 1), and at step 9
//     (epoch end) then 13 (stage 2), each resumed from its checkpoint: the final weights, the AdamW
//     moments and every step's loss are memcmp-equal; another seed gives other weights;
//   - 2 threads give the same bits as 1 (weights, moments, losses; Beagle and EAGLE drafts, both stages);
//   - the draft file records the longest training sequence (meta.seq_len: the default key window, draft.h);
//   - the loss goes down on a short stage-1 run;
//   - a NaN planted in the data (a copy with the states of the item step 5 reads) stops the run with a
//     message naming step 5 and the last good checkpoint (step 4), which is left intact, and no draft
//     is written; resumed on the clean data it ends as the straight run;
//   - bad input gives clear errors: data from another model, a checkpoint from another config,
//     corrupt and truncated shards and checkpoints, S > w.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/common.h"
#include "data/datagen.h"
#include "data/dataset.h"
#include "model/draft.h"
#include "testlib.h"
#include "train/train_loop.h"

using namespace beagle;

static std::string g_tmp;

// Equal sizes and bytes (a tensor of 0 elements, e.g. an EAGLE-only one in a Beagle draft, has no data).
static bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

static bool same_weights(const std::string& a, const std::string& b) {
    DraftWeights x = load_draft(a), y = load_draft(b);
    for (int i = 0; i < DT_COUNT; i++)
        if (!same_bytes(x.t[i], y.t[i])) return false;
    return true;
}

static bool same_state(const std::string& a, const std::string& b) {
    Checkpoint x = load_checkpoint(a), y = load_checkpoint(b);
    for (int i = 0; i < DT_COUNT; i++) {
        if (!same_bytes(x.m[i], y.m[i]) || !same_bytes(x.v[i], y.v[i])) return false;
    }
    if (x.history.size() != y.history.size()) return false;
    for (size_t i = 0; i < x.history.size(); i++)
        if (memcmp(&x.history[i], &y.history[i], sizeof(StepRecord)) != 0) return false;
    return x.get("step") == y.get("step") && x.get("rng_noise") == y.get("rng_noise") && x.order == y.order;
}

// A copy of o.data in dir with every state of item `item` NaN (the first element of each row). The items
// are cut as run_train cuts them: chunks of o.seq_len of each sequence, those with a loss row (q >= 1
// past the prompt), in order. The data must be one shard (it is rewritten whole).
static std::string poisoned_copy(const TrainLoopOptions& o, uint32_t item, const std::string& dir) {
    Dataset ds(o.data);
    mkdir(dir.c_str(), 0755);
    write_meta(dir + "/meta.txt", read_meta(o.data + "/meta.txt"));
    CHECK(file_exists(o.data + "/shard-00000.bin") && !file_exists(o.data + "/shard-00001.bin"), "the data is one shard");
    std::vector<SeqData> seqs(ds.n_seqs());
    uint32_t n = 0;
    for (size_t i = 0; i < ds.n_seqs(); i++) {
        const SeqView v = ds.seq(i);
        seqs[i].tokens.assign(v.tokens, v.tokens + v.len);
        seqs[i].states.assign(v.states, v.states + (size_t)v.len * ds.dim());
        seqs[i].n_prompt = v.n_prompt;
        for (int s0 = 0; s0 < v.len; s0 += o.seq_len) {
            const int len = std::min(o.seq_len, v.len - s0), first_loss = std::max(1, v.n_prompt - s0);
            if (first_loss >= len) continue;
            if (n++ == item)
                for (int q = s0; q < s0 + len; q++) seqs[i].states[(size_t)q * ds.dim()] = 0x7e00;  // f16 NaN
        }
    }
    CHECK(n > item, "item %u of %u", item, n);
    write_shard(dir + "/shard-00000.bin", ds.dim(), ds.vocab(), ds.tokenizer_hash(), seqs);
    return dir;
}

int main() {
    std::string model = test_models_dir() + "stories260K.bin", tok = test_models_dir() + "tok512.bin";
    g_tmp = strfmt("/tmp/beagle_test_train_loop_%d", (int)getpid());
    mkdir(g_tmp.c_str(), 0755);

    DatagenOptions dg;
    dg.model = model;
    dg.tokenizer = tok;
    dg.sample = 6;
    dg.max_new = 40;
    dg.batch = 6;
    dg.threads = 1;
    dg.keep_states = true;  // the stored states: the NaN data below poisons them
    dg.out_dir = g_tmp + "/data";
    run_datagen(dg);

    TrainLoopOptions base;
    base.model = model;
    base.tokenizer = tok;
    base.data = dg.out_dir;
    base.stage1_epochs = 1;
    base.stage2_epochs = 1;
    base.batch = 2;
    base.seq_len = 16;
    base.lr = 3e-3;
    base.warmup = 3;
    base.ckpt_every = 0;
    base.threads = 1;
    base.quiet = true;

    // ---- resume bit-exactness ----
    TrainLoopOptions a = base;
    a.out = g_tmp + "/a.bin";
    TrainResult ra = run_train(a);
    printf("straight run: %d steps, loss %.4f -> %.4f\n", ra.steps, ra.history.front().loss, ra.history.back().loss);
    CHECK(ra.steps >= 14, "tiny data should give >= 14 steps over 2 epochs, got %d", ra.steps);
    CHECK(ra.history.front().stage == 1 && ra.history.back().stage == 2, "both stages ran");
    // the longest training sequence goes into the file: the draft's default key window at inference
    CHECK(draft_trained_seq_len(load_draft(a.out)) == 16, "meta.seq_len of the trained draft: %d, want 16",
          draft_trained_seq_len(load_draft(a.out)));
    {
        TrainLoopOptions b = base;
        b.out = g_tmp + "/b.bin";
        b.max_steps = 7;
        TrainResult r1 = run_train(b);
        CHECK(r1.steps == 7, "cut run stopped at %d, wanted 7", r1.steps);
        CHECK(!same_weights(a.out, b.out), "a 7-step draft equals the full one: the test would be vacuous");
        b.max_steps = 0;
        b.resume = b.out + ".ckpt";
        TrainResult r2 = run_train(b);
        CHECK(r2.steps == ra.steps, "resumed run ended at step %d, straight at %d", r2.steps, ra.steps);
        CHECK(same_weights(a.out, b.out), "cut at 7 + resume: final weights differ from the straight run");
        CHECK(same_state(a.out + ".ckpt", b.out + ".ckpt"), "cut at 7 + resume: AdamW moments, losses or RNG differ");
    }
    {
        TrainLoopOptions c = base;
        c.out = g_tmp + "/c.bin";
        int spe = ra.steps / 2;  // steps per epoch: the cut lands exactly on the epoch end
        c.max_steps = spe;
        run_train(c);
        c.resume = c.out + ".ckpt";
        c.max_steps = spe + 4;  // into stage 2
        TrainResult r = run_train(c);
        CHECK(r.history.back().stage == 2, "second cut should be in stage 2");
        c.max_steps = 0;
        run_train(c);
        CHECK(same_weights(a.out, c.out), "cut at the epoch end and in stage 2: final weights differ");
        CHECK(same_state(a.out + ".ckpt", c.out + ".ckpt"), "cut twice: AdamW moments, losses or RNG differ");
    }
    {
        TrainLoopOptions d = base;
        d.out = g_tmp + "/d.bin";
        d.seed = 2;
        run_train(d);
        CHECK(!same_weights(a.out, d.out), "another seed gave the same weights");
    }

    // ---- the thread count changes no bit (parallel_for's static chunks: every output element is summed whole by
    // one thread, in the same order whatever the split), in both stages and for both architectures. At this size
    // jobs are split over the 2 threads (the LM head: 32 rows x 512 x 64 MACs; the loss's per-row softmax sums:
    // a planted thread-dependent sum order there failed this check). ----
    for (int arch : {ARCH_BEAGLE, ARCH_EAGLE}) {
        std::string one = a.out;
        if (arch == ARCH_EAGLE) {
            TrainLoopOptions e1 = base;
            e1.arch = arch;
            e1.out = g_tmp + "/e1.bin";
            run_train(e1);
            one = e1.out;
        }
        TrainLoopOptions t2 = base;
        t2.arch = arch;
        t2.threads = 2;
        t2.out = g_tmp + strfmt("/t2-%d.bin", arch);
        TrainResult r = run_train(t2);
        CHECK(r.history.back().stage == 2, "the 2-thread run reached stage 2");
        CHECK(same_weights(one, t2.out), "arch %d: 2 threads gave other weights than 1", arch);
        CHECK(same_state(one + ".ckpt", t2.out + ".ckpt"), "arch %d: 2 threads gave other AdamW moments or losses", arch);
    }

    // ---- the loss goes down ----
    {
        TrainLoopOptions l = base;
        l.out = g_tmp + "/l.bin";
        l.stage1_epochs = 6;
        l.stage2_epochs = 0;
        TrainResult r = run_train(l);
        size_t n = r.history.size();
        double first = (r.history[0].loss + r.history[1].loss + r.history[2].loss) / 3;
        double last = (r.history[n - 1].loss + r.history[n - 2].loss + r.history[n - 3].loss) / 3;
        printf("loss over %zu stage-1 steps: %.4f -> %.4f\n", n, first, last);
        CHECK(last < 0.6 * first, "loss did not fall below 60%% of its start (%.4f -> %.4f)", first, last);
    }

    // ---- NaN stops the run, the last good checkpoint stays ----
    {
        // the NaN is planted in a copy of the data: the states of the item that step 5 reads first
        TrainLoopOptions x = base;
        x.out = g_tmp + "/order.bin";
        x.max_steps = 1;
        run_train(x);  // the first epoch's item order, from its checkpoint
        const std::vector<uint32_t> order = load_checkpoint(x.out + ".ckpt").order;
        x.out = g_tmp + "/nan.bin";
        x.max_steps = 0;
        x.data = poisoned_copy(base, order.at(4 * base.batch), g_tmp + "/nan_data");
        x.ckpt_every = 2;
        CHECK_THROWS(run_train(x), "at step 5");
        try {
            run_train(x);
        } catch (const Error& e) {
            printf("NaN message: %s\n", e.what());
            CHECK(strstr(e.what(), "nan") && strstr(e.what(), "(step 4)"), "message names NaN and the step-4 checkpoint");
        }
        Checkpoint ck = load_checkpoint(x.out + ".ckpt");
        CHECK(ck.get("step") == "4", "last good checkpoint is at step %s, wanted 4", ck.get("step").c_str());
        CHECK(!file_exists(x.out), "a draft was written after the NaN");
        // and, on the clean data, it resumes to the same end as the straight run
        x.data = base.data;
        x.resume = x.out + ".ckpt";
        run_train(x);
        CHECK(same_weights(a.out, x.out), "resume after the NaN stop differs from the straight run");
    }

    // ---- bad input ----
    {
        // data made by another model (dim 32)
        std::string other = g_tmp + "/other";
        mkdir(other.c_str(), 0755);
        SeqData sd;
        sd.tokens = {1, 2, 3, 4};
        sd.states.assign(4 * 32, 0);
        sd.n_prompt = 1;
        write_shard(other + "/shard-00000.bin", 32, 512, 0, {sd});
        TrainLoopOptions x = base;
        x.out = g_tmp + "/x.bin";
        x.data = other;
        CHECK_THROWS(run_train(x), "made by another model");
        // checkpoint from another config
        x = base;
        x.out = g_tmp + "/x.bin";
        x.resume = g_tmp + "/b.bin.ckpt";
        x.w = 2;
        x.S = 2;
        CHECK_THROWS(run_train(x), "window = 3, this run has window = 2");
        x.w = 3;
        x.S = 3;
        x.batch = 3;
        CHECK_THROWS(run_train(x), "batch = 2");
        // a draft file is not a checkpoint
        x = base;
        x.out = g_tmp + "/x.bin";
        x.resume = g_tmp + "/a.bin";
        CHECK_THROWS(run_train(x), "not a Beagle training checkpoint");
        // corrupt / truncated checkpoint
        std::string ck = read_file(g_tmp + "/a.bin.ckpt");
        std::string bad = ck;
        bad[bad.size() / 2] ^= 0x10;
        write_file_atomic(g_tmp + "/bad.ckpt", bad.data(), bad.size());
        x.resume = g_tmp + "/bad.ckpt";
        CHECK_THROWS(run_train(x), "checksum mismatch");
        write_file_atomic(g_tmp + "/short.ckpt", ck.data(), ck.size() - 100);
        x.resume = g_tmp + "/short.ckpt";
        CHECK_THROWS(run_train(x), "truncated");
        // corrupt / truncated shard
        std::string cd = g_tmp + "/corrupt";
        mkdir(cd.c_str(), 0755);
        std::string shard = read_file(dg.out_dir + "/shard-00000.bin");
        std::string s2 = shard;
        s2[s2.size() / 2] ^= 0x01;
        write_file_atomic(cd + "/shard-00000.bin", s2.data(), s2.size());
        x = base;
        x.out = g_tmp + "/x.bin";
        x.data = cd;
        CHECK_THROWS(run_train(x), "checksum mismatch");
        write_file_atomic(cd + "/shard-00000.bin", shard.data(), shard.size() - 64);
        CHECK_THROWS(run_train(x), "truncated");
        x.data = g_tmp + "/missing";
        CHECK_THROWS(run_train(x), "does not exist");
        // stage 2 needs S <= w
        x = base;
        x.out = g_tmp + "/x.bin";
        x.w = 2;
        x.S = 3;
        CHECK_THROWS(run_train(x), "--sim-steps <= --window");
        CHECK(!file_exists(g_tmp + "/x.bin"), "no draft from a failed run");
    }

    if (g_failures == 0) (void)!system(("rm -rf " + g_tmp).c_str());
    return test_summary("test_train_loop");
}
