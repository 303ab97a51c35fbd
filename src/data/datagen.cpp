// datagen.cpp: see datagen.h.
#include "datagen.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "../backend/backend.h"
#include "../backend/ops.h"
#include "../core/comm.h"
#include "../core/common.h"
#include "../core/progress.h"
#include "../core/rng.h"
#include "../core/sha256.h"
#include "../core/threadpool.h"
#include "../decode/sampling.h"
#include "../io/json.h"
#include "../io/model_file.h"
#include "../model/draft.h"
#include "../model/llama.h"
#include "../tokenizer/chat_template.h"
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
    std::vector<uint16_t> xs; // f16 state-layer rows of the tokens already fed (--state-layers)
    int fed = 0;              // tokens fed to the target
    int n_prompt = 0, n_gen = 0;
    bool final_fed = false;   // the last token is being fed (no sampling after it)
    std::unique_ptr<Sampler> sampler;
};

void check_options(const DatagenOptions& o) {
    BEAGLE_CHECK(!o.model.empty(), "beagle datagen: -m MODEL is required");
    BEAGLE_CHECK(!o.out_dir.empty(), "beagle datagen: -o DIR is required");
    BEAGLE_CHECK((o.sample > 0) + !o.prompts.empty() + (o.self_prompts > 0) == 1,
                 "beagle datagen: give exactly one of --prompts FILE, --sample N or --self-prompts N");
    BEAGLE_CHECK(o.prompts.empty() ? o.skip == 0 && o.limit == 0 : true, "beagle datagen: --skip and --limit apply to --prompts only");
    BEAGLE_CHECK(o.prompt_temp > 0 && o.prompt_top_p > 0 && o.prompt_top_p <= 1,
                 "beagle datagen: --prompt-temp must be > 0 and --prompt-top-p in (0, 1] (the user turns are sampled)");
    BEAGLE_CHECK(o.state_layers.empty() || o.keep_states,
                 "beagle datagen: --state-layers keeps states: add --keep-states (tokens-only data needs no layers: beagle "
                 "train --state-layers computes them)");
    BEAGLE_CHECK(o.max_new >= 1 && o.batch >= 1 && o.batch <= 256 && o.shard_seqs >= 1 && o.max_prompt >= 1,
                 "beagle datagen: --max-new, --batch (1..256), --shard-seqs and --max-prompt must be >= 1");
}

// The prompts go through the chat template: an instruct model's (or --chat-template's), unless --no-chat.
bool uses_chat(const DatagenOptions& o, const TokenizerSpec& spec) {
    return o.chat && (!spec.chat_template.empty() || !spec.chat_template_name.empty());
}

// meta.txt's template: the chat family the prompts were rendered in, or "none" (raw text, texts from BOS).
std::string chat_family_used(const DatagenOptions& o, const TokenizerSpec& spec) {
    return o.sample == 0 && uses_chat(o, spec) ? chat_family_name(resolve_chat_family(spec)) : "none";
}

// The work: one item per sampled text (BOS) or per prompt (chat template if the tokenizer has one),
// each with its own seed so the data do not depend on batching or on where a run was interrupted.
// --self-prompts: the prompts are left empty here (draw_user_turns writes them shard by shard).
std::vector<Item> make_items(const DatagenOptions& o, const TokenizerSpec& spec, const Tokenizer& tok) {
    std::vector<Item> items;
    const bool bos = spec.prompt_bos();
    auto seed_of = [&](long i) { return (uint64_t)o.seed * 1000003ULL + i; };  // item i's stream
    if (o.self_prompts > 0) {
        BEAGLE_CHECK(uses_chat(o, spec),
                     "--self-prompts needs a chat template (an instruct model or --chat-template, no --no-chat)");
        for (long i = 0; i < o.self_prompts; i++) items.push_back({{}, seed_of(i)});
    } else if (o.sample > 0) {
        BEAGLE_CHECK(tok.bos() >= 0, "--sample needs a tokenizer with a BOS token");
        for (long i = 0; i < o.sample; i++) items.push_back({{tok.bos()}, seed_of(i)});
    } else {
        std::vector<Prompt> ps = load_prompts(o.prompts);
        long end = o.limit > 0 ? std::min<long>((long)ps.size(), o.skip + o.limit) : (long)ps.size();
        BEAGLE_CHECK(o.skip < end, "--skip %ld leaves no prompts (file has %zu)", o.skip, ps.size());
        const bool chat = uses_chat(o, spec);
        for (long i = o.skip; i < end; i++) {
            std::vector<int> ids = chat ? tok.encode(apply_chat_template(tok, ps[i].text), bos, true)
                                        : tok.encode(ps[i].text, bos, false);
            if ((long)ids.size() > o.max_prompt) ids.resize(o.max_prompt);
            if (ids.empty()) continue;
            items.push_back({ids, seed_of(i)});
        }
    }
    BEAGLE_CHECK(!items.empty(), "no work: no prompts");
    return items;
}

