// bench_sd.cpp: `beagle bench-sd`: the speculative-decoding benchmark. Greedy, batch 1, over prompt
// categories (Spec-Bench JSONL), modes none / lookup / chain / tree (/ hybrid) in the same process: tau,
// acceptance by depth, tokens/s, speedup over plain decoding of the same prompts, peak RSS; every
// mode's output is also checked token-for-token against plain greedy decoding (exactness).
// Writes one JSON object (-o FILE).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../core/common.h"
#include "../data/prompts.h"
#include "../decode/session.h"
#include "../decode/drafters.h"
#include "../decode/speculative.h"
#include "../decode/verify_cost.h"
#include "../model/draft.h"
#include "../train/plot.h"
#include "args.h"
#include "commands.h"

namespace beagle {

namespace {
struct Acc {
    int prompts = 0, tokens = 0, passes = 0, mismatches = 0;
    double seconds = 0, draft_s = 0, tau_tokens = 0, rounds = 0, drafted = 0;
    std::vector<long> reached, accepted;
    void add(const SpecStats& st) {
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
    std::string json(double plain_tok_s) const {
        std::string acc = "[";
        for (size_t k = 0; k < reached.size(); k++)
            acc += strfmt("%s%.4f", k ? ", " : "", reached[k] ? (double)accepted[k] / reached[k] : 0.0);
        acc += "]";
        return strfmt("{\"prompts\": %d, \"tokens\": %d, \"target_passes\": %d, \"tau\": %.4f, \"nodes_per_verify\": %.3f, "
                      "\"accept_by_depth\": %s, \"ms_per_pass\": %.4f, \"draft_ms_per_pass\": %.4f, \"tok_s\": %.3f, "
                      "\"speedup\": %.4f, \"mismatches\": %d}",
                      prompts, tokens, passes, tau(), nodes_per_verify(), acc.c_str(), passes ? 1e3 * seconds / passes : 0.0,
                      passes ? 1e3 * draft_s / passes : 0.0, tok_s(),
                      plain_tok_s > 0 ? tok_s() / plain_tok_s : 0.0, mismatches);
    }
};
// Spec-Bench's "mt_bench" task is the 80 MT-Bench questions, filed under their 8 MT-Bench categories.
bool is_mt_bench_category(const std::string& c) {
    for (const char* m : {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"})
        if (c == m) return true;
    return false;
}
}  // namespace

int cmd_bench_sd(int argc, char** argv) {
    std::string model, tok_path, draft, prompts_path, out, modes_s = "none,lookup,chain,tree", cats_s, total_tokens = "auto";
    double lookup_skip = 0.5;
    long per_cat = 5, n = 256, threads = 2, gamma = 5, ngram = 3, depth = 5, topk = 10, ctx = 2048, random_draft = -1;
    bool chat = true;
    Args a("bench-sd", "-m MODEL -d DRAFT --prompts FILE [options]",
           "Speculative decoding benchmark (greedy, batch 1): per category and mode, tau, acceptance by depth,\n"
           "tokens/s and speedup over plain decoding measured in the same process; checks every output equals\n"
           "plain greedy decoding. Prints one JSON object (and writes it to -o FILE).");
    a.str("-m,--model", &model, "target model");
    a.str("-z,--tokenizer", &tok_path, "tokenizer file if the model has none");
    a.str("-d,--draft", &draft, "Beagle draft (needed for chain and tree)");
    a.integer("--random-draft", &random_draft, "instead of -d: a random-weights draft with this seed (exactness runs:\n"
                                                "                               rejection everywhere)");
    a.str("--prompts", &prompts_path, "prompt file (Spec-Bench / MT-Bench JSONL, ...)");
    a.str("--categories", &cats_s, "comma-separated categories to run (default: all in the file)");
    a.integer("--per-category", &per_cat, "prompts per category");
    a.str("--modes", &modes_s, "comma-separated: none, lookup, chain, tree, hybrid (tree + lookup candidates)");
    a.integer("-n,--n-predict", &n, "tokens generated per prompt");
    a.integer("-t,--threads", &threads, "CPU threads");
    a.integer("-c,--ctx-size", &ctx, "context length");
    a.integer("--gamma", &gamma, "chain/lookup length");
    a.integer("--ngram", &ngram, "lookup and hybrid: longest n-gram matched in the context");
    a.integer("--depth", &depth, "tree depth");
    a.integer("--topk", &topk, "tree top-k");
    a.number("--lookup-skip", &lookup_skip, "hybrid: send a lookup match alone (no draft forward) when its first token's learnt\n"
             "acceptance rate is at least this (> 1: never)");
    a.str("--total-tokens", &total_tokens, "tree size or 'auto'");
    a.str("-o,--output", &out, "write the JSON here too");
    bool no_chat = false;
    a.flag("--no-chat", &no_chat, "prompts as plain text (default: the chat template if the tokenizer has one)");
    bool draft_f32 = false;
    a.flag("--draft-f32", &draft_f32, "draft matrices in f32 as trained (default: a Q8_0 copy)");
    if (!a.parse(argc, argv)) return 0;
    chat = !no_chat;
    if (model.empty() || prompts_path.empty()) fail("beagle bench-sd: -m MODEL and --prompts FILE are required");
    std::vector<std::string> modes, cats;
    for (size_t b = 0; b <= modes_s.size();) {
        size_t e = modes_s.find(',', b);
        if (e == std::string::npos) e = modes_s.size();
        std::string m = modes_s.substr(b, e - b);
        if (m != "none" && m != "lookup" && m != "chain" && m != "tree" && m != "hybrid")
            fail("beagle bench-sd: unknown mode '%s' (expected none, lookup, chain, tree or hybrid)", m.c_str());
        if ((m == "chain" || m == "tree" || m == "hybrid") && draft.empty() && random_draft < 0)
            fail("beagle bench-sd: mode %s needs -d DRAFT (or --random-draft SEED)", m.c_str());
        modes.push_back(m);
        b = e + 1;
    }
    for (size_t b = 0; b < cats_s.size();) {
        size_t e = cats_s.find(',', b);
        if (e == std::string::npos) e = cats_s.size();
        cats.push_back(cats_s.substr(b, e - b));
        b = e + 1;
    }
    std::vector<Prompt> all = load_prompts(prompts_path);
    std::map<std::string, std::vector<Prompt>> by_cat;
    std::vector<std::string> order;
    for (const Prompt& p : all) {
        std::string c = p.category.empty() ? "all" : p.category;
        if (!cats.empty() && std::find(cats.begin(), cats.end(), c) == cats.end()) continue;
        if (!by_cat.count(c)) order.push_back(c);
        if ((long)by_cat[c].size() < per_cat) by_cat[c].push_back(p);
    }
    if (order.empty()) fail("beagle bench-sd: no prompts match the categories");

    Session s(model, tok_path, (int)threads, (int)ctx, 64);
    DraftWeights dw;
    DraftFrozen fz;
    std::unique_ptr<Drafter> chain_d, tree_d, hybrid_d;
    std::string tree_size = "0";
    // --total-tokens auto: tree and lookup send, each round, what is worth its verify cost measured here
    std::vector<double> cost;
    bool cost_aware = total_tokens == "auto" && (std::count(modes.begin(), modes.end(), "tree") ||
                                                 std::count(modes.begin(), modes.end(), "hybrid") ||
                                                 std::count(modes.begin(), modes.end(), "lookup"));
    if (cost_aware) cost = measure_verify_cost(s, 64, (int)std::max(depth, gamma) + 1);
    if (!draft.empty() && random_draft >= 0) fail("beagle bench-sd: give -d DRAFT or --random-draft SEED, not both");
    if (!draft.empty() || random_draft >= 0) {
        if (random_draft >= 0) {
            dw.init_random(draft_config_for_target(s.mf->config, s.tok->spec()), (uint64_t)random_draft);
            draft = strfmt("random weights, seed %ld", random_draft);
        } else {
            dw = load_draft(draft);
        }
        check_draft_fits_target(dw.cfg, s.mf->config, s.tok->spec(), draft);
        fz = frozen_from_target(*s.mf, false);
        BeagleDraftParams bp;
        bp.q8 = !draft_f32;
        bp.tree = false;
        bp.gamma = (int)gamma;
        chain_d = make_beagle_drafter(dw, fz, s, bp);
        bp.tree = true;
        bp.depth = (int)depth;
        bp.topk = (int)topk;
        if (total_tokens == "auto") {
            bp.verify_cost = cost;  // empty (unused) unless the tree runs
            tree_size = "\"auto\"";
        } else {
            bp.total_tokens = atoi(total_tokens.c_str());
            tree_size = std::to_string(bp.total_tokens);
        }
        tree_d = make_beagle_drafter(dw, fz, s, bp);
        bp.lookup_ngram = (int)ngram;
        bp.lookup_skip = lookup_skip;
        hybrid_d = make_beagle_drafter(dw, fz, s, bp);
    }
    std::unique_ptr<Drafter> lookup_d = make_lookup_drafter((int)ngram, (int)gamma, cost);
    SamplingParams greedy;
    greedy.temperature = 0;
    std::map<std::string, std::map<std::string, Acc>> acc;  // category -> mode -> totals
    std::map<std::string, Acc> total, mt;  // all prompts; the MT-Bench categories together
    int done = 0, n_total = 0;
    for (auto& c : order) n_total += (int)by_cat[c].size();
    for (const std::string& c : order) {
        for (const Prompt& p : by_cat[c]) {
            std::vector<int> ids = s.encode_prompt(p.text, chat, "");
            if ((int)ids.size() + n + 70 > s.llama->ctx()) ids.resize(std::max(1, s.llama->ctx() - (int)n - 70));
            std::vector<int> plain;
            for (const std::string& m : modes) {
                SpecStats st;
                std::vector<int> got;
                if (m == "none") {
                    GenStats g;
                    s.generate_plain(ids, (int)n, greedy, nullptr, &g, &got);
                    static_cast<GenStats&>(st) = g;
                    st.rounds = g.target_passes;
                    st.gen_tokens_after_root = g.target_passes;
                    plain = got;
                } else {
                    Drafter* d = m == "lookup" ? lookup_d.get() : m == "chain" ? chain_d.get()
                               : m == "hybrid" ? hybrid_d.get() : tree_d.get();
                    SpecParams spp;
                    spp.max_tree = 64;
                    generate_speculative(s, *d, ids, (int)n, greedy, spp, nullptr, &st, &got);
                }
                Acc& a1 = acc[c][m];
                a1.prompts++;
                a1.add(st);
                if (is_mt_bench_category(c)) {
                    mt[m].prompts++;
                    mt[m].add(st);
                }
                total[m].prompts++;
                total[m].add(st);
                if (!plain.empty() && m != "none" && got != plain) {
                    a1.mismatches++;
                    total[m].mismatches++;
                    if (is_mt_bench_category(c)) mt[m].mismatches++;
                    fprintf(stderr, "bench-sd: MISMATCH: mode %s differs from plain greedy on prompt %s (%s)\n", m.c_str(),
                            p.id.c_str(), c.c_str());
                }
            }
            done++;
            fprintf(stderr, "bench-sd: %d/%d prompts (%s)", done, n_total, c.c_str());
            for (const std::string& m : modes) fprintf(stderr, " %s %.1f tok/s tau %.2f;", m.c_str(), acc[c][m].tok_s(), acc[c][m].tau());
            fprintf(stderr, "\n");
        }
    }
    std::string js = strfmt("{\n  \"model\": \"%s\",\n  \"draft\": \"%s\",\n  \"threads\": %ld,\n  \"n_predict\": %ld,\n"
                            "  \"tree_total_tokens\": %s,\n  \"gamma\": %ld,\n  \"ngram\": %ld,\n  \"draft_weights\": \"%s\",\n"
                            "  \"peak_rss_bytes\": %zu,\n  \"categories\": {\n",
                            model.c_str(), draft.c_str(), threads, n, tree_size.c_str(), gamma, ngram, draft_f32 ? "f32" : "q8_0",
                            peak_rss_bytes());
    for (size_t i = 0; i < order.size(); i++) {
        const std::string& c = order[i];
        double plain = acc[c].count("none") ? acc[c]["none"].tok_s() : 0;
        js += strfmt("    \"%s\": {", c.c_str());
        for (size_t k = 0; k < modes.size(); k++)
            js += strfmt("%s\"%s\": %s", k ? ", " : "", modes[k].c_str(), acc[c][modes[k]].json(plain).c_str());
        js += i + 1 < order.size() ? "},\n" : "}\n";
    }
    double plain_all = total.count("none") ? total["none"].tok_s() : 0;
    double plain_mt = mt.count("none") ? mt["none"].tok_s() : 0;
    if (!mt.empty()) {
        js += "  },\n  \"mt_bench\": {";
        for (size_t k = 0; k < modes.size(); k++)
            js += strfmt("%s\"%s\": %s", k ? ", " : "", modes[k].c_str(), mt[modes[k]].json(plain_mt).c_str());
    }
    js += "  },\n  \"overall\": {";
    for (size_t k = 0; k < modes.size(); k++)
        js += strfmt("%s\"%s\": %s", k ? ", " : "", modes[k].c_str(), total[modes[k]].json(plain_all).c_str());
    js += "}\n}\n";
    fputs(js.c_str(), stdout);
    if (!out.empty()) {
        write_file_atomic(out, js.data(), js.size());
        // charts next to the JSON: speedup by category (bars per mode), acceptance by depth (chain, tree)
        std::string stem = out.size() > 5 && out.compare(out.size() - 5, 5, ".json") == 0 ? out.substr(0, out.size() - 5) : out;
        auto colour = [](const std::string& m) -> uint32_t {  // one colour per mode, whatever the order
            return m == "none" ? 0x7f7f7f : m == "lookup" ? 0x2ca02c : m == "chain" ? 0x1f77b4 : m == "tree" ? 0xd62728 : 0x9467bd;
        };
        BarChart sc;
        std::string base = model.substr(model.find_last_of('/') == std::string::npos ? 0 : model.find_last_of('/') + 1);
        sc.title = strfmt("Speedup over plain greedy decoding: %s, %ld threads", base.c_str(), threads);
        sc.ylabel = "speedup (x)";
        std::vector<std::string> shown;  // the MT-Bench categories as one bar group, "mt_bench"
        for (const std::string& c : order)
            if (!is_mt_bench_category(c)) shown.push_back(c);
        sc.categories = shown;
        if (!mt.empty()) sc.categories.push_back("mt_bench");
        sc.categories.push_back("overall");
        for (size_t k = 0; k < modes.size(); k++) {
            BarGroup g;
            g.label = modes[k];
            g.rgb = colour(modes[k]);
            for (const std::string& c : shown) {
                double plain = acc[c].count("none") ? acc[c]["none"].tok_s() : 0;
                g.values.push_back(plain > 0 ? acc[c][modes[k]].tok_s() / plain : 0);
            }
            if (!mt.empty()) g.values.push_back(plain_mt > 0 ? mt[modes[k]].tok_s() / plain_mt : 0);
            g.values.push_back(plain_all > 0 ? total[modes[k]].tok_s() / plain_all : 0);
            sc.groups.push_back(g);
        }
        write_bar_chart(stem + ".speedup.png", sc);
        LineChart ac;
        ac.title = "Acceptance rate by draft depth (all categories)";
        ac.xlabel = "depth";
        ac.ylabel = "accepted / reached";
        for (size_t k = 0; k < modes.size(); k++) {
            if (modes[k] == "none") continue;
            const Acc& a1 = total[modes[k]];
            LineSeries ls;
            ls.label = strfmt("%s (tau %.2f)", modes[k].c_str(), a1.tau());
            ls.rgb = colour(modes[k]);
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
    int mism = 0;
    for (auto& kv : total) mism += kv.second.mismatches;
    if (mism) fail("bench-sd: %d outputs differ from plain greedy decoding", mism);
    return 0;
}

}  // namespace beagle
