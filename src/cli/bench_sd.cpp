// bench_sd.cpp: `beagle bench-sd`: the speculative-decoding benchmark. Greedy, batch 1, over prompt
// categories (Spec-Bench JSONL), modes none / lookup / chain / tree (/ hybrid) in the same process: tau,
// acceptance by depth, tokens/s, speedup over plain decoding of the same prompts, peak RSS; every
// mode's output is also checked token-for-token against plain greedy decoding (exactness).
// Writes one JSON object (-o FILE) and two charts. Steps: parse -> set up -> run -> report.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../core/common.h"
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
    std::string model, tok_path, draft, prompts_path, out, modes_s = "none,lookup,chain,tree", cats_s;
    std::string total_tokens = "auto";
    long tree_nodes = 0;  // --total-tokens as a number (0: auto)
    long per_cat = 5, n = 256, threads = 2, ctx = 2048, random_draft = -1;
    bool no_chat = false;
    DraftOptions d;
    std::vector<std::string> modes, cats;  // --modes, --categories split at commas
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
    a.str("--prompts", &o->prompts_path, "prompt file (Spec-Bench / MT-Bench JSONL, ...)");
    a.str("--categories", &o->cats_s, "comma-separated categories to run (default: all in the file)");
    a.integer("--per-category", &o->per_cat, "prompts per category");
    a.str("--modes", &o->modes_s, "comma-separated: none, lookup, chain, tree, hybrid (tree + lookup candidates), auto\n"
          "(per round hybrid or lookup / plain, whichever pays here: the default of generate -d)");
    a.integer("-n,--n-predict", &o->n, "tokens generated per prompt");
    a.integer("-t,--threads", &o->threads, "CPU threads");
    a.integer("-c,--ctx-size", &o->ctx, "context length");
    o->d.declare(a);
    a.str("--total-tokens", &o->total_tokens, "tree size or 'auto'");
    a.str("-o,--output", &o->out, "write the JSON here too");
    a.flag("--no-chat", &o->no_chat, "prompts as plain text (default: the chat template if the tokenizer has one)");
    if (!a.parse(argc, argv)) return false;
    if (o->model.empty() || o->prompts_path.empty()) fail("beagle bench-sd: -m MODEL and --prompts FILE are required");
    o->modes = split_commas(o->modes_s);  // an empty one ("a,,b", "a,") is an unknown mode
    for (const std::string& m : o->modes) {
        if (m != "none" && m != "lookup" && m != "chain" && m != "tree" && m != "hybrid" && m != "auto")
            fail("beagle bench-sd: unknown mode '%s' (expected none, lookup, chain, tree, hybrid or auto)", m.c_str());
        if ((m == "chain" || m == "tree" || m == "hybrid" || m == "auto") && o->draft.empty() && o->random_draft < 0)
            fail("beagle bench-sd: mode %s needs -d DRAFT (or --random-draft SEED)", m.c_str());
    }
    if (!o->cats_s.empty()) o->cats = split_commas(o->cats_s);
    if (!o->draft.empty() && o->random_draft >= 0) fail("beagle bench-sd: give -d DRAFT or --random-draft SEED, not both");
    o->tree_nodes = auto_or_integer(o->total_tokens, 2, 1024, "beagle bench-sd: --total-tokens");
    if (o->tree_nodes > 0 && std::count(o->modes.begin(), o->modes.end(), "auto"))
        fail("beagle bench-sd: mode auto chooses from measured costs: it needs --total-tokens auto");
    o->d.check("beagle bench-sd");
    return true;
}

bool has_mode(const BenchSdOptions& o, const char* m) { return std::count(o.modes.begin(), o.modes.end(), m) > 0; }

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
    else if (has_mode(*o, "tree") || has_mode(*o, "hybrid") || has_mode(*o, "lookup") || has_mode(*o, "auto"))
        p.verify_cost = measure_verify_cost(s, 64, (int)std::max(o->d.depth, o->d.gamma) + 1);
    DraftWeights w;
    if (o->random_draft >= 0) {
        w.init_random(draft_config_for_target(s.mf->config, s.tok->spec()), (uint64_t)o->random_draft);
        o->draft = strfmt("random weights, seed %ld", o->random_draft);
    } else if (!o->draft.empty()) {
        w = load_draft_for(s, o->draft);
    }
    std::map<std::string, std::unique_ptr<Drafter>> drafters;
    for (const std::string& m : o->modes)
        if (m != "none" && !drafters.count(m)) drafters[m] = make_drafter(s, m, p, &w, o->draft);
    return drafters;
}