// What generate_shard needs besides the items.
struct Generator {
    Llama& m;
    const Tokenizer& tok;
    const TokenizerSpec& spec;
    SamplingParams sp;
    int batch, max_batch, max_new, V, D;
    Progress& prog;
    bool keep_states = true;  // false: tokens only (the last one not fed)
    bool user_turns = false;  // drawing the user turns of --self-prompts (not counted as sequences done)
    int XW = 0;               // --state-layers: floats of a row's extras (E x D)
    int64_t done_seqs = 0, done_tokens = 0, redrawn = 0;
};

// The token ends the sequence (end of turn; a llama2.c model's BOS starts the next story).
bool ends(const Generator& g, int t) {
    return g.tok.is_eog(t) || (g.spec.llama2c_spaces && t == g.tok.bos());
}

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
            sl.xs.clear();
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
        const int W = D + g.XW;  // a state row: f, then the state layers (Llama::state_width)
        states.resize((size_t)T * W);
        m.forward_multi(bt.data(), bs.data(), T, logits.data(), states.data());
        // consume rows per slot (rows of one slot are contiguous and in order)
        for (int r = 0; r < T;) {
            int s = bs[r], r1 = r;
            while (r1 < T && bs[r1] == s) r1++;
            Slot& sl = slots[s];
            if (g.keep_states)
                for (int k = r; k < r1; k++) {  // a row: its true state, then its state-layer rows
                    const float* row = &states[(size_t)k * W];
                    for (int d = 0; d < D; d++) sl.st.push_back(f32_to_f16(row[d]));
                    for (int d = D; d < W; d++) sl.xs.push_back(f32_to_f16(row[d]));
                }
            sl.fed += r1 - r;
            g.done_tokens += r1 - r;
            if (sl.fed == (int)sl.toks.size() && !sl.final_fed) {
                int t = sl.sampler->sample(&logits[(size_t)(r1 - 1) * V]);
                sl.toks.push_back(t);
                sl.n_gen++;
                if (ends(g, t) || sl.n_gen >= g.max_new) sl.final_fed = true;
            }
            // complete: the last token fed (its state is data), or only sampled when no states are kept
            if (sl.final_fed && sl.fed + (g.keep_states ? 0 : 1) == (int)sl.toks.size()) {
                SeqData& sd = out[sl.item];
                sd.tokens.assign(sl.toks.begin(), sl.toks.end());
                sd.states.swap(sl.st);
                sd.extras.swap(sl.xs);
                sd.n_prompt = sl.n_prompt;
                sl.item = -1;
                finished++;
                g.done_seqs += !g.user_turns;
            }
            r = r1;
        }
        g.prog.update(g.done_seqs, strfmt("%lld tokens", (long long)g.done_tokens));
    }
    return out;
}

// --self-prompts (Magpie): the user turns of items [i0, i1), written by the target itself. Draw k of
// sequence i continues the chat template's user prefix (`prefix`, the tokens of chat_user_prefix) with
// its own stream, seeded from item i's seed (--seed, i) and k, at --prompt-temp / --prompt-top-p, up to
// its end-of-turn token. A turn that reaches --max-prompt tokens without ending, has fewer than kMinTurn tokens, or
// does not decode to UTF-8 text is dropped and sequence i draws again with k + 1: every sequence's
// turn depends only on the seed and its index, so shards stay independent (resume, ranks, batch size).
// Sets each item's prompt to the chat prompt of its turn, built as --prompts builds it; returns the turns.
const int kMinTurn = 4, kMaxDraws = 100;

