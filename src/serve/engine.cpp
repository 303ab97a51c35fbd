// engine.cpp: the server's generation loop (engine.h): slots over one target, a bounded queue, one
// worker thread that admits, prefills in chunks and decodes (plain or speculative) every round.
#include "engine.h"

#include <algorithm>
#include <climits>
#include <map>

#include "../core/common.h"
#include "remote.h"

namespace beagle {

bool Job::wait(double seconds, std::string* out) {
    std::unique_lock<std::mutex> lk(mu);
    if (text.empty() && !finished)
        cv.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return !text.empty() || finished; });
    out->append(text);
    text.clear();
    return finished;
}

bool Job::wait_answer() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return answered || finished; });
    return answered;
}

struct EngineStats {
    std::map<std::pair<std::string, int>, long> requests;  // (endpoint, status) -> count
    std::map<std::string, long> finished;                 // finish reason (stop, length, cancelled, error) -> jobs
    long prompt_tokens = 0, gen_tokens = 0, forwards = 0, forward_rows = 0;
    long rounds = 0, after_root = 0, drafted = 0;
    std::vector<long> reached, accepted;  // speculative rounds per depth
    int queue = 0, active = 0;
    std::deque<std::pair<double, int>> recent;  // (time, tokens) of the rounds of the last 10 s
};

struct Engine::Slot {
    int seq = 0;
    std::shared_ptr<Job> job;  // null: free
    std::unique_ptr<Drafter> drafter;
    ClientTree client;  // remote jobs: the client's trees
    std::unique_ptr<SpecDecoder> dec;
    SpecStats st;
    std::unique_ptr<Sampler> sampler;  // plain decoding
    std::unique_ptr<StopText> cut;
    int prev = 0, next = -1, n_gen = 0, limit = 0;
    int prefilled = -1;              // prompt tokens prefilled so far (-1: not prefilling)
    std::vector<float> plogits, pstates;  // the prompt's last logits; its states (speculative and remote)
    double prefill_s = 0;
};

Engine::Engine(Session& s, int parallel, int max_queue, std::function<std::unique_ptr<Drafter>()> make_drafter,
               const SpecParams& spp, int prefill_chunk, double remote_idle_s, std::vector<double> batch_cost)
    : s_(s), max_queue_(max_queue), spec_((bool)make_drafter), prefill_chunk_(prefill_chunk), remote_idle_s_(remote_idle_s), spp_(spp),
      batch_cost_(std::move(batch_cost)),
      free_slots_(parallel), stats_(new EngineStats) {
    BEAGLE_CHECK(parallel >= 1 && parallel <= s.llama->n_seq(), "engine: %d slots but the cache holds %d sequences",
                 parallel, s.llama->n_seq());
    BEAGLE_CHECK(parallel <= s.llama->max_batch(), "engine: %d slots but a forward takes at most %d rows", parallel,
                 s.llama->max_batch());
    BEAGLE_CHECK(prefill_chunk >= 1, "engine: prefill chunk of %d tokens", prefill_chunk);
    for (int i = 0; i < parallel; i++) {
        slots_.emplace_back(new Slot);
        slots_.back()->seq = i;
        if (spec_) slots_.back()->drafter = make_drafter();
    }
    // after the drafters: a draft with state layers has set them on the target, widening its state rows
    for (auto& sl : slots_) sl->client.dim = s.llama->state_width();
    worker_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
}

bool Engine::submit(const std::shared_ptr<Job>& job) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_ || (int)queue_.size() >= max_queue_ + free_slots_) return false;
        job->t_submit = now_seconds();
        queue_.push_back(job);
        stats_->queue = (int)queue_.size();
    }
    cv_.notify_all();
    return true;
}

void Engine::count_request(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lk(mu_);
    stats_->requests[{endpoint, status}]++;
}

