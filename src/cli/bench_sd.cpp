// bench_sd.cpp: `beagle bench-sd`: the speculative-decoding benchmark. Greedy, batch 1, over prompt
// categories (Spec-Bench JSONL), modes none / lookup / chain / tree (/ hybrid) in the same process: tau,
// acceptance by depth, tokens/s, speedup over plain decoding of the same prompts, peak RSS; every
// mode's output is also checked token-for-token against plain greedy decoding (exactness).
// Writes one JSON object (-o FILE) and two charts. Steps: parse -> set up -> (resume) run -> report.
// With -o FILE a killed run resumes: FILE.partial keeps every finished prompt (see "Resuming" below).
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../core/common.h"
#include "../core/crc32.h"
#include "../data/prompts.h"
#include "../decode/drafters.h"
#include "../decode/session.h"
#include "../decode/speculative.h"
#include "../decode/verify_cost.h"
#include "../io/json_write.h"
#include "../io/plot.h"
#include "args.h"
#include "draft_options.h"
#include "commands.h"

namespace beagle {

namespace {

// The command line of `beagle bench-sd`.
struct BenchSdOptions {
    std::string model, tok_path, draft, model_draft, prompts_path, out, modes_s = "none,lookup,chain,tree", cats_s;
    std::string total_tokens = "auto";
    long tree_nodes = 0;  // --total-tokens as a number (0: auto)
    long per_cat = 5, n = 256, threads = 2, ctx = 2048, random_draft = -1, repeat = 1;
    bool no_chat = false;
    std::string chat_template;  // --chat-template NAME
    std::string accept = "exact";  // exact (greedy, lossless) | typical (Medusa-2's rule at --temp: lossy)
    double temp = 0;
    long seed = 1;
    DraftOptions d;
    std::vector<std::string> modes, cats;  // --modes, --categories split at commas
    std::vector<double> verify_cost;       // the start-up verify cost table (set_up_drafters), for the JSON
};

// "a,b" -> {"a", "b"}; every comma separates, so "" -> {""} and "a," -> {"a", ""}.
std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> parts;
    for (size_t b = 0; b <= s.size();) {
        size_t e = s.find(',', b);
        if (e == std::string::npos) e = s.size();
        parts.push_back(s.substr(b, e - b));
        b = e + 1;
    }
    return parts;
}

bool has_mode(const BenchSdOptions& o, const char* m) { return std::count(o.modes.begin(), o.modes.end(), m) > 0; }

// Parses and checks argv into *o. Returns false after --help.
bool parse_options(int argc, char** argv, BenchSdOptions* o) {
    Args a("bench-sd", "-m MODEL -d DRAFT --prompts FILE [options]",
           "Speculative decoding benchmark (greedy, batch 1): per category and mode, tau, acceptance by depth,\n"
           "tokens/s and speedup over plain decoding measured in the same process; checks every output equals\n"
           "plain greedy decoding. Prints one JSON object (and writes it to -o FILE).");
    a.str("-m,--model", &o->model, "target model");
    a.str("-z,--tokenizer", &o->tok_path, "tokenizer file if the model has none");
    a.str("-d,--draft", &o->draft, "Beagle draft (needed for chain and tree)");
    a.integer("--random-draft", &o->random_draft, "instead of -d: a random-weights draft with this seed (exactness runs:\n"
                                                   "                               rejection everywhere)");
    a.str("-md,--model-draft", &o->model_draft, "an independent draft model (the target's vocabulary) for modes md-chain, md-tree\n"
          "and md-auto: chain, tree and auto with it instead of -d, side by side with them");
    a.str("--prompts", &o->prompts_path, "prompt file (Spec-Bench / MT-Bench JSONL, ...)");
    a.str("--categories", &o->cats_s, "comma-separated categories to run (default: all in the file)");
    a.integer("--per-category", &o->per_cat, "prompts per category");
    a.str("--modes", &o->modes_s, "comma-separated: none, lookup, chain, tree, hybrid (tree + lookup candidates), auto\n"
          "(per round hybrid or lookup / plain, whichever pays here: the default of generate -d)");
    a.integer("-n,--n-predict", &o->n, "tokens generated per prompt");
    a.integer("-t,--threads", &o->threads, "CPU threads");
    a.integer("-c,--ctx-size", &o->ctx, "context length");
    a.integer("--repeat", &o->repeat, "run each prompt's modes N times in turn and keep each mode's fastest run; every\n"
              "repeat starts a mode's round policy from its state before the prompt, and the state after the first\n"
              "repeat goes on (as if the prompt ran once): a prompt's speedup then says less about one burst of a\n"
              "shared machine");
    o->d.declare(a);
    a.str("--total-tokens", &o->total_tokens, "tree size or 'auto'");
    a.str("-o,--output", &o->out, "write the JSON here too; FILE.partial keeps finished prompts until then, and a\n"
          "                               run with the same options resumes from it (a kill loses only the prompt in flight)");
    a.flag("--no-chat", &o->no_chat, "prompts as plain text (default: the chat template if the tokenizer has one)");
    a.str("--chat-template", &o->chat_template, (std::string("the ") + "chat template family instead of the file's: " + chat_family_names() + "\n(the file's template, else ChatML when the vocabulary has <|im_start|>; docs/usage.md)").c_str());
    a.str("--accept", &o->accept, "exact (default: greedy, every output checked against plain greedy) | typical: Medusa-2's\n"
          "typical acceptance at --temp, LOSSY (accept.h); 'mismatches' then counts the outputs that differ from plain\n"
          "greedy decoding, which is no error");
    a.number("--temp", &o->temp, "--accept typical: the temperature of its target distribution (> 0)");
    a.integer("-s,--seed", &o->seed, "--accept typical: the seed of every prompt's sampler (the first token)");
    if (!a.parse(argc, argv)) return false;
    if (o->accept != "exact" && o->accept != "typical")
        fail("beagle bench-sd: --accept must be exact or typical, got '%s'", o->accept.c_str());
    if (o->accept == "typical" && !(o->temp > 0))
        fail("beagle bench-sd: --accept typical needs --temp > 0 (at temperature 0 it is the greedy rule)");
    if (o->accept == "exact" && o->temp != 0)
        fail("beagle bench-sd: the benchmark is greedy; --temp goes with --accept typical");
    if (o->model.empty() || o->prompts_path.empty()) fail("beagle bench-sd: -m MODEL and --prompts FILE are required");
    o->modes = split_commas(o->modes_s);  // an empty one ("a,,b", "a,") is an unknown mode
    for (const std::string& m : o->modes) {
        if (m == "md-chain" || m == "md-tree" || m == "md-auto") {
            if (o->model_draft.empty()) fail("beagle bench-sd: mode %s needs a draft model (-md MODEL)", m.c_str());
            continue;
        }
        if (m != "none" && m != "lookup" && m != "chain" && m != "tree" && m != "hybrid" && m != "auto")
            fail("beagle bench-sd: unknown mode '%s' (expected none, lookup, chain, tree, hybrid, auto, md-chain, md-tree or "
                 "md-auto)", m.c_str());
        if ((m == "chain" || m == "tree" || m == "hybrid" || m == "auto") && o->draft.empty() && o->random_draft < 0)
            fail("beagle bench-sd: mode %s needs -d DRAFT (or --random-draft SEED)", m.c_str());
    }
    if (!o->cats_s.empty()) o->cats = split_commas(o->cats_s);
    if (!o->draft.empty() && o->random_draft >= 0) fail("beagle bench-sd: give -d DRAFT or --random-draft SEED, not both");
    o->tree_nodes = auto_or_integer(o->total_tokens, 2, 1024, "beagle bench-sd: --total-tokens");
    if (o->tree_nodes > 0 && (has_mode(*o, "auto") || has_mode(*o, "md-auto")))
        fail("beagle bench-sd: mode auto chooses from measured costs: it needs --total-tokens auto");
    if (o->repeat < 1 || o->repeat > 100) fail("beagle bench-sd: --repeat %ld: expected 1 to 100", o->repeat);
    o->d.check("beagle bench-sd");
    return true;
}

// Spec-Bench's "mt_bench" task is the 80 MT-Bench questions, filed under their 8 MT-Bench categories.
bool is_mt_bench_category(const std::string& c) {
    for (const char* m : {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"})
        if (c == m) return true;
    return false;
}

// The prompts to run: up to --per-category of each selected category, categories in file order.
struct PromptSet {
    std::vector<std::string> order;
    std::map<std::string, std::vector<Prompt>> by_cat;
    int size() const {
        int n = 0;
        for (const auto& kv : by_cat) n += (int)kv.second.size();
        return n;
    }
};

PromptSet select_prompts(const BenchSdOptions& o) {
    PromptSet ps;
    for (const Prompt& p : load_prompts(o.prompts_path)) {
        std::string c = p.category.empty() ? "all" : p.category;
        if (!o.cats.empty() && std::find(o.cats.begin(), o.cats.end(), c) == o.cats.end()) continue;
        if (!ps.by_cat.count(c)) ps.order.push_back(c);
        if ((long)ps.by_cat[c].size() < o.per_cat) ps.by_cat[c].push_back(p);
    }
    if (ps.order.empty()) fail("beagle bench-sd: no prompts match the categories");
    return ps;
}

// One drafter per speculative mode run, all from the same draft (-d, or --random-draft) and, with
// --total-tokens auto, the same verify cost measured here (tree, hybrid and lookup send, each round,
// what is worth its cost). Sets o->draft to the random draft's description.
std::map<std::string, std::unique_ptr<Drafter>> set_up_drafters(Session& s, BenchSdOptions* o) {
    BeagleDraftParams p = o->d.params();
    if (o->tree_nodes > 0) p.total_tokens = (int)o->tree_nodes;
    else if (has_mode(*o, "tree") || has_mode(*o, "hybrid") || has_mode(*o, "lookup") || has_mode(*o, "auto") ||
             has_mode(*o, "md-tree") || has_mode(*o, "md-auto"))
        p.verify_cost = measure_verify_cost(s, 64, (int)std::max(o->d.depth, o->d.gamma) + 1);
    o->verify_cost = p.verify_cost;
    DraftWeights w;
    if (o->random_draft >= 0) {
        w.init_random(draft_config_for_target(s.mf->config, s.tok->spec()), (uint64_t)o->random_draft);
        o->draft = strfmt("random weights, seed %ld", o->random_draft);
    } else if (!o->draft.empty()) {
        w = load_draft_for(s, o->draft);
    }
    std::shared_ptr<const ModelFile> dm;
    if (!o->model_draft.empty()) dm = load_draft_model_for(s, o->model_draft);
    std::map<std::string, std::unique_ptr<Drafter>> drafters;
    for (const std::string& m : o->modes) {
        if (m == "none" || drafters.count(m)) continue;
        drafters[m] = m.rfind("md-", 0) == 0 ? make_drafter(s, m.substr(3), p, dm) : make_drafter(s, m, p, &w, o->draft);
    }
    return drafters;
}

// Totals of one (category, mode) cell.
struct Acc {
    int prompts = 0, tokens = 0, passes = 0, mismatches = 0;
    double seconds = 0, draft_s = 0, tau_tokens = 0, rounds = 0, drafted = 0;
    std::vector<long> reached, accepted;
    std::map<std::string, long> rounds_by_mode, draft_threads, draft_depth;
    // One prompt's totals in one mode.
    static Acc of(const SpecStats& st, bool mismatch) {
        Acc a;
        for (const auto& kv : st.rounds_by_mode) a.rounds_by_mode[kv.first] += kv.second;
        for (const auto& kv : st.draft_threads) a.draft_threads[kv.first] += kv.second;
        for (const auto& kv : st.draft_depth) a.draft_depth[kv.first] += kv.second;
        a.prompts = 1;
        a.mismatches = mismatch;
        a.tokens = st.gen_tokens;
        a.passes = st.target_passes;
        a.seconds = st.decode_s;
        a.draft_s = st.draft_s;
        a.tau_tokens = st.gen_tokens_after_root;
        a.rounds = st.rounds;
        a.drafted = st.drafted;
        a.reached.assign(st.reached_by_depth.begin(), st.reached_by_depth.end());
        a.accepted.assign(st.accept_by_depth.begin(), st.accept_by_depth.end());
        return a;
    }
    void add(const Acc& o) {
        for (const auto& kv : o.rounds_by_mode) rounds_by_mode[kv.first] += kv.second;
        for (const auto& kv : o.draft_threads) draft_threads[kv.first] += kv.second;
        for (const auto& kv : o.draft_depth) draft_depth[kv.first] += kv.second;
        prompts += o.prompts;
        mismatches += o.mismatches;
        tokens += o.tokens;
        passes += o.passes;
        seconds += o.seconds;
        draft_s += o.draft_s;
        tau_tokens += o.tau_tokens;
        rounds += o.rounds;
        drafted += o.drafted;
        if (reached.size() < o.reached.size()) {
            reached.resize(o.reached.size());
            accepted.resize(o.reached.size());
        }
        for (size_t k = 0; k < o.reached.size(); k++) {
            reached[k] += o.reached[k];
            accepted[k] += o.accepted[k];
        }
    }
    // Every field as it is (doubles round-trip exactly through nlohmann's shortest form): a line of
    // FILE.partial. from_record throws Json::exception on a missing field or a wrong type.
    Json record() const {
        Json j;
        j["prompts"] = prompts, j["tokens"] = tokens, j["passes"] = passes, j["mismatches"] = mismatches;
        j["seconds"] = seconds, j["draft_s"] = draft_s, j["tau_tokens"] = tau_tokens, j["rounds"] = rounds;
        j["drafted"] = drafted, j["reached"] = reached, j["accepted"] = accepted;
        j["rounds_by_mode"] = rounds_by_mode, j["draft_threads"] = draft_threads, j["draft_depth"] = draft_depth;
        return j;
    }
    static Acc from_record(const Json& j) {
        Acc a;
        j.at("prompts").get_to(a.prompts), j.at("tokens").get_to(a.tokens), j.at("passes").get_to(a.passes);
        j.at("mismatches").get_to(a.mismatches), j.at("seconds").get_to(a.seconds), j.at("draft_s").get_to(a.draft_s);
        j.at("tau_tokens").get_to(a.tau_tokens), j.at("rounds").get_to(a.rounds), j.at("drafted").get_to(a.drafted);
        j.at("reached").get_to(a.reached), j.at("accepted").get_to(a.accepted);
        j.at("rounds_by_mode").get_to(a.rounds_by_mode), j.at("draft_threads").get_to(a.draft_threads);
        j.at("draft_depth").get_to(a.draft_depth);
        return a;
    }
    double tok_s() const { return seconds > 0 ? tokens / seconds : 0; }
    double tau() const { return rounds > 0 ? tau_tokens / rounds : 1.0; }
    double nodes_per_verify() const { return rounds > 0 ? 1.0 + drafted / rounds : 1.0; }
    Json json(double plain_tok_s) const {
        Json accept = Json::array();
        for (size_t k = 0; k < reached.size(); k++) accept.push_back(rounded(reached[k] ? (double)accepted[k] / reached[k] : 0.0, 4));
        Json j;
        j["prompts"] = prompts;
        j["tokens"] = tokens;
        j["target_passes"] = passes;
        j["tau"] = rounded(tau(), 4);
        j["nodes_per_verify"] = rounded(nodes_per_verify(), 3);
        j["accept_by_depth"] = accept;
        j["ms_per_pass"] = rounded(passes ? 1e3 * seconds / passes : 0.0, 4);
        j["draft_ms_per_pass"] = rounded(passes ? 1e3 * draft_s / passes : 0.0, 4);
        j["tok_s"] = rounded(tok_s(), 3);
        j["speedup"] = rounded(plain_tok_s > 0 ? tok_s() / plain_tok_s : 0.0, 4);
        j["mismatches"] = mismatches;
        if (!rounds_by_mode.empty()) j["rounds_by_mode"] = rounds_by_mode;
        if (!draft_threads.empty()) j["draft_threads"] = draft_threads;  // --draft-threads -1: rounds on "1" / "all"
        if (!draft_depth.empty()) j["draft_depth"] = draft_depth;        // cost-aware trees: rounds per measured depth
        return j;
    }
};

// mode -> totals, for one category or a group of them
struct ModeTotals {
    std::map<std::string, Acc> by_mode;
    double speedup(const std::string& m) {
        const double plain = by_mode.count("none") ? by_mode["none"].tok_s() : 0;
        return plain > 0 ? by_mode[m].tok_s() / plain : 0;
    }
    Json json(const std::vector<std::string>& modes) {
        const double plain = by_mode.count("none") ? by_mode["none"].tok_s() : 0;
        Json j;
        for (const std::string& m : modes) j[m] = by_mode[m].json(plain);
        return j;
    }
};

// One prompt's speedup in each mode (its tok/s over its own plain decoding's).
struct PromptResult {
    std::string cat, id;
    std::map<std::string, double> speedup, tau;
};

struct Results {
    std::map<std::string, ModeTotals> by_cat;
    ModeTotals mt, total;  // the MT-Bench categories together; all prompts
    std::vector<PromptResult> prompts;  // in run order (with "none": the per-prompt speedups)
    int resumed = 0;       // prompts read back from FILE.partial
    void add(const std::string& cat, const std::string& id, const std::map<std::string, Acc>& prompt) {
        PromptResult pr{cat, id, {}, {}};
        const auto none = prompt.find("none");
        for (const auto& kv : prompt) {
            pr.tau[kv.first] = kv.second.tau();
            if (none != prompt.end() && none->second.tok_s() > 0) pr.speedup[kv.first] = kv.second.tok_s() / none->second.tok_s();
        }
        prompts.push_back(pr);
        for (const auto& kv : prompt) {
            by_cat[cat].by_mode[kv.first].add(kv.second);
            if (is_mt_bench_category(cat)) mt.by_mode[kv.first].add(kv.second);
            total.by_mode[kv.first].add(kv.second);
        }
    }
    int mismatches() const {
        int n = 0;
        for (const auto& kv : total.by_mode) n += kv.second.mismatches;
        return n;
    }
};

// Every mode on one prompt, its totals by mode; plain decoding ("none", when run) is the reference
// output of the others.
std::map<std::string, Acc> run_prompt(Session& s, const BenchSdOptions& o,
                                      std::map<std::string, std::unique_ptr<Drafter>>& drafters, const Prompt& p,
                                      const std::string& cat) {
    SamplingParams greedy;
    greedy.temperature = 0;
    SamplingParams sp = greedy;  // the speculative modes'
    Acceptance acc;
    if (o.accept == "typical") {
        sp.temperature = (float)o.temp;
        sp.top_k = 0;
        sp.top_p = 1.0f;
        sp.seed = (uint64_t)o.seed;
        acc.rule = accept_typical;
    }
    const int n = (int)o.n;
    std::vector<int> ids = s.encode_prompt(p.text, !o.no_chat, "");
    if ((int)ids.size() + n + 70 > s.llama->ctx()) ids.resize(std::max(1, s.llama->ctx() - n - 70));
    std::vector<int> plain;
    std::map<std::string, Acc> by_mode;
    // --repeat: each mode's round policy as it was before this prompt, and as the first repeat left it
    std::map<std::string, RoundPolicy> before, after;
    if (o.repeat > 1)
        for (const std::string& m : o.modes)
            if (m != "none" && drafters[m]->policy()) before.emplace(m, *drafters[m]->policy());
    for (long r = 0; r < o.repeat; r++)
        for (const std::string& m : o.modes) {
            SpecStats st;
            std::vector<int> got;
            if (m == "none") {
                GenStats g;
                s.generate_plain(ids, n, greedy, nullptr, &g, &got);
                static_cast<GenStats&>(st) = g;
                st.rounds = g.target_passes;
                st.gen_tokens_after_root = g.target_passes;
                plain = got;
            } else {
                RoundPolicy* pol = drafters[m]->policy();
                if (pol && r > 0) *pol = before.at(m);  // (r > 0 only with --repeat > 1: before holds every policy)
                SpecParams spp;
                spp.max_tree = 64;
                generate_speculative(s, *drafters[m], ids, n, sp, spp, nullptr, &st, &got, acc);
                if (pol && r == 0 && o.repeat > 1) after.emplace(m, *pol);
            }
            const bool mismatch = !plain.empty() && m != "none" && got != plain;
            if (mismatch && o.accept == "exact")
                fprintf(stderr, "bench-sd: MISMATCH: mode %s differs from plain greedy on prompt %s (%s)\n", m.c_str(),
                        p.id.c_str(), cat.c_str());
            Acc a = Acc::of(st, mismatch);
            auto it = by_mode.find(m);
            if (it == by_mode.end()) by_mode[m] = a;
            else if (a.seconds < it->second.seconds || mismatch) {
                a.mismatches = std::max(a.mismatches, it->second.mismatches);
                it->second = a;
            }
        }
    for (auto& kv : after) *drafters[kv.first]->policy() = kv.second;
    return by_mode;
}

// -o FILE less ".json": the charts are STEM.speedup.png and STEM.accept.png.
std::string output_stem(const std::string& out) {
    return out.size() > 5 && out.compare(out.size() - 5, 5, ".json") == 0 ? out.substr(0, out.size() - 5) : out;
}

// Resuming. With -o FILE, FILE.partial holds the run's identity (its first line: every option that
// changes what is measured, the model's size and the CRC-32s of the draft and prompt files) and then a
// line per finished prompt (its totals in each mode, Acc::record), rewritten atomically after each
// prompt. A run whose identity is the same reads those totals back and goes on with the next prompt,
// so a kill loses only the prompt in flight; the finished report removes the file. Another identity
// is refused (which option differs, and how), never mixed in. Timings of a resumed run come from more
// than one process (the report says how many prompts were read back); token counts, tau and acceptance
// are the same as an uninterrupted run's wherever drafting does not learn from earlier prompts (none,
// lookup, chain, tree; hybrid and auto learn costs and acceptance anew after a resume).
uint32_t file_crc32(const std::string& path) {
    MappedFile f(path);
    return crc32_update(0, f.data, f.size);
}

Json run_identity(const BenchSdOptions& o) {
    Json j;
    struct stat st;
    j["model"] = o.model;
    j["model_bytes"] = stat(o.model.c_str(), &st) == 0 ? (long long)st.st_size : -1;
    j["tokenizer"] = o.tok_path;
    j["draft"] = o.draft;
    j["draft_crc32"] = o.draft.empty() ? 0 : file_crc32(o.draft);
    j["random_draft"] = o.random_draft;
    if (!o.model_draft.empty()) {  // absent without -md: the identity of runs before it existed is unchanged
        j["model_draft"] = o.model_draft;
        j["model_draft_bytes"] = stat(o.model_draft.c_str(), &st) == 0 ? (long long)st.st_size : -1;
    }
    j["prompts"] = o.prompts_path;
    j["prompts_crc32"] = is_directory(o.prompts_path) ? 0 : file_crc32(o.prompts_path);
    j["categories"] = o.cats_s;
    j["per_category"] = o.per_cat;
    j["modes"] = o.modes_s;
    j["n_predict"] = o.n;
    j["ctx_size"] = o.ctx;
    j["threads"] = o.threads;
    j["total_tokens"] = o.total_tokens;
    j["no_chat"] = o.no_chat;
    j["drafting"] = o.d.json();
    if (o.repeat != 1) j["repeat"] = o.repeat;  // absent at 1: the identity of runs before it existed is unchanged
    if (o.accept != "exact") j["accept"] = o.accept, j["temperature"] = o.temp, j["seed"] = o.seed;
    return j;
}

// The first key where a and b differ, as "key: expected A, found B" (nested objects: "drafting.topk").
std::string first_difference(const Json& want, const Json& got, const std::string& prefix = "") {
    for (auto it = want.begin(); it != want.end(); ++it) {
        const std::string key = prefix + it.key();
        if (!got.contains(it.key())) return key + ": expected " + json_text(it.value()) + ", found nothing";
        const Json& g = got.at(it.key());
        if (it.value().is_object() && g.is_object()) {
            std::string d = first_difference(it.value(), g, key + ".");
            if (!d.empty()) return d;
        } else if (it.value() != g) {
            return key + ": expected " + json_text(it.value()) + ", found " + json_text(g);
        }
    }
    for (auto it = got.begin(); it != got.end(); ++it)
        if (!want.contains(it.key())) return prefix + it.key() + ": expected nothing, found " + json_text(it.value());
    return "";
}

struct Partial {
    std::string path;  // FILE.partial ("" without -o: nothing is kept)
    std::string text;  // its lines so far
    // One finished prompt's line (what resume_partial reads back), then the whole file rewritten atomically.
    void append(int index, const std::string& cat, const std::string& id, const std::map<std::string, Acc>& by_mode) {
        if (path.empty()) return;
        Json line{{"index", index}, {"category", cat}, {"id", id}, {"modes", Json::object()}};
        for (const auto& kv : by_mode) line["modes"][kv.first] = kv.second.record();
        text += json_text(line) + "\n";
        write_file_atomic(path, text.data(), text.size());
    }
};

// Reads FILE.partial if there is one: adds its prompts' totals to *r and sets r->resumed to how many
// prompts (the first ones of ps, in order) it holds. Refuses another run's file or a damaged one.
void resume_partial(const BenchSdOptions& o, const PromptSet& ps, const Json& identity, Partial* pt, Results* r) {
    const std::string header = json_text(Json{{"bench_sd_partial", 1}, {"run", identity}}) + "\n";
    pt->path = o.out.empty() ? "" : o.out + ".partial";
    pt->text = header;
    if (pt->path.empty()) return;
    remove_stale_temps(output_stem(o.out));  // a killed run's half-written FILE.partial, FILE or charts
    if (!file_exists(pt->path)) return;
    const std::string text = read_file(pt->path);
    std::vector<std::pair<std::string, std::string>> order;  // (category, prompt id) in run order
    for (const std::string& c : ps.order)
        for (const Prompt& p : ps.by_cat.at(c)) order.emplace_back(c, p.id);
    int done = 0, line = 0;
    for (size_t b = 0; b < text.size(); line++) {
        size_t e = text.find('\n', b);
        if (e == std::string::npos)
            fail("beagle bench-sd: %s: line %d has no end (expected whole lines: the file is written atomically); "
                 "delete it to start over", pt->path.c_str(), line + 1);
        const std::string ln = text.substr(b, e - b);
        b = e + 1;
        Json j;
        try {
            j = Json::parse(ln);
        } catch (const Json::exception& ex) {
            fail("beagle bench-sd: %s line %d: %s; delete it to start over", pt->path.c_str(), line + 1, ex.what());
        }
        if (line == 0) {
            if (!j.is_object() || !j.contains("bench_sd_partial") || !j.contains("run"))
                fail("beagle bench-sd: %s is not a bench-sd partial result (expected a first line with "
                     "\"bench_sd_partial\" and \"run\"); delete it or write to another -o", pt->path.c_str());
            const std::string d = first_difference(identity, j.at("run"));
            if (!d.empty())
                fail("beagle bench-sd: %s is another run's partial result (%s); delete it to start over or give "
                     "the same options", pt->path.c_str(), d.c_str());
            continue;
        }
        std::string why;
        std::map<std::string, Acc> by_mode;
        if (done >= (int)order.size()) {
            why = "more prompts than this run has";
        } else {
            try {
                const std::string cat = j.at("category").get<std::string>(), id = j.at("id").get<std::string>();
                if (j.at("index").get<int>() != done || cat != order[done].first || id != order[done].second)
                    why = strfmt("expected prompt %d (%s, id '%s')", done, order[done].first.c_str(), order[done].second.c_str());
                for (const std::string& m : o.modes) by_mode[m] = Acc::from_record(j.at("modes").at(m));
            } catch (const Json::exception& ex) {
                why = ex.what();
            }
        }
        if (why.empty())
            for (const auto& kv : by_mode)
                if (kv.second.accepted.size() != kv.second.reached.size()) why = "reached and accepted differ in length";
        if (!why.empty()) fail("beagle bench-sd: %s line %d: %s; delete it to start over", pt->path.c_str(), line + 1, why.c_str());
        r->add(order[done].first, order[done].second, by_mode);
        done++;
        pt->text += ln + "\n";
    }
    if (line == 0) return;  // empty file
    r->resumed = done;
    fprintf(stderr, "bench-sd: resuming after %d of %d prompts read back from %s (delete it to start over)\n", done,
            ps.size(), pt->path.c_str());
}

Json results_json(const BenchSdOptions& o, const PromptSet& ps, Results& r) {
    Json js;
    js["model"] = o.model;
    js["draft"] = o.draft;
    if (!o.model_draft.empty()) js["model_draft"] = o.model_draft;
    js["threads"] = o.threads;
    js["n_predict"] = o.n;
    js["repeat"] = o.repeat;
    const bool has_draft = !o.draft.empty() || !o.model_draft.empty();
    if (has_draft && o.tree_nodes == 0) js["tree_total_tokens"] = "auto";
    else js["tree_total_tokens"] = has_draft ? o.tree_nodes : 0;
    if (!o.verify_cost.empty())  // what the cost-aware modes started from, in decode steps, T = 1.. (cost[0] unused)
        js["verify_cost"] = rounded(std::vector<double>(o.verify_cost.begin() + 1, o.verify_cost.end()), 3);
    js["gamma"] = o.d.gamma;
    js["ngram"] = o.d.ngram;
    js["draft_weights"] = o.d.draft_f32 ? "f32" : "q8_0";
    js["drafting"] = o.d.json();
    if (o.accept != "exact") {  // lossy: "mismatches" counts the outputs that differ from plain greedy decoding
        js["accept"] = o.accept;
        js["temperature"] = o.temp;
        js["seed"] = o.seed;
    }
    if (r.resumed) js["resumed_prompts"] = r.resumed;  // their timings are an earlier process's
    js["peak_rss_bytes"] = peak_rss_bytes();
    js["categories"] = Json::object();
    for (const std::string& c : ps.order) js["categories"][c] = r.by_cat[c].json(o.modes);
    if (!r.mt.by_mode.empty()) js["mt_bench"] = r.mt.json(o.modes);
    js["overall"] = r.total.json(o.modes);
    // Per prompt: each mode's speedup over the same prompt's plain decoding; overall, their worst and
    // median (a mean over prompts hides the short answer that runs slower than plain decoding).
    js["per_prompt"] = Json::array();
    for (const PromptResult& pr : r.prompts) {
        Json j{{"category", pr.cat}, {"id", pr.id}, {"speedup", Json::object()}, {"tau", Json::object()}};
        for (const auto& kv : pr.speedup) j["speedup"][kv.first] = rounded(kv.second, 4);
        for (const auto& kv : pr.tau) j["tau"][kv.first] = rounded(kv.second, 4);
        js["per_prompt"].push_back(j);
    }
    for (const std::string& m : o.modes) {
        std::vector<std::pair<double, std::string>> v;
        for (const PromptResult& pr : r.prompts)
            if (pr.speedup.count(m)) v.emplace_back(pr.speedup.at(m), pr.cat + "/" + pr.id);
        if (v.empty() || m == "none") continue;
        std::sort(v.begin(), v.end());
        const size_t h = v.size() / 2;
        const double median = v.size() % 2 ? v[h].first : 0.5 * (v[h - 1].first + v[h].first);
        js["overall"][m]["prompt_speedup"] = {{"worst", rounded(v[0].first, 4)}, {"worst_prompt", v[0].second},
                                             {"median", rounded(median, 4)}};
    }
    return js;
}

// Charts next to the JSON (stem = -o FILE less ".json"): speedup by category (bars per mode), acceptance
// by depth (every speculative mode, all categories).
void write_charts(const BenchSdOptions& o, const PromptSet& ps, Results& r) {
    const std::string& out = o.out;
    const std::string stem = output_stem(out);
    auto colour = [](const std::string& m) -> uint32_t {  // one colour per mode, whatever the order
        return m == "none" ? 0x7f7f7f : m == "lookup" ? 0x2ca02c : m == "chain" ? 0x1f77b4 : m == "tree" ? 0xd62728
               : m == "auto" ? 0xff7f0e : 0x9467bd;
    };
    BarChart sc;
    std::string base = o.model.substr(o.model.find_last_of('/') == std::string::npos ? 0 : o.model.find_last_of('/') + 1);
    sc.title = strfmt("Speedup over plain greedy decoding: %s, %ld threads", base.c_str(), o.threads);
    sc.ylabel = "speedup (x)";
    std::vector<std::string> shown;  // the MT-Bench categories as one bar group, "mt_bench"
    for (const std::string& c : ps.order)
        if (!is_mt_bench_category(c)) shown.push_back(c);
    sc.categories = shown;
    if (!r.mt.by_mode.empty()) sc.categories.push_back("mt_bench");
    sc.categories.push_back("overall");
    for (const std::string& m : o.modes) {
        BarGroup g;
        g.label = m;
        g.rgb = colour(m);
        for (const std::string& c : shown) g.values.push_back(r.by_cat[c].speedup(m));
        if (!r.mt.by_mode.empty()) g.values.push_back(r.mt.speedup(m));
        g.values.push_back(r.total.speedup(m));
        sc.groups.push_back(g);
    }
    write_bar_chart(stem + ".speedup.png", sc);
    LineChart ac;
    ac.title = "Acceptance rate by draft depth (all categories)";
    ac.xlabel = "depth";
    ac.ylabel = "accepted / reached";
    for (const std::string& m : o.modes) {
        if (m == "none") continue;
        const Acc& a1 = r.total.by_mode[m];
        LineSeries ls;
        ls.label = strfmt("%s (tau %.2f)", m.c_str(), a1.tau());
        ls.rgb = colour(m);
        for (size_t d = 0; d < a1.reached.size(); d++)
            if (a1.reached[d] > 0) {
                ls.x.push_back((double)d + 1);
                ls.y.push_back((double)a1.accepted[d] / a1.reached[d]);
            }
        if (!ls.x.empty()) ac.series.push_back(ls);
    }
    if (!ac.series.empty()) write_line_chart(stem + ".accept.png", ac);
    fprintf(stderr, "bench-sd: wrote %s, %s.speedup.png%s\n", out.c_str(), stem.c_str(),
            ac.series.empty() ? "" : strfmt(", %s.accept.png", stem.c_str()).c_str());
}

}  // namespace

int cmd_bench_sd(int argc, char** argv) {
    BenchSdOptions o;
    if (!parse_options(argc, argv, &o)) return 0;
    const PromptSet ps = select_prompts(o);
    Results r;
    Partial partial;  // read before the model loads: another run's partial result is refused at once
    resume_partial(o, ps, run_identity(o), &partial, &r);

    Session s(o.model, o.tok_path, (int)o.threads, (int)o.ctx, 64);
    s.tok->set_chat_template(o.chat_template);
    std::map<std::string, std::unique_ptr<Drafter>> drafters = set_up_drafters(s, &o);  // names a random draft in o.draft
    int done = 0;
    for (const std::string& c : ps.order)
        for (const Prompt& p : ps.by_cat.at(c)) {
            if (done < r.resumed) {
                done++;
                continue;
            }
            const std::map<std::string, Acc> by_mode = run_prompt(s, o, drafters, p, c);
            r.add(c, p.id, by_mode);
            partial.append(done, c, p.id, by_mode);
            fprintf(stderr, "bench-sd: %d/%d prompts (%s)", ++done, ps.size(), c.c_str());
            for (const std::string& m : o.modes)
                fprintf(stderr, " %s %.1f tok/s tau %.2f;", m.c_str(), r.by_cat[c].by_mode[m].tok_s(), r.by_cat[c].by_mode[m].tau());
            fprintf(stderr, "\n");
        }

    const std::string report = json_text(results_json(o, ps, r), 2) + "\n";
    fputs(report.c_str(), stdout);
    if (!o.out.empty()) {  // the report last: once it is there, so are the charts
        write_charts(o, ps, r);
        write_file_atomic(o.out, report.data(), report.size());
        if (file_exists(partial.path)) std::remove(partial.path.c_str());
    }
    if (r.mismatches() && o.accept == "exact") fail("bench-sd: %d outputs differ from plain greedy decoding", r.mismatches());
    return 0;
}

}  // namespace beagle
