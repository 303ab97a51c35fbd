// engine.h: the server's generation loop. One model, `parallel` slots (each a sequence of the target's
// KV cache, Llama::use_seq), a bounded queue, one worker thread. Each round the worker admits queued
// jobs, prefills the next piece (at most prefill_chunk tokens) of each prompt not yet prefilled, then
// advances every other active slot in ONE target forward (Llama::forward_segments): a plain slot adds
// its next token, a speculative slot its draft tree (SpecDecoder::draft), each with its own mask over
// its own sequence; then each slot samples or accepts (SpecDecoder::commit). Kernels are
// batch-invariant, so every greedy response equals the request decoded alone.
// HTTP threads submit Jobs and read their text as it comes (Job::wait); they never touch the model.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../decode/round_policy.h"
#include "../decode/session.h"
#include "../decode/speculative.h"
#include "openai.h"

namespace beagle {

// One request between an HTTP thread and the engine.
struct Job {
    GenRequest req;
    std::vector<int> prompt;  // token ids, shorter than the context
    double t_submit = 0;

    // Filled by the engine (under mu); the HTTP thread waits on cv.
    std::mutex mu;
    std::condition_variable cv;
    std::string text;                  // text not yet taken by the HTTP thread
    bool finished = false;
    std::string finish_reason;         // "stop" | "length"; "" with error set
    std::string error;                 // the engine failed this request (500)
    int completion_tokens = 0;
    std::atomic<bool> cancelled{false};  // the client went away: the engine drops the job

    // Waits up to `seconds` for new text or the end; moves the new text into *out. True once finished.
    bool wait(double seconds, std::string* out);

    // Remote drafting (remote.h): the slot stays with the job between the client's trees.
    bool remote = false;
    std::string session;
    std::atomic<bool> tree_pending{false};  // tree_tokens/tree_parents hold a tree to verify
    std::vector<int> tree_tokens, tree_parents;
    bool answered = false;                  // the answer below is ready (under mu)
    std::vector<int> path, committed;       // accepted path (node indices); committed tokens (start: the first)
    std::vector<float> states;              // start: the prompt's states; verify: the path's
    std::string wire = "f32";               // how the answers encode them (encode_states in remote.h)
    std::vector<int> blocks = {0};          // the dim-wide blocks of the target's state rows it gets: 0 the
                                            // state f, 1 + k the k-th of the server's state layers
    bool zlib = false;                      // compress the start answer's states
    double last_seen = 0;
    // Waits for the answer to the last start or tree, or the job's end (the engine gives one or the
    // other to every start and tree); true if answered.
    bool wait_answer();
};

struct EngineStats;  // counters for /metrics (engine.cpp)

class Engine {
public:
    // make_drafter: one drafter per slot (null: plain decoding). The session's Llama must hold
    // `parallel` sequences.
    // prefill_chunk: prompt tokens a slot prefills per round (a long prompt does not stall the other
    // slots' decoding for its whole prefill). remote_idle_s: a remote session without a tree for this
    // long is dropped. batch_cost (mode auto): the verify cost table; with it a round of two or more
    // slots is either speculative (each slot's drafter as its own round policy decides) or plain (every
    // slot its next token alone), as a round policy per batch size chooses (round_policy.h: the plain
    // side commits k tokens for cost[k], the speculative side what it measures).
    Engine(Session& s, int parallel, int max_queue, std::function<std::unique_ptr<Drafter>()> make_drafter,
           const SpecParams& spp, int prefill_chunk = 64, double remote_idle_s = 60,
           std::vector<double> batch_cost = {});
    ~Engine();  // stops the worker; unfinished jobs end with an error
    // False when every slot is taken and the queue is full (the caller answers 503).
    bool submit(const std::shared_ptr<Job>& job);
    std::string metrics() const;  // Prometheus text
    void count_request(const std::string& endpoint, int status);
    // Remote drafting: the session's job (null if none); hand it a tree to verify (false: no such session).
    std::shared_ptr<Job> remote_job(const std::string& session);
    void verify_tree(const std::shared_ptr<Job>& job, std::vector<int> tokens, std::vector<int> parents);
    void end_remote(const std::shared_ptr<Job>& job);

private:
    struct Slot;
    Session& s_;
    const int max_queue_;
    const bool spec_;
    const int prefill_chunk_;
    const double remote_idle_s_;
    std::map<std::string, std::shared_ptr<Job>> remote_;  // session -> job (under mu_)
    SpecParams spp_;
    std::vector<double> batch_cost_;
    std::map<int, std::unique_ptr<RoundPolicy>> batch_policy_;  // slots in the round -> its round policy
    std::vector<std::unique_ptr<Slot>> slots_;
    mutable std::mutex mu_;  // queue_, stop_, stats_
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> queue_;
    int free_slots_ = 0;  // slots without a job (a queued job may take one before the worker admits it)
    bool stop_ = false;
    std::unique_ptr<EngineStats> stats_;
    std::thread worker_;

    void loop();
    void start(Slot& sl, const std::shared_ptr<Job>& job);  // set up; the prompt is prefilled by prefill_step
    void prefill_step(Slot& sl);  // the next piece of the prompt; after the last, the first token
    bool emit(Slot& sl, int tok);  // false: the job is finished
    void finish(Slot& sl, const std::string& reason, const std::string& error = "");
    void answer(Slot& sl, std::vector<int> committed);  // remote: the answer to a start or a tree
    void round(const std::vector<Slot*>& active);  // one target forward (or a few, if over max_batch)
};

}  // namespace beagle