void Engine::loop() {
    for (;;) {
        std::vector<std::pair<Slot*, std::shared_ptr<Job>>> admit;
        {
            std::unique_lock<std::mutex> lk(mu_);
            auto busy = [&] {  // a remote session waiting for its client's next tree is idle
                for (auto& sl : slots_)
                    if (sl->job && (sl->prefilled >= 0 || !sl->job->remote || sl->job->tree_pending || sl->job->cancelled))
                        return true;
                return false;
            };
            cv_.wait_for(lk, std::chrono::milliseconds(500), [&] { return stop_ || !queue_.empty() || busy(); });
            if (stop_) break;
            for (auto& sl : slots_) {
                while (!sl->job && !queue_.empty()) {
                    std::shared_ptr<Job> j = queue_.front();
                    queue_.pop_front();
                    if (j->cancelled) { stats_->finished["cancelled"]++; continue; }
                    sl->job = j;  // reserved; started below, outside the lock
                    free_slots_--;
                    admit.push_back({sl.get(), j});
                }
            }
            stats_->queue = (int)queue_.size();
        }
        for (auto& a : admit) {
            try {
                start(*a.first, a.second);
            } catch (const std::exception& e) {
                finish(*a.first, "", e.what());
            }
        }
        for (auto& sl : slots_)  // one piece of each prompt being prefilled, then the others' round
            if (sl->job && sl->prefilled >= 0 && !sl->job->cancelled) {
                try {
                    prefill_step(*sl);
                } catch (const std::exception& e) {
                    finish(*sl, "", e.what());
                }
            }
        std::vector<Slot*> active;
        const double now = now_seconds();
        for (auto& sl : slots_) {
            if (!sl->job) continue;
            Job& j = *sl->job;
            if (j.cancelled) finish(*sl, "cancelled");
            else if (sl->prefilled >= 0) continue;  // still prefilling
            else if (j.remote && !j.tree_pending && now - j.last_seen > remote_idle_s_) finish(*sl, "cancelled");
            else if (!j.remote || j.tree_pending) active.push_back(sl.get());
        }
        if (!active.empty()) {
            try {
                round(active);
            } catch (const std::exception& e) {
                for (Slot* sl : active)
                    if (sl->job) finish(*sl, "", e.what());
            }
        }
        std::lock_guard<std::mutex> lk(mu_);
        stats_->active = 0;
        for (auto& sl : slots_) stats_->active += sl->job ? 1 : 0;
    }
    // shutting down: every job still here ends with an error
    for (auto& sl : slots_)
        if (sl->job) finish(*sl, "", "the server is shutting down");
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& j : queue_) {
        std::lock_guard<std::mutex> jl(j->mu);
        j->finished = true;
        j->error = "the server is shutting down";
        j->cv.notify_all();
    }
    queue_.clear();
}

void Engine::start(Slot& sl, const std::shared_ptr<Job>& job) {
    Llama& m = *s_.llama;
    m.use_seq(sl.seq);
    const GenRequest& r = job->req;
    sl.cut.reset(new StopText(r.stop));
    sl.prev = job->prompt.back();
    sl.n_gen = 0;
    sl.limit = r.max_tokens < 0 ? INT_MAX : r.max_tokens;
    if (job->remote) {
        SamplingParams greedy;
        greedy.temperature = 0;
        sl.dec.reset(new SpecDecoder(s_, sl.client, greedy, spp_, &sl.st));
    } else if (spec_) {
        sl.dec.reset(new SpecDecoder(s_, *sl.drafter, r.sp, spp_, &sl.st));
    } else {
        sl.sampler.reset(new Sampler(r.sp, m.config().vocab_size));
    }
    m.truncate(0);
    sl.prefilled = 0;
    sl.prefill_s = 0;
    sl.plogits.resize(m.config().vocab_size);
    sl.pstates.resize(sl.dec ? job->prompt.size() * (size_t)m.state_width() : 0);
    std::lock_guard<std::mutex> lk(mu_);
    stats_->prompt_tokens += (long)job->prompt.size();
}

