// threadpool.h: a fixed pool of worker threads for data-parallel loops (the CPU backend's engine).
// parallel_for splits [0, n) into one contiguous static chunk per thread, so the split is
// deterministic; between jobs workers spin (pause, then sched_yield) for up to 5 ms, then sleep
// (decode issues hundreds of small jobs per token).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace beagle {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // n_threads >= 1 (the caller's thread counts as one)
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Later parallel_for jobs use at most n of the threads (1: the caller alone, no worker woken;
    // 0 or >= size(): all). The split stays static, so results do not change, only who computes them.
    // The speculative drafter runs small draft forwards this way when a split measured slower.
    void set_limit(int n) { limit_ = n <= 0 || n > n_threads_ ? n_threads_ : n; }
    int limit() const { return limit_; }
    // fn(begin, end, thread_index) over static chunks of [0, n); returns when all chunks are done.
    // cost: rough work per item (e.g. flops); jobs under ~64K in total run on the caller alone,
    // since waking a worker costs more than that (the result does not depend on the split).
    using RangeFn = std::function<void(int64_t, int64_t, int)>;
    void parallel_for(int64_t n, const RangeFn& fn, int64_t cost = 1 << 20);
    // The threads parallel_for(n, fn, cost) splits its items over: 1 (the caller alone) for a tiny job,
    // else limit(). For a job in phases run through run_on_all with the same rule.
    int threads_for(int64_t n, int64_t cost) const;
    // fn(thread_index) once on every thread.
    void run_on_all(const std::function<void(int)>& fn);

private:
    void worker(int idx);
    int n_threads_, limit_;
    std::vector<std::thread> threads_;
    const std::function<void(int)>* job_ = nullptr;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<int> sleepers_{0};
};

// A one-use barrier inside one run_on_all job, for a job in phases (a matmul: quantize the activations,
// then multiply): wait() returns once n threads have called it. It spins like an idle worker (pause,
// then sched_yield), so a thread descheduled by a busy machine gets its core back.
class SpinBarrier {
public:
    explicit SpinBarrier(int n) : n_(n) {}
    void wait();

private:
    const int n_;
    std::atomic<int> arrived_{0};
};

// Default thread count: hardware concurrency (at least 1).
int default_threads();

}  // namespace beagle
