// buf_alloc.h: the buffer allocator of the draft's training and inference code: backend allocations
// (Ops::alloc or CpuOps64::alloc) with a byte counter, so a test can print the peak bytes of one
// training step (docs/method.md "Memory budget"). Used by src/model/draft*.cpp and src/train/*.
// With keep_released(true) (the trainer on a device backend) it is its own pool: a released buffer
// stays here and serves the next request of at most its size (the smallest such buffer), so once an
// iteration at the largest shapes has run, the smaller ones reuse its buffers and allocate nothing.
#pragma once
#include <cstddef>
#include <map>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "../core/common.h"

namespace beagle {

// The scalar type of an op set: float for Ops, double for CpuOps64.
template <class O>
using RealOf = std::remove_pointer_t<decltype(std::declval<O&>().alloc(0))>;

template <class O>
class BufAlloc {
public:
    using R = RealOf<O>;
    explicit BufAlloc(O& ops) : ops_(ops) {}
    ~BufAlloc() {
        for (auto& kv : live_) ops_.release((R*)kv.first);
        for (auto& kv : pool_) ops_.release(kv.second);
    }
    BufAlloc(const BufAlloc&) = delete;
    BufAlloc& operator=(const BufAlloc&) = delete;

    void keep_released(bool on) { keep_ = on; }

    R* alloc(size_t n) {  // zero-initialised
        R* p = nullptr;
        auto it = keep_ ? pool_.lower_bound(n) : pool_.end();
        if (it != pool_.end()) {  // the smallest kept buffer that holds n
            p = it->second;
            cap_[p] = it->first;
            pool_.erase(it);
            ops_.zero(p, n);
        } else {
            p = ops_.alloc(n);
            cap_[p] = n;
        }
        size_t bytes = n * sizeof(R);
        live_[p] = bytes;
        cur_ += bytes;
        if (cur_ > peak_) peak_ = cur_;
        return p;
    }
    void release(R*& p) {
        if (!p) return;
        auto it = live_.find(p);
        BEAGLE_CHECK(it != live_.end(), "BufAlloc: releasing a buffer it did not allocate");
        cur_ -= it->second;
        live_.erase(it);
        if (keep_) pool_.emplace(cap_[p], p);
        else ops_.release(p);
        cap_.erase(p);
        p = nullptr;
    }
    size_t current_bytes() const { return cur_; }
    size_t peak_bytes() const { return peak_; }
    void reset_peak() { peak_ = cur_; }
    O& ops() { return ops_; }

private:
    O& ops_;
    std::unordered_map<const void*, size_t> live_;  // live buffer -> bytes asked for
    std::unordered_map<const void*, size_t> cap_;   // live buffer -> elements it holds
    std::multimap<size_t, R*> pool_;                // keep_released: elements -> kept buffer
    bool keep_ = false;
    size_t cur_ = 0, peak_ = 0;
};

}  // namespace beagle