void Engine::prefill_step(Slot& sl) {
    Llama& m = *s_.llama;
    m.use_seq(sl.seq);
    std::shared_ptr<Job> job = sl.job;
    const std::vector<int>& p = job->prompt;
    const int n = std::min(prefill_chunk_, (int)p.size() - sl.prefilled);
    const bool last = sl.prefilled + n == (int)p.size();
    const double t0 = now_seconds();
    m.prefill(p.data() + sl.prefilled, n, last ? sl.plogits.data() : nullptr,
              sl.dec ? &sl.pstates[(size_t)sl.prefilled * m.state_width()] : nullptr);
    sl.prefill_s += now_seconds() - t0;
    sl.prefilled += n;
    if (!last) return;
    sl.prefilled = -1;
    const int first = sl.dec ? sl.dec->begin_prefilled(p, sl.plogits.data(), sl.pstates.data(), sl.prefill_s)
                             : sl.sampler->sample(sl.plogits.data());
    std::vector<float>().swap(sl.pstates);
    if (job->remote) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            remote_[job->session] = job;
        }
        answer(sl, {first});
    } else if (emit(sl, first)) {
        sl.next = first;
    }
}

void Engine::answer(Slot& sl, std::vector<int> committed) {
    Job& j = *sl.job;
    {
        std::lock_guard<std::mutex> lk(j.mu);
        j.path = sl.client.path;
        j.states.swap(sl.client.states);
        j.committed = std::move(committed);
        j.answered = true;
        j.last_seen = now_seconds();
        j.tree_pending = false;
    }
    j.cv.notify_all();
    std::lock_guard<std::mutex> lk(mu_);
    stats_->gen_tokens += (long)j.committed.size();
}

std::shared_ptr<Job> Engine::remote_job(const std::string& session) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = remote_.find(session);
    return it == remote_.end() ? nullptr : it->second;
}

void Engine::verify_tree(const std::shared_ptr<Job>& job, std::vector<int> tokens, std::vector<int> parents) {
    {
        std::lock_guard<std::mutex> lk(job->mu);
        job->tree_tokens = std::move(tokens);
        job->tree_parents = std::move(parents);
        job->answered = false;
        job->tree_pending = true;
    }
    std::lock_guard<std::mutex> lk(mu_);  // the worker sees the tree before it waits again
    cv_.notify_all();
}

void Engine::end_remote(const std::shared_ptr<Job>& job) {
    job->cancelled = true;
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
}

bool Engine::emit(Slot& sl, int tok) {
    Job& j = *sl.job;
    if (s_.is_stop(tok)) {
        finish(sl, "stop");
        return false;
    }
    std::string piece = s_.tok->decode_token(sl.prev, tok);
    sl.prev = tok;
    sl.n_gen++;
    bool stopped = false;
    std::string out = sl.cut->add(piece, &stopped);
    {
        std::lock_guard<std::mutex> lk(j.mu);
        j.text += out;
        j.completion_tokens = sl.n_gen;
    }
    j.cv.notify_all();
    {
        std::lock_guard<std::mutex> lk(mu_);
        stats_->gen_tokens++;
        double now = now_seconds();
        stats_->recent.push_back({now, 1});
        while (!stats_->recent.empty() && stats_->recent.front().first < now - 10) stats_->recent.pop_front();
    }
    if (stopped) {
        finish(sl, "stop");
        return false;
    }
    if (sl.n_gen >= sl.limit) {
        finish(sl, "length");
        return false;
    }
    return true;
}

void Engine::finish(Slot& sl, const std::string& reason, const std::string& error) {
    std::shared_ptr<Job> j = sl.job;
    sl.job.reset();
    sl.next = -1;
    sl.prefilled = -1;
    {
        // the slot counts as free before the client hears the end (its next request must find room)
        std::lock_guard<std::mutex> lk(mu_);
        free_slots_++;
        if (j->remote) remote_.erase(j->session);
        EngineStats& t = *stats_;
        t.finished[error.empty() ? reason : "error"]++;
        if (sl.dec) {
            t.rounds += sl.st.rounds;
            t.after_root += sl.st.gen_tokens_after_root;
            t.drafted += sl.st.drafted;
            size_t K = sl.st.reached_by_depth.size();
            if (t.reached.size() < K) { t.reached.resize(K); t.accepted.resize(K); }
            for (size_t k = 0; k < K; k++) {
                t.reached[k] += sl.st.reached_by_depth[k];
                t.accepted[k] += sl.st.accept_by_depth[k];
            }
            sl.st = SpecStats();
            sl.dec.reset();
        }
    }
    {
        std::lock_guard<std::mutex> lk(j->mu);
        if (sl.cut && error.empty()) j->text += sl.cut->flush();
        j->finished = true;
        j->finish_reason = reason;
        j->error = error;
    }
    j->cv.notify_all();
}

