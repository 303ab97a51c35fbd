// data_parallel.h: data-parallel training over ranks (docs/distributed.md) with sums that do not
// depend on the number of ranks. A batch's n items are the leaves of one fixed binary tree of the item
// index, node [lo, hi) = [lo, mid) + [mid, hi) with mid = lo + (hi - lo) / 2. Rank r of P (P a power of
// two) owns the r-th node at depth log2 P (tree_share) and sums its items' gradients over that subtree;
// the tree's top log2 P levels are a butterfly: at level l rank r exchanges its partial sum with rank
// r ^ 2^l and both add left + right (IEEE addition commutes exactly, so both hold the same bits). One
// process walks the same tree from the root: 1, 2 and 4 ranks add the same numbers in the same order.
#pragma once
#include <functional>
#include <vector>

#include "../core/comm.h"
#include "../model/draft_layers.h"
#include "trainer.h"

namespace beagle {

struct ItemRange {
    int lo = 0, hi = 0;
    bool empty() const { return hi <= lo; }
};

// The node of [0, n) at depth log2(size) that rank `rank` owns (empty when n < size and the tree runs out).
ItemRange tree_share(int n, int rank, int size);
bool is_power_of_two(int x);

// Memory per rank of data-parallel training (`beagle train --plan --ranks N`), from the one-process
// buffer list (train_memory): the gradient tree's partial sums and receive buffer (GradTree::grad_slots
// for ceil(batch / ranks) items per rank) on top, and the AdamW moments sharded 1/ranks (ZeRO-1, what
// the trainer does; adamw.h) or, for comparison, replicated on every rank. exchange_bytes: bytes each
// rank sends per optimizer step: log2(ranks) butterfly levels of one gradient set, plus the weight
// slices of the all-gather after the sharded update ((ranks - 1) / ranks of the weights).
struct RankMemory {
    double extra_grads = 0;               // partial sums + receive buffer beyond the model's own gradients
    double replicated = 0, sharded = 0;   // total per rank: persistent + extra + iteration peak
    double moments_replicated = 0, moments_sharded = 0;
    double exchange_bytes = 0;
};
RankMemory rank_memory(const TrainMemory& one, int ranks, int batch);

// Sums per-item gradients over the tree. leaf(k) computes item k's gradient into model.g (zeroed
// before the call); after run(), model.g holds the batch's sum on every rank. Gradient buffers: the
// model's own plus one per tree level below this rank's share (allocated on first use), plus one
// receive buffer when size > 1 (grad_slots says how many).
class GradTree {
public:
    // host: MPI or single; grads: the communicator of the gradient buffers (the same as host on the
    // CPU backend; NCCL on the CUDA backend).
    GradTree(DraftModelT<Ops>& m, Comm& host, Comm& grads);
    virtual ~GradTree();
    GradTree(const GradTree&) = delete;
    GradTree& operator=(const GradTree&) = delete;

    void run(int n, const std::function<void(int k)>& leaf);
    // Element-wise sum over ranks of per-item records (host doubles, `width` per item, n items): each
    // rank fills the rows of its own items and leaves the others 0; afterwards every rank has all rows.
    void gather_rows(std::vector<double>& rows);
    // ZeRO-1 (adamw.h): each rank updated its slice of every weight tensor; afterwards all ranks hold all of them.
    void share_weights();
    // A tensor of n elements of which this rank holds slice r (backend memory; AdamW moments) as a whole,
    // on every rank (host memory; for checkpoints).
    std::vector<float> gather_host(const float* slice, size_t n);
    double seconds_communicating() const { return comm_seconds_; }
    size_t bytes_sent() const { return bytes_sent_; }
    static int grad_slots(int n_local, int size);

protected:
    // Sums this rank's items (mine, not empty) into gradient set 0: the item tree (subtree), which keeps
    // the bits independent of the number of ranks. A test overrides it with an order that is not
    // (test_grad_tree.cpp: each rank's items added in place) to show that its check across rank counts
    // catches such a reduction.
    virtual void local_sum(ItemRange mine, const std::function<void(int k)>& leaf);
    float** slot(int s);  // gradient set s (0 = the model's own)
    DraftModelT<Ops>& m_;

private:
    void subtree(int lo, int hi, int s, const std::function<void(int k)>& leaf);
    void add_slot(int dst, int src);
    void exchange_slot(int s_send, int s_recv, int peer);
    void exchange(const float* send, size_t n_send, float* recv, size_t n_recv, int peer);
    Comm& host_;
    Comm& grads_;
    std::vector<std::vector<float*>> slots_;  // slots_[s][tensor]
    std::vector<float> stage_send_, stage_recv_;  // host staging when the gradient comm takes host memory only
    double comm_seconds_ = 0;
    size_t bytes_sent_ = 0;
};

}  // namespace beagle
