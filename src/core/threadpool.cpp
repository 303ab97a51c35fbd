// threadpool.cpp: the spin-then-sleep worker pool of threadpool.h: static chunks per thread, idle
// workers pause-spin, yield, then sleep on a condition variable (the stages are described below).
#include "threadpool.h"

#include <immintrin.h>
#include <sched.h>

#include "common.h"

namespace beagle {

int default_threads() {
    unsigned n = std::thread::hardware_concurrency();
    return n ? (int)n : 1;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads), limit_(n_threads_) {
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

// Idle workers wait for the next job in three stages: pause-spin for SPIN_PAUSE_S (decode issues
// hundreds of jobs per token, microseconds apart), then spin with sched_yield until SPIN_S (the host
// work of speculative decoding between forwards takes up to a few ms; yield hands the core to any
// other runnable thread, so a busy or oversubscribed machine is not starved by a spinning worker),
// then sleep on the condition variable (a futex wake-up costs tens of microseconds on a VM).
constexpr double SPIN_PAUSE_S = 50e-6, SPIN_S = 5e-3;

// A thread waiting for others within a job (run_on_all's caller, SpinBarrier): pause-spin, and after
// SPIN_PAUSE_S yield now and then, since a thread descheduled by a busy machine may need this core.
template <class Done>
static void spin_until(Done done) {
    const double t0 = now_seconds();
    for (int spins = 1; !done(); spins++) {
        _mm_pause();
        if (spins % 64 == 0 && now_seconds() - t0 > SPIN_PAUSE_S) sched_yield();
    }
}

void ThreadPool::worker(int idx) {
    uint64_t seen = 0;
    for (;;) {
        const double t0 = now_seconds();
        for (int spins = 1; generation_.load(std::memory_order_acquire) == seen; spins++) {
            _mm_pause();
            if (spins % 64 != 0) continue;
            const double waited = now_seconds() - t0;
            if (waited < SPIN_PAUSE_S) continue;
            if (waited < SPIN_S) {
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
    spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
    job_ = nullptr;
}

void SpinBarrier::wait() {
    arrived_.fetch_add(1, std::memory_order_acq_rel);
    spin_until([&] { return arrived_.load(std::memory_order_acquire) >= n_; });
}

int ThreadPool::threads_for(int64_t n, int64_t cost) const {
    return limit_ == 1 || n <= 1 || n * cost < (1 << 16) ? 1 : limit_;
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t cost) {
    if (n <= 0) return;
    const int nt = threads_for(n, cost);
    if (nt == 1) {
        fn(0, n, 0);
        return;
    }
    run_on_all([&](int t) {
        if (t >= nt) return;  // beyond the limit: woken, no chunk
        int64_t b = n * t / nt, e = n * (t + 1) / nt;
        if (b < e) fn(b, e, t);
    });
}

}  // namespace beagle