void Engine::round(const std::vector<Slot*>& active) {
    Llama& m = *s_.llama;
    const int V = m.config().vocab_size, D = m.state_width();
    // mode auto with two or more slots: the batch's round policy chooses a speculative or a plain round
    RoundPolicy* batch = nullptr;
    bool propose = true;
    if (!batch_cost_.empty() && active.size() >= 2) {
        std::unique_ptr<RoundPolicy>& p = batch_policy_[(int)active.size()];
        if (!p) {
            RoundPolicy::Setup setup;
            setup.verify_cost = batch_cost_;
            setup.draft_mode = "speculative";
            setup.lookup_arm = true;
            setup.plain_rows = (int)active.size();
            p.reset(new RoundPolicy(setup));
        }
        batch = p.get();
        propose = batch->choose().draft;
    }
    // what each slot sends: its next token (plain) or its draft tree (speculative)
    std::vector<Slot*> rows;
    std::vector<Llama::Segment> segs;
    bool any_tree = false;
    double draft_s = 0;
    for (Slot* sl : active) {
        Llama::Segment g;
        g.seq = sl->seq;
        m.use_seq(sl->seq);
        if (sl->dec) {  // speculative or remote: a tree
            if (sl->job->remote) {
                std::lock_guard<std::mutex> lk(sl->job->mu);
                sl->client.tokens = sl->job->tree_tokens;
                sl->client.parents = sl->job->tree_parents;
            }
            any_tree = true;
            const double td = now_seconds();
            const bool room = sl->dec->draft(propose || sl->job->remote);
            draft_s += now_seconds() - td;
            if (!room) {
                finish(*sl, "length");
                continue;
            }
            g.T = sl->dec->tree().size();
            g.tree_mask = sl->dec->mask();
            g.mask_words = sl->dec->tree().words();
        } else {
            if (m.n_past() >= m.ctx()) {  // context full (as Session::generate_plain)
                finish(*sl, "length");
                continue;
            }
            g.T = 1;
        }
        rows.push_back(sl);
        segs.push_back(g);
    }
    long context_sum = 0;  // the batch policy's context (its cost's range): the slots' mean length, before the
                           // forward
    if (batch)
        for (Slot* sl : rows) context_sum += m.seq_len(sl->seq);
    const int context = rows.empty() ? 0 : (int)(context_sum / (long)rows.size());
    // one forward per group of slots that fits in max_batch rows (all of them, unless trees are large)
    int rows_total = 0, committed = 0, forwards = 0;
    double forward_s = 0;
    for (size_t i = 0; i < rows.size();) {
        size_t j = i;
        int T = 0;
        std::vector<int> tokens, pos;
        while (j < rows.size() && (j == i || T + segs[j].T <= m.max_batch())) {
            Slot& sl = *rows[j];
            if (sl.dec) {
                const DraftTree& tr = sl.dec->tree();
                tokens.insert(tokens.end(), tr.token.begin(), tr.token.end());
                pos.insert(pos.end(), sl.dec->positions().begin(), sl.dec->positions().end());
            } else {
                tokens.push_back(sl.next);
                pos.push_back(m.seq_len(sl.seq));
            }
            T += segs[j++].T;
        }
        std::vector<Llama::Segment> group(segs.begin() + i, segs.begin() + j);
        std::vector<float> logits((size_t)T * V), states(any_tree ? (size_t)T * D : 0);
        const double t0 = now_seconds();
        m.forward_segments(tokens.data(), pos.data(), group, logits.data(), any_tree ? states.data() : nullptr);
        const double dt = now_seconds() - t0;
        rows_total += T;
        forwards++;
        forward_s += dt;
        {
            std::lock_guard<std::mutex> lk(mu_);
            stats_->forwards++;
            stats_->forward_rows += T;
        }
        for (size_t r = 0, off = 0; r < group.size(); off += group[r].T, r++) {
            Slot& sl = *rows[i + r];
            if (!sl.dec) {
                int tok = sl.sampler->sample(&logits[off * V]);
                committed++;
                if (emit(sl, tok)) sl.next = tok;
                continue;
            }
            m.use_seq(sl.seq);
            std::vector<int> out;
            // the forward's time is this slot's verify cost only when the slot was alone in it
            sl.dec->commit(&logits[off * V], &states[off * D], group.size() == 1 ? dt : 0.0, &out);
            committed += (int)out.size();
            if (sl.job->remote) {
                answer(sl, out);
                continue;
            }
            for (int tok : out)
                if (!emit(sl, tok)) break;
        }
        i = j;
    }
    if (batch && forwards > 0) {  // the round's drafting, its forward (when one), what it committed
        batch->observe_draft(draft_s, propose ? 1 : 0);
        if (forwards == 1) batch->observe_verify(rows_total, forward_s, context);
        batch->observe_round(rows_total, committed);
    }
}