std::vector<std::string> draw_user_turns(Generator& g, const DatagenOptions& o, const std::vector<int>& prefix,
                                         size_t max_chat, std::vector<Item>& items, size_t i0, size_t i1) {
    const SamplingParams answer_sp = g.sp;
    const int answer_max_new = g.max_new;
    g.sp.temperature = (float)o.prompt_temp;
    g.sp.top_p = (float)o.prompt_top_p;
    g.max_new = (int)o.max_prompt;
    const bool keep_states = g.keep_states;
    g.keep_states = false;
    g.user_turns = true;
    std::vector<std::string> turns(i1 - i0);
    std::vector<size_t> todo;
    for (size_t i = i0; i < i1; i++) todo.push_back(i);
    for (int k = 0; !todo.empty(); k++) {
        if (k == kMaxDraws)
            fail("--self-prompts: sequence %zu wrote no usable user turn in %d draws (ended by the end-of-turn token "
                 "within --max-prompt %ld tokens, at least %d tokens); raise --max-prompt or change --prompt-temp",
                 todo[0], kMaxDraws, o.max_prompt, kMinTurn);
        std::vector<Item> draws;
        for (size_t i : todo) draws.push_back({prefix, TrainRng(items[i].seed * 1000003ULL + k).next()});
        std::vector<SeqData> got = generate_shard(g, draws, 0, draws.size());
        std::vector<size_t> again;
        for (size_t j = 0; j < todo.size(); j++) {
            std::vector<int> user(got[j].tokens.begin() + prefix.size(), got[j].tokens.end());
            bool ended = !user.empty() && ends(g, user.back());
            if (ended) user.pop_back();
            std::string text;
            for (size_t q = 0; q < user.size(); q++) text += g.tok.decode_token(q ? user[q - 1] : prefix.back(), user[q]);
            std::vector<int> ids;
            if (ended && (int)user.size() >= kMinTurn && !text.empty() && utf8_valid(text))
                ids = g.tok.encode(apply_chat_template(g.tok, text), g.spec.prompt_bos(), true);
            // (a chat prompt over max_chat would need a turn re-encoded to more tokens than were sampled)
            if (ids.empty() || ids.size() > max_chat) {
                again.push_back(todo[j]);
                g.redrawn++;
                continue;
            }
            items[todo[j]].prompt = ids;
            turns[todo[j] - i0] = text;
        }
        todo.swap(again);
    }
    g.sp = answer_sp;
    g.max_new = answer_max_new;
    g.keep_states = keep_states;
    g.user_turns = false;
    return turns;
}

}  // namespace