// Totals of one (category, mode) cell.
struct Acc {
    int prompts = 0, tokens = 0, passes = 0, mismatches = 0;
    double seconds = 0, draft_s = 0, tau_tokens = 0, rounds = 0, drafted = 0;
    std::vector<long> reached, accepted;
    std::map<std::string, long> rounds_by_mode, draft_threads, draft_depth;
    void add(const SpecStats& st, bool mismatch) {
        for (const auto& kv : st.rounds_by_mode) rounds_by_mode[kv.first] += kv.second;
        for (const auto& kv : st.draft_threads) draft_threads[kv.first] += kv.second;
        for (const auto& kv : st.draft_depth) draft_depth[kv.first] += kv.second;
        prompts++;
        mismatches += mismatch;
        tokens += st.gen_tokens;
        passes += st.target_passes;
        seconds += st.decode_s;
        draft_s += st.draft_s;
        tau_tokens += st.gen_tokens_after_root;
        rounds += st.rounds;
        drafted += st.drafted;
        if (reached.size() < st.reached_by_depth.size()) {
            reached.resize(st.reached_by_depth.size());
            accepted.resize(st.reached_by_depth.size());
        }
        for (size_t k = 0; k < st.reached_by_depth.size(); k++) {
            reached[k] += st.reached_by_depth[k];
            accepted[k] += st.accept_by_depth[k];
        }
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

struct Results {
    std::map<std::string, ModeTotals> by_cat;
    ModeTotals mt, total;  // the MT-Bench categories together; all prompts
    int mismatches() const {
        int n = 0;
        for (const auto& kv : total.by_mode) n += kv.second.mismatches;
        return n;
    }
};

// Every mode on one prompt; plain decoding ("none", when run) is the reference output of the others.
void run_prompt(Session& s, const BenchSdOptions& o, std::map<std::string, std::unique_ptr<Drafter>>& drafters,
                const Prompt& p, const std::string& cat, Results* r) {
    SamplingParams greedy;
    greedy.temperature = 0;
    const int n = (int)o.n;
    std::vector<int> ids = s.encode_prompt(p.text, !o.no_chat, "");
    if ((int)ids.size() + n + 70 > s.llama->ctx()) ids.resize(std::max(1, s.llama->ctx() - n - 70));
    std::vector<int> plain;
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
            SpecParams spp;
            spp.max_tree = 64;
            generate_speculative(s, *drafters[m], ids, n, greedy, spp, nullptr, &st, &got);
        }
        const bool mismatch = !plain.empty() && m != "none" && got != plain;
        if (mismatch)
            fprintf(stderr, "bench-sd: MISMATCH: mode %s differs from plain greedy on prompt %s (%s)\n", m.c_str(),
                    p.id.c_str(), cat.c_str());
        r->by_cat[cat].by_mode[m].add(st, mismatch);
        if (is_mt_bench_category(cat)) r->mt.by_mode[m].add(st, mismatch);
        r->total.by_mode[m].add(st, mismatch);
    }
}

Json results_json(const BenchSdOptions& o, const PromptSet& ps, Results& r) {
    Json js;
    js["model"] = o.model;
    js["draft"] = o.draft;
    js["threads"] = o.threads;
    js["n_predict"] = o.n;
    const bool has_draft = !o.draft.empty();
    if (has_draft && o.tree_nodes == 0) js["tree_total_tokens"] = "auto";
    else js["tree_total_tokens"] = has_draft ? o.tree_nodes : 0;
    js["gamma"] = o.d.gamma;
    js["ngram"] = o.d.ngram;
    js["draft_weights"] = o.d.draft_f32 ? "f32" : "q8_0";
    js["peak_rss_bytes"] = peak_rss_bytes();
    js["categories"] = Json::object();
    for (const std::string& c : ps.order) js["categories"][c] = r.by_cat[c].json(o.modes);
    if (!r.mt.by_mode.empty()) js["mt_bench"] = r.mt.json(o.modes);
    js["overall"] = r.total.json(o.modes);
    return js;
}

// Charts next to the JSON (stem = -o FILE less ".json"): speedup by category (bars per mode), acceptance
// by depth (every speculative mode, all categories).
void write_charts(const BenchSdOptions& o, const PromptSet& ps, Results& r) {
    const std::string& out = o.out;
    std::string stem = out.size() > 5 && out.compare(out.size() - 5, 5, ".json") == 0 ? out.substr(0, out.size() - 5) : out;
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

    Session s(o.model, o.tok_path, (int)o.threads, (int)o.ctx, 64);
    std::map<std::string, std::unique_ptr<Drafter>> drafters = set_up_drafters(s, &o);

    Results r;
    int done = 0;
    for (const std::string& c : ps.order)
        for (const Prompt& p : ps.by_cat.at(c)) {
            run_prompt(s, o, drafters, p, c, &r);
            fprintf(stderr, "bench-sd: %d/%d prompts (%s)", ++done, ps.size(), c.c_str());
            for (const std::string& m : o.modes)
                fprintf(stderr, " %s %.1f tok/s tau %.2f;", m.c_str(), r.by_cat[c].by_mode[m].tok_s(), r.by_cat[c].by_mode[m].tau());
            fprintf(stderr, "\n");
        }

    const std::string report = json_text(results_json(o, ps, r), 2) + "\n";
    fputs(report.c_str(), stdout);
    if (!o.out.empty()) {
        write_file_atomic(o.out, report.data(), report.size());
        write_charts(o, ps, r);
    }
    if (r.mismatches()) fail("bench-sd: %d outputs differ from plain greedy decoding", r.mismatches());
    return 0;
}

}  // namespace beagle