std::string Engine::metrics() const {
    std::lock_guard<std::mutex> lk(mu_);
    const EngineStats& t = *stats_;
    std::string o;
    auto metric = [&](const char* name, const char* type, const char* help) {
        o += strfmt("# HELP beagle_%s %s\n# TYPE beagle_%s %s\n", name, help, name, type);
    };
    auto single = [&](const char* name, const char* type, const char* help, double v) {  // a metric without labels
        metric(name, type, help);
        o += strfmt("beagle_%s %.17g\n", name, v);
    };
    metric("requests_total", "counter", "HTTP requests by endpoint and status");
    for (auto& r : t.requests)
        o += strfmt("beagle_requests_total{endpoint=\"%s\",status=\"%d\"} %ld\n", r.first.first.c_str(), r.first.second, r.second);
    metric("jobs_finished_total", "counter", "generation jobs by how they ended (stop, length, cancelled, error)");
    for (auto& r : t.finished) o += strfmt("beagle_jobs_finished_total{reason=\"%s\"} %ld\n", r.first.c_str(), r.second);
    double now = now_seconds();
    long recent = 0;
    for (auto& r : t.recent)
        if (r.first >= now - 10) recent += r.second;
    const struct { const char* name; const char* type; const char* help; double v; } singles[] = {
        {"prompt_tokens_total", "counter", "prompt tokens prefilled", (double)t.prompt_tokens},
        {"generated_tokens_total", "counter", "tokens generated", (double)t.gen_tokens},
        {"target_forwards_total", "counter", "target forward passes after prefill (plain rounds and verify passes)", (double)t.forwards},
        {"target_forward_rows_total", "counter", "token rows in those forward passes", (double)t.forward_rows},
        {"queue_length", "gauge", "requests waiting for a slot", (double)t.queue},
        {"slots_active", "gauge", "slots generating", (double)t.active},
        {"tokens_per_second", "gauge", "tokens generated per second over the last 10 s", recent / 10.0},
        {"spec_rounds_total", "counter", "speculative verify rounds of finished jobs", (double)t.rounds},
        {"spec_drafted_total", "counter", "draft candidates sent to verification", (double)t.drafted},
        {"spec_tau", "gauge", "tokens committed per verify round (finished jobs)", t.rounds ? (double)t.after_root / t.rounds : 0.0},
    };
    for (auto& m : singles) single(m.name, m.type, m.help, m.v);
    metric("spec_reached_total", "counter", "rounds whose tree had a candidate at this depth");
    for (size_t k = 0; k < t.reached.size(); k++) o += strfmt("beagle_spec_reached_total{depth=\"%zu\"} %ld\n", k + 1, t.reached[k]);
    metric("spec_accepted_total", "counter", "rounds that accepted a candidate at this depth");
    for (size_t k = 0; k < t.accepted.size(); k++) o += strfmt("beagle_spec_accepted_total{depth=\"%zu\"} %ld\n", k + 1, t.accepted[k]);
    metric("spec_acceptance", "gauge", "accepted / reached per depth");
    for (size_t k = 0; k < t.reached.size(); k++)
        o += strfmt("beagle_spec_acceptance{depth=\"%zu\"} %.4f\n", k + 1, t.reached[k] ? (double)t.accepted[k] / t.reached[k] : 0.0);
    return o;
}

}  // namespace beagle
