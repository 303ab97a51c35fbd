// threadpool.cpp: spin-then-sleep worker pool (see threadpool.h).
#include "threadpool.h"

#include <immintrin.h>
#include <sched.h>

namespace beagle {

int default_threads() {
    unsigned n = std::thread::hardware_concurrency();
    return n ? (int)n : 1;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    for (int i = 1; i < n_threads_; i++) threads_.emplace_back(&ThreadPool::worker, this, i);
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int idx) {
    uint64_t seen = 0;
    for (;;) {
        // spin for a while, then sleep on the condition variable
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen) {
            if (++spins < 4000) {
                _mm_pause();
                continue;
            }
            if (spins < 4100) {  // let a busy machine run something else before we sleep
                sched_yield();
                continue;
            }
            std::unique_lock<std::mutex> lk(mu_);
            sleepers_.fetch_add(1);
            cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            sleepers_.fetch_sub(1);
            break;
        }
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load()) return;
        (*job_)(idx);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
    if (n_threads_ == 1) {
        fn(0);
        return;
    }
    job_ = &fn;
    pending_.store(n_threads_ - 1, std::memory_order_release);
    {
        // publish under the lock so a worker that is about to sleep cannot miss the wake-up
        std::lock_guard<std::mutex> lk(mu_);
        generation_.fetch_add(1, std::memory_order_acq_rel);
    }
    if (sleepers_.load() > 0) cv_.notify_all();
    fn(0);
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; spins++) {
        if (spins < 4000) _mm_pause();
        else sched_yield();  // a descheduled worker needs this core
    }
    job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t cost) {
    if (n <= 0) return;
    int nt = n_threads_;
    if (nt == 1 || n == 1 || n * cost < (1 << 16)) {
        fn(0, n, 0);
        return;
    }
    run_on_all([&](int t) {
        int64_t b = n * t / nt, e = n * (t + 1) / nt;
        if (b < e) fn(b, e, t);
    });
}

}  // namespace beagle