void run_datagen(const DatagenOptions& o) {
    check_options(o);
    std::unique_ptr<ModelFile> mf = load_model(o.model);
    if (o.f32_weights) dequantize_weights_f32(*mf);
    TokenizerSpec spec = o.tokenizer.empty() ? mf->tokenizer : load_tokenizer_file(o.tokenizer);
    if (spec.kind == TokenizerSpec::NONE) fail("model '%s' carries no tokenizer: pass one with -z", o.model.c_str());
    spec.chat_template_name = o.chat_template;
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
    std::vector<std::pair<std::string, std::string>> meta = {
        {"format", "beagle-data 1"},
        {"model", o.model},
        {"dim", std::to_string(D)},
        {"vocab", std::to_string(V)},
        {"tokenizer_hash", strfmt("%016llx", (unsigned long long)tok_hash)},
        {"source", o.sample > 0 ? strfmt("sample %ld", o.sample) : o.self_prompts > 0 ? strfmt("self-prompts %ld", o.self_prompts) : o.prompts},
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
        {"states", o.keep_states ? "kept" : "none"},
        // the backends' kernels sum in different orders, so their answers differ at near ties: a directory is
        // resumed on the backend that began it (older directories, without the key, on either)
        {"backend", selected_backend()},
        {"target_sha256", sha256_file(o.model)},
        {"template", chat_family_used(o, spec)},
    };
    if (!o.state_layers.empty()) meta.push_back({"state_layers", format_layer_list(o.state_layers)});  // absent: none
    if (o.self_prompts > 0) {
        meta.push_back({"prompt_temp", strfmt("%g", o.prompt_temp)});
        meta.push_back({"prompt_top_p", strfmt("%g", o.prompt_top_p)});
    }
    if (rank == 0) open_data_dir(o.out_dir, meta);
    comm->barrier();
    if (rank != 0) open_data_dir(o.out_dir, meta);

    int threads = o.threads > 0 ? (int)o.threads : default_threads();
    std::unique_ptr<Ops> ops = make_ops("", threads);
    int max_prompt_len = 0;
    for (auto& it : items) max_prompt_len = std::max(max_prompt_len, (int)it.prompt.size());
    // --self-prompts: the user prefix the target continues, and the longest chat prompt a turn may give
    std::vector<int> user_prefix;
    if (o.self_prompts > 0) {
        user_prefix = tok->encode(chat_user_prefix(*tok), spec.prompt_bos(), true);
        max_prompt_len = (int)(tok->encode(apply_chat_template(*tok, ""), spec.prompt_bos(), true).size() + o.max_prompt);
    }
    int ctx = max_prompt_len + (int)o.max_new + 1;
    const int max_batch = std::max(64, (int)o.batch);
    Llama m(*mf, *ops, ctx, max_batch, (int)o.batch);
    m.set_state_layers(o.state_layers);
    size_t n_shards = (items.size() + o.shard_seqs - 1) / o.shard_seqs;
    int64_t my_items = 0;
    for (size_t sh = rank; sh < n_shards; sh += n_ranks)
        my_items += (int64_t)(std::min(items.size(), (sh + 1) * o.shard_seqs) - sh * o.shard_seqs);
    Progress prog(n_ranks > 1 ? strfmt("datagen rank %d/%d", rank, n_ranks) : "datagen", my_items, "seq");
    Generator g{m, *tok, spec, SamplingParams(), (int)o.batch, max_batch, (int)o.max_new, V, D, prog};
    g.XW = (int)o.state_layers.size() * D;
    g.keep_states = o.keep_states;
    g.sp.temperature = (float)temp;
    g.sp.top_p = (float)o.top_p;

    for (size_t sh = rank; sh < n_shards; sh += n_ranks) {
        std::string path = strfmt("%s/shard-%05zu.bin", o.out_dir.c_str(), sh);
        size_t i0 = sh * o.shard_seqs, i1 = std::min(items.size(), i0 + o.shard_seqs);
        std::string turns_path = strfmt("%s/self_prompts-%05zu.jsonl", o.out_dir.c_str(), sh);
        bool need_turns = o.self_prompts > 0 && !file_exists(turns_path);
        if (file_exists(path) && !need_turns) {  // resume: a shard exists only if it was completely written
            g.done_seqs += (int64_t)(i1 - i0);
            prog.resumed(g.done_seqs);
            continue;
        }
        if (o.self_prompts > 0) {  // the shard's user turns first, written before the shard (atomically too)
            std::string jsonl;
            for (const std::string& t : draw_user_turns(g, o, user_prefix, max_prompt_len, items, i0, i1))
                jsonl += "{\"prompt\": " + json_quote(t) + "}\n";
            if (need_turns) write_file_atomic(turns_path, jsonl.data(), jsonl.size());
        }
        if (file_exists(path)) continue;
        if (o.keep_states) write_shard(path, D, V, tok_hash, generate_shard(g, items, i0, i1), o.state_layers);
        else write_token_shard(path, D, V, tok_hash, generate_shard(g, items, i0, i1));
    }
    prog.finish(strfmt("%lld tokens, %zu shards in %s%s", (long long)g.done_tokens,
                       n_ranks > 1 ? (n_shards + n_ranks - 1 - rank) / n_ranks : n_shards, o.out_dir.c_str(),
                       o.self_prompts > 0 ? strfmt(", %lld user turns redrawn", (long long)g.redrawn).c_str() : ""));
    comm->barrier();  // the directory is complete when every rank returns (rank 0 last: self_prompts.jsonl)
    if (o.self_prompts > 0 && rank == 0) {  // the shards' user turns in one file, in sequence order
        std::string all;
        for (size_t sh = 0; sh < n_shards; sh++) all += read_file(strfmt("%s/self_prompts-%05zu.jsonl", o.out_dir.c_str(), sh));
        write_file_atomic(o.out_dir + "/self_prompts.jsonl", all.data(), all.size());
    }
}

}  // namespace beagle
