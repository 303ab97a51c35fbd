// report.cpp: the files run_train writes beside the draft (report.h): the loss curve and its TSV,
// the acceptance chart and the JSON summary.
#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "../core/common.h"
#include "../io/json_write.h"
#include "../io/plot.h"
#include "train_loop.h"

namespace beagle {

double tail_mean(const std::vector<StepRecord>& h, int stage, int k, float StepRecord::*field) {
    double s = 0;
    int n = 0;
    for (size_t i = h.size(); i-- > 0 && n < k;)
        if (stage == 0 || h[i].stage == stage) s += h[i].*field, n++;
    return n ? s / n : NAN;
}

static std::vector<double> moving_average(const std::vector<double>& y, int k) {
    std::vector<double> o(y.size());
    double s = 0;
    for (size_t i = 0; i < y.size(); i++) {
        s += y[i];
        if (i >= (size_t)k) s -= y[i - k];
        o[i] = s / std::min<size_t>(i + 1, k);
    }
    return o;
}

std::string write_loss_report(const std::string& draft_path, const std::vector<StepRecord>& history) {
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
    std::string png = draft_path + ".loss.png";
    write_line_chart(png, lc);
    std::string tsv = "step\tstage\tloss\tce\tvloss\n";
    for (size_t i = 0; i < history.size(); i++)
        tsv += strfmt("%zu\t%d\t%.6f\t%.6f\t%.6f\n", i + 1, history[i].stage, history[i].loss, history[i].ce, history[i].vloss);
    write_file_atomic(draft_path + ".loss.tsv", tsv.data(), tsv.size());
    return png;
}

std::string write_accept_chart(const std::string& draft_path, const TrainLoopOptions& o, const TrainEval& e) {
    BarChart bc;
    bc.title = strfmt("Acceptance by depth (%d prompts, greedy): tau chain %.2f, tree %.2f", e.tree.prompts, e.chain.tau,
                      e.tree.tau);
    bc.xlabel = "draft depth (rate = accepted / reached, given the path so far)";
    bc.ylabel = "acceptance rate";
    bc.ymax = 1.1;
    size_t D = std::max(e.chain.accept_by_depth.size(), e.tree.accept_by_depth.size());
    for (size_t d = 0; d < D; d++) bc.categories.push_back(strfmt("depth %zu", d + 1));
    std::vector<double> cv(e.chain.accept_by_depth), tv(e.tree.accept_by_depth);
    cv.resize(D, NAN);
    tv.resize(D, NAN);
    bc.groups.push_back({strfmt("chain (gamma %d)", o.gamma), cv, 0x4c72b0});
    bc.groups.push_back({strfmt("tree (depth %d, top-k %d, %d nodes)", o.depth, o.topk, o.total_tokens), tv, 0xdd8452});
    std::string png = draft_path + ".accept.png";
    write_bar_chart(png, bc);
    return png;
}

static Json eval_json(const AcceptEval& e) {
    return {{"tau", rounded(e.tau, 4)},
            {"rounds", e.rounds},
            {"tokens", e.tokens},
            {"prompts", e.prompts},
            {"accept_by_depth", rounded(e.accept_by_depth, 4)},
            {"reached_by_depth", e.reached_by_depth},
            {"seconds", rounded(e.seconds, 2)}};
}

std::string write_train_json(const std::string& draft_path, const TrainLoopOptions& o, const TrainTotals& t,
                             const std::vector<StepRecord>& history, const TrainEval* e) {
    Json config = Json::object();
    for (auto& kv : *t.config) {  // numbers as numbers (the tokenizer hash stays a hex string)
        Json v = Json::parse(kv.second, nullptr, false);
        bool num = !v.is_discarded() && v.is_number() && kv.first != "tokenizer_hash";
        config[kv.first] = num ? v : Json(kv.second);
    }
    Json j;
    j["draft"] = o.out;
    j["target"] = o.model;
    j["data"] = o.data;
    j["config"] = config;
    j["arch"] = draft_arch_name(t.arch);
    j["params"] = t.params;
    if (t.res) {  // this process's steps only (a resumed run: the steps after the resume)
        const TrainResult& r = *t.res;
        j["iteration_peak_bytes"] = {r.iteration_peak_bytes[0], r.iteration_peak_bytes[1]};
        j["seconds_per_step_by_stage"] = {
            rounded(r.stage_steps[0] ? r.stage_seconds[0] / (double)r.stage_steps[0] : 0.0, 4),
            rounded(r.stage_steps[1] ? r.stage_seconds[1] / (double)r.stage_steps[1] : 0.0, 4)};
        j["states"] = r.states_computed ? "computed" : "stored";  // tokens-only data: the target ran in the loop
        if (r.states_computed) {
            j["state_tokens"] = r.state_tokens;
            j["state_seconds"] = rounded(r.state_seconds, 2);
        }
    }
    j["data_seqs"] = t.data_seqs;
    j["data_tokens"] = t.data_tokens;
    j["items"] = t.items;
    j["epochs"] = {o.stage1_epochs, o.stage2_epochs};
    j["steps"] = t.steps;
    j["steps_per_epoch"] = t.steps_per_epoch;
    j["tokens_trained"] = t.tokens_trained;
    j["train_seconds"] = rounded(t.train_seconds, 1);
    j["seconds_per_step"] = rounded(t.steps > 0 ? t.train_seconds / (double)t.steps : 0.0, 4);
    j["eval_seconds"] = rounded(e ? e->seconds : 0.0, 1);
    j["threads"] = t.threads;
    j["final_loss"] = {{"stage1", rounded(tail_mean(history, 1, 20, &StepRecord::loss), 5)},
                       {"stage1_ce", rounded(tail_mean(history, 1, 20, &StepRecord::ce), 5)},
                       {"stage2", rounded(tail_mean(history, 2, 20, &StepRecord::loss), 5)},
                       {"stage2_ce", rounded(tail_mean(history, 2, 20, &StepRecord::ce), 5)},
                       {"last", rounded(tail_mean(history, 0, 20, &StepRecord::loss), 5)}};
    if (e) {
        j["eval"] = {{"prompts_file", o.eval_prompts},
                     {"prompts", e->tree.prompts},
                     {"tokens_per_prompt", o.eval_tokens},
                     {"greedy", true},
                     {"concat", !o.eval_no_concat},
                     {"chat", e->chat},
                     {"chain", {{"gamma", o.gamma}, {"stats", eval_json(e->chain)}}},
                     {"tree", {{"depth", o.depth}, {"topk", o.topk}, {"total_tokens", o.total_tokens}, {"stats", eval_json(e->tree)}}}};
        j["tau_chain"] = rounded(e->chain.tau, 4);
        j["tau_tree"] = rounded(e->tree.tau, 4);
        j["accept_by_depth"] = {{"chain", rounded(e->chain.accept_by_depth, 4)}, {"tree", rounded(e->tree.accept_by_depth, 4)}};
    }
    j["wall_seconds"] = rounded(t.wall_seconds, 1);
    if (t.has_device) {
        const double n = t.device_steps > 0 ? (double)t.device_steps : 1.0;
        j["gpu"] = {{"steps", t.device_steps},
                    {"launches_per_step", rounded(t.launches / n, 2)},
                    {"syncs_per_step", rounded(t.syncs / n, 2)},
                    {"allocs_after_first_step", t.allocs_after_first_step},
                    {"peak_device_bytes", t.peak_device_bytes}};
    }
    std::string path = draft_path + ".json", text = json_text(j, 2) + "\n";
    write_file_atomic(path, text.data(), text.size());
    return path;
}

}  // namespace beagle

