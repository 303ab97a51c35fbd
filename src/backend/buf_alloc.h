// buf_alloc.h: the buffer allocator of the draft's training and inference code: backend allocations
// (Ops::alloc or CpuOps64::alloc) with a byte counter, so a test can print the peak bytes of one
// training step (SPEC 3, stage-2 memory). Used by src/model/draft*.cpp and src/train/*.
#pragma once
#include <cstddef>
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
    }
    BufAlloc(const BufAlloc&) = delete;
    BufAlloc& operator=(const BufAlloc&) = delete;

    R* alloc(size_t n) {  // zero-initialised
        R* p = ops_.alloc(n);
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
        ops_.release(p);
        p = nullptr;
    }
    size_t current_bytes() const { return cur_; }
    size_t peak_bytes() const { return peak_; }
    void reset_peak() { peak_ = cur_; }
    O& ops() { return ops_; }

private:
    O& ops_;
    std::unordered_map<const void*, size_t> live_;
    size_t cur_ = 0, peak_ = 0;
};

}  // namespace beagle
