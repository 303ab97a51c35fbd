// datagen.cpp: see datagen.h.
#include "datagen.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "../backend/backend.h"
#include "../backend/ops.h"
#include "../core/comm.h"
#include "../core/common.h"
#include "../core/progress.h"
#include "../core/threadpool.h"
#include "../decode/sampling.h"
#include "../io/model_file.h"
#include "../model/draft.h"
#include "../model/llama.h"
#include "../tokenizer/tokenizer.h"
#include "dataset.h"
#include "prompts.h"

namespace beagle {

namespace {

struct Item {
    std::vector<int> prompt;  // token ids
    uint64_t seed;
};

// One slot of the batch: a sequence being generated.
struct Slot {
    int item = -1;            // index into the shard's items, -1 = free
    std::vector<int> toks;    // prompt + generated so far
    std::vector<uint16_t> st; // f16 states of the tokens already fed
    int fed = 0;              // tokens fed to the target
    int n_prompt = 0, n_gen = 0;
    bool final_fed = false;   // the last token is being fed (no sampling after it)
    std::unique_ptr<Sampler> sampler;
};

void check_options(const DatagenOptions& o) {
    BEAGLE_CHECK(!o.model.empty(), "beagle datagen: -m MODEL is required");
    BEAGLE_CHECK(!o.out_dir.empty(), "beagle datagen: -o DIR is required");
    BEAGLE_CHECK((o.sample > 0) != !o.prompts.empty(), "beagle datagen: give exactly one of --prompts FILE or --sample N");
    BEAGLE_CHECK(o.max_new >= 1 && o.batch >= 1 && o.batch <= 256 && o.shard_seqs >= 1 && o.max_prompt >= 1,
                 "beagle datagen: --max-new, --batch (1..256), --shard-seqs and --max-prompt must be >= 1");
}

// The work: one item per sampled text (BOS) or per prompt (chat template if the tokenizer has one),
// each with its own seed so the data do not depend on batching or on where a run was interrupted.
std::vector<Item> make_items(const DatagenOptions& o, const TokenizerSpec& spec, const Tokenizer& tok) {
    std::vector<Item> items;
    bool bos = spec.add_bos || spec.llama2c_spaces;
    if (o.sample > 0) {
        BEAGLE_CHECK(tok.bos() >= 0, "--sample needs a tokenizer with a BOS token");
        for (long i = 0; i < o.sample; i++) items.push_back({{tok.bos()}, (uint64_t)o.seed * 1000003ULL + i});
    } else {
        std::vector<Prompt> ps = load_prompts(o.prompts);
        long end = o.limit > 0 ? std::min<long>((long)ps.size(), o.skip + o.limit) : (long)ps.size();
        BEAGLE_CHECK(o.skip < end, "--skip %ld leaves no prompts (file has %zu)", o.skip, ps.size());
        bool chat = o.chat && !spec.chat_template.empty();
        for (long i = o.skip; i < end; i++) {
            std::vector<int> ids = chat ? tok.encode(apply_chat_template(tok, ps[i].text), bos, true)
                                        : tok.encode(ps[i].text, bos, false);
            if ((long)ids.size() > o.max_prompt) ids.resize(o.max_prompt);
            if (ids.empty()) continue;
            items.push_back({ids, (uint64_t)o.seed * 1000003ULL + i});
        }
    }
    BEAGLE_CHECK(!items.empty(), "no work: no prompts");
    return items;
}

// The directory and its meta.txt: a resumed run must use the same settings.
void open_data_dir(const DatagenOptions& o, const std::vector<std::pair<std::string, std::string>>& meta) {
    mkdir(o.out_dir.c_str(), 0755);
    if (!is_directory(o.out_dir)) fail("cannot create directory '%s'", o.out_dir.c_str());
    remove_stale_temps(o.out_dir + "/");  // half-written shards of a killed run
    std::string meta_path = o.out_dir + "/meta.txt";
    if (!file_exists(meta_path)) return write_meta(meta_path, meta);
    auto old = read_meta(meta_path);
    for (auto& kv : meta)
        for (auto& ov : old)
            if (ov.first == kv.first && ov.second != kv.second && kv.first != "model")
                fail("'%s' holds data made with %s = %s, this run has %s (use another -o DIR)", o.out_dir.c_str(),
                     kv.first.c_str(), ov.second.c_str(), kv.second.c_str());
}

// What generate_shard needs besides the items.
struct Generator {
    Llama& m;
    const Tokenizer& tok;
    const TokenizerSpec& spec;
    SamplingParams sp;
    int batch, max_batch, max_new, V, D;
    Progress& prog;
    int64_t done_seqs = 0, done_tokens = 0;
};

// Items [i0, i1) generated to completion, `batch` sequences at a time: each target pass feeds one
// token of every decoding sequence and fills the rest of the batch with prompt tokens.
std::vector<SeqData> generate_shard(Generator& g, const std::vector<Item>& items, size_t i0, size_t i1) {
    Llama& m = g.m;
    const int V = g.V, D = g.D, max_batch = g.max_batch;
    std::vector<int> bt, bs;
    std::vector<float> logits, states;
    std::vector<SeqData> out(i1 - i0);
    std::vector<Slot> slots(g.batch);
    size_t next = i0, finished = 0;
    while (finished < i1 - i0) {
        // fill free slots
        for (int s = 0; s < (int)slots.size(); s++) {
            Slot& sl = slots[s];
            if (sl.item >= 0 || next >= i1) continue;
            sl.item = (int)(next - i0);
            sl.toks = items[next].prompt;
            sl.st.clear();
            sl.fed = 0;
            sl.n_prompt = (int)sl.toks.size();
            sl.n_gen = 0;
            sl.final_fed = false;
            SamplingParams p = g.sp;
            p.seed = items[next].seed;
            sl.sampler.reset(new Sampler(p, V));
            m.reset_seq(s);
            next++;
        }
        // one batch: decoding slots feed 1 token, prefilling slots share what room is left
        bt.clear();
        bs.clear();
        for (int pass = 0; pass < 2; pass++)
            for (int s = 0; s < (int)slots.size(); s++) {
                Slot& sl = slots[s];
                if (sl.item < 0) continue;
                bool prefill = sl.fed < sl.n_prompt;
                if ((pass == 0) == prefill) continue;  // decoders first
                int want = (int)sl.toks.size() - sl.fed;
                int take = std::min(want, max_batch - (int)bt.size());
                for (int k = 0; k < take; k++) {
                    bt.push_back(sl.toks[sl.fed + k]);
                    bs.push_back(s);
                }
            }
        if (bt.empty()) fail("datagen: internal error: empty batch");
        int T = (int)bt.size();
        logits.resize((size_t)T * V);
        states.resize((size_t)T * D);
        m.forward_multi(bt.data(), bs.data(), T, logits.data(), states.data());
        // consume rows per slot (rows of one slot are contiguous and in order)
        for (int r = 0; r < T;) {
            int s = bs[r], r1 = r;
            while (r1 < T && bs[r1] == s) r1++;
            Slot& sl = slots[s];
            for (int k = r; k < r1; k++)
                for (int d = 0; d < D; d++) sl.st.push_back(f32_to_f16(states[(size_t)k * D + d]));
            sl.fed += r1 - r;
            g.done_tokens += r1 - r;
            if (sl.fed == (int)sl.toks.size()) {
                if (sl.final_fed) {  // complete
                    SeqData& sd = out[sl.item];
                    sd.tokens.assign(sl.toks.begin(), sl.toks.end());
                    sd.states.swap(sl.st);
                    sd.n_prompt = sl.n_prompt;
                    sl.item = -1;
                    finished++;
                    g.done_seqs++;
                } else {
                    int t = sl.sampler->sample(&logits[(size_t)(r1 - 1) * V]);
                    sl.toks.push_back(t);
                    sl.n_gen++;
                    bool stop = g.tok.is_eog(t) || (g.spec.llama2c_spaces && t == g.tok.bos());
                    if (stop || sl.n_gen >= g.max_new) sl.final_fed = true;
                }
            }
            r = r1;
        }
        g.prog.update(g.done_seqs, strfmt("%lld tokens", (long long)g.done_tokens));
    }
    return out;
}

}  // namespace

void run_datagen(const DatagenOptions& o) {
    check_options(o);
    std::unique_ptr<ModelFile> mf = load_model(o.model);
    if (o.f32_weights) dequantize_weights_f32(*mf);
    TokenizerSpec spec = o.tokenizer.empty() ? mf->tokenizer : load_tokenizer_file(o.tokenizer);
    if (spec.kind == TokenizerSpec::NONE) fail("model '%s' carries no tokenizer: pass one with -z", o.model.c_str());
    std::unique_ptr<Tokenizer> tok = Tokenizer::create(spec);
    if (tok->vocab_size() != mf->config.vocab_size)
        fail("tokenizer does not fit model '%s': %d tokens vs vocabulary %d", o.model.c_str(), tok->vocab_size(), mf->config.vocab_size);
    const int V = mf->config.vocab_size, D = mf->config.dim;
    uint64_t tok_hash = tokenizer_fingerprint(spec);
    std::vector<Item> items = make_items(o, spec, *tok);

    // ranks (mpirun): rank r writes shards r, r + P, r + 2P, ...; each shard's bytes do not depend on
    // who writes it (per-sequence seeds, batch-invariant target). Rank 0 creates the directory first.
    std::unique_ptr<Comm> comm = make_comm();
    const int rank = comm->rank(), n_ranks = comm->size();
    double temp = o.temperature >= 0 ? o.temperature : (o.sample > 0 ? 1.0 : 0.0);
    const std::vector<std::pair<std::string, std::string>> meta = {
        {"format", "beagle-data 1"},
        {"model", o.model},
        {"dim", std::to_string(D)},
        {"vocab", std::to_string(V)},
        {"tokenizer_hash", strfmt("%016llx", (unsigned long long)tok_hash)},
        {"source", o.sample > 0 ? strfmt("sample %ld", o.sample) : o.prompts},
        {"skip", std::to_string(o.skip)},
        {"limit", std::to_string(o.limit)},
        {"items", std::to_string(items.size())},
        {"max_new", std::to_string(o.max_new)},
        {"max_prompt", std::to_string(o.max_prompt)},
        {"temperature", strfmt("%g", temp)},
        {"top_p", strfmt("%g", o.top_p)},
        {"seed", std::to_string(o.seed)},
        {"shard_seqs", std::to_string(o.shard_seqs)},
        {"f32_weights", o.f32_weights ? "1" : "0"},
    };
    if (rank == 0) open_data_dir(o, meta);
    comm->barrier();
    if (rank != 0) open_data_dir(o, meta);

    int threads = o.threads > 0 ? (int)o.threads : default_threads();
    std::unique_ptr<Ops> ops = make_ops("", threads);
    int max_prompt_len = 0;
    for (auto& it : items) max_prompt_len = std::max(max_prompt_len, (int)it.prompt.size());
    int ctx = max_prompt_len + (int)o.max_new + 1;
    const int max_batch = std::max(64, (int)o.batch);
    Llama m(*mf, *ops, ctx, max_batch, (int)o.batch);
    size_t n_shards = (items.size() + o.shard_seqs - 1) / o.shard_seqs;
    int64_t my_items = 0;
    for (size_t sh = rank; sh < n_shards; sh += n_ranks)
        my_items += (int64_t)(std::min(items.size(), (sh + 1) * o.shard_seqs) - sh * o.shard_seqs);
    Progress prog(n_ranks > 1 ? strfmt("datagen rank %d/%d", rank, n_ranks) : "datagen", my_items, "seq");
    Generator g{m, *tok, spec, SamplingParams(), (int)o.batch, max_batch, (int)o.max_new, V, D, prog};
    g.sp.temperature = (float)temp;
    g.sp.top_p = (float)o.top_p;

    for (size_t sh = rank; sh < n_shards; sh += n_ranks) {
        std::string path = strfmt("%s/shard-%05zu.bin", o.out_dir.c_str(), sh);
        size_t i0 = sh * o.shard_seqs, i1 = std::min(items.size(), i0 + o.shard_seqs);
        if (file_exists(path)) {  // resume: a shard exists only if it was completely written
            g.done_seqs += (int64_t)(i1 - i0);
            prog.update(g.done_seqs, "resumed");
            continue;
        }
        write_shard(path, D, V, tok_hash, generate_shard(g, items, i0, i1));
    }
    prog.finish(strfmt("%lld tokens, %zu shards in %s", (long long)g.done_tokens,
                       n_ranks > 1 ? (n_shards + n_ranks - 1 - rank) / n_ranks : n_shards, o.out_dir.c_str()));
    comm->barrier();  // the directory is complete when every rank returns
}

}  // namespace beagle
