// data_parallel.cpp: the fixed-order gradient tree of data-parallel training (data_parallel.h).
#include "data_parallel.h"

#include <cstring>

#include "../core/common.h"
#include "adamw.h"

namespace beagle {

bool is_power_of_two(int x) { return x >= 1 && (x & (x - 1)) == 0; }

ItemRange tree_share(int n, int rank, int size) {
    BEAGLE_CHECK(is_power_of_two(size) && rank >= 0 && rank < size, "tree_share: rank %d of %d (size must be a power of two)",
                 rank, size);
    ItemRange r{0, n};
    for (int bit = size >> 1; bit >= 1; bit >>= 1) {  // the rank's bits, highest first: 0 = left child, 1 = right
        int mid = r.lo + (r.hi - r.lo) / 2;
        if (rank & bit) r.lo = mid;
        else r.hi = mid;
    }
    return r;
}

int GradTree::grad_slots(int n_local, int size) {
    int depth = 0;  // levels of the local subtree: ceil(log2 n_local)
    while ((1 << depth) < n_local) depth++;
    return 1 + depth + (size > 1 && depth == 0 ? 1 : 0);  // the exchange receives into slot 1
}

RankMemory rank_memory(const TrainMemory& one, int ranks, int batch) {
    BEAGLE_CHECK(is_power_of_two(ranks), "--ranks must be a power of two (1, 2, 4, 8, ...), got %d", ranks);
    RankMemory r;
    int local = (batch + ranks - 1) / ranks, levels = 0;
    while ((1 << levels) < ranks) levels++;
    r.extra_grads = (GradTree::grad_slots(local, ranks) - 1) * one.weights;
    r.moments_replicated = 2 * one.weights;
    r.moments_sharded = 2 * one.weights / ranks;  // the largest slice is at most one element more: ignored
    r.replicated = one.persistent + r.extra_grads + one.iteration_peak;
    r.sharded = r.replicated - r.moments_replicated + r.moments_sharded;
    r.exchange_bytes = levels * one.weights + one.weights * (ranks - 1) / ranks;  // gradients + weight slices
    return r;
}

GradTree::GradTree(DraftModelT<Ops>& m, Comm& host, Comm& grads) : m_(m), host_(host), grads_(grads) {
    BEAGLE_CHECK(is_power_of_two(host.size()), "data-parallel training needs a power-of-two number of ranks (1, 2, 4, 8, ...), got %d",
                 host.size());
    m_.enable_grads();
    slots_.push_back(std::vector<float*>(m_.g, m_.g + DT_COUNT));
}

GradTree::~GradTree() {
    for (int i = 0; i < DT_COUNT; i++) m_.g[i] = slots_[0][i];
    for (size_t s = 1; s < slots_.size(); s++)
        for (float* p : slots_[s]) m_.ops.release(p);
}

float** GradTree::slot(int s) {
    while ((int)slots_.size() <= s) {
        std::vector<float*> set(DT_COUNT);
        for (int i = 0; i < DT_COUNT; i++) set[i] = m_.ops.alloc((size_t)m_.cfg.numel(i));
        slots_.push_back(set);
    }
    return slots_[s].data();
}

void GradTree::add_slot(int dst, int src) {
    float** d = slot(dst);
    float** x = slot(src);
    for (int i = 0; i < DT_COUNT; i++) m_.ops.add(d[i], x[i], (size_t)m_.cfg.numel(i));
}

// Sum of the items [lo, hi) (hi > lo) into slot s; slots above s are scratch.
void GradTree::subtree(int lo, int hi, int s, const std::function<void(int k)>& leaf) {
    if (hi - lo == 1) {
        float** g = slot(s);
        for (int i = 0; i < DT_COUNT; i++) {
            m_.g[i] = g[i];
            m_.ops.zero(g[i], (size_t)m_.cfg.numel(i));
        }
        leaf(lo);
        return;
    }
    int mid = lo + (hi - lo) / 2;
    subtree(lo, mid, s, leaf);
    subtree(mid, hi, s + 1, leaf);
    add_slot(s, s + 1);  // left + right
}

void GradTree::local_sum(ItemRange mine, const std::function<void(int k)>& leaf) { subtree(mine.lo, mine.hi, 0, leaf); }

// Sends n_send floats of backend memory to `peer` and receives n_recv from it.
void GradTree::exchange(const float* send, size_t n_send, float* recv, size_t n_recv, int peer) {
    const bool direct = grads_.device_buffers() || std::strcmp(m_.ops.name(), "cpu") == 0;
    double t0 = now_seconds();
    if (direct) {
        grads_.exchange(send, n_send * sizeof(float), recv, n_recv * sizeof(float), peer);
    } else {  // device memory over a host communicator: stage through the host
        stage_send_.resize(n_send);
        stage_recv_.resize(n_recv);
        m_.ops.download(stage_send_.data(), send, n_send);
        grads_.exchange(stage_send_.data(), n_send * sizeof(float), stage_recv_.data(), n_recv * sizeof(float), peer);
        m_.ops.upload(recv, stage_recv_.data(), n_recv);
    }
    bytes_sent_ += n_send * sizeof(float);
    comm_seconds_ += now_seconds() - t0;
}

void GradTree::exchange_slot(int s_send, int s_recv, int peer) {
    float** a = slot(s_send);
    float** b = slot(s_recv);
    for (int i = 0; i < DT_COUNT; i++) exchange(a[i], (size_t)m_.cfg.numel(i), b[i], (size_t)m_.cfg.numel(i), peer);
}

// The all-gather of slices: rank r holds slice r of x (n elements, slice_begin); at level l the group
// of 2^l ranks around r swaps its block of slices with the neighbouring group's. Plain copies: exact.
template <class X>
static void allgather_slices(int r, int P, size_t n, const X& exchange_blocks) {
    for (int l = 0; (1 << l) < P; l++) {
        int g0 = r & ~((1 << l) - 1), p0 = g0 ^ (1 << l);
        size_t a0 = slice_begin(n, g0, P), a1 = slice_begin(n, g0 + (1 << l), P);
        size_t b0 = slice_begin(n, p0, P), b1 = slice_begin(n, p0 + (1 << l), P);
        exchange_blocks(a0, a1 - a0, b0, b1 - b0, r ^ (1 << l));
    }
}

void GradTree::share_weights() {
    const int P = host_.size(), r = host_.rank();
    for (int i = 0; i < DT_COUNT; i++) {
        float* w = m_.w[i];
        allgather_slices(r, P, (size_t)m_.cfg.numel(i), [&](size_t a0, size_t na, size_t b0, size_t nb, int peer) {
            exchange(w + a0, na, w + b0, nb, peer);
        });
    }
}

std::vector<float> GradTree::gather_host(const float* slice, size_t n) {
    const int P = host_.size(), r = host_.rank();
    std::vector<float> full(n);
    size_t lo = slice_begin(n, r, P);
    m_.ops.download(full.data() + lo, slice, slice_begin(n, r + 1, P) - lo);
    allgather_slices(r, P, n, [&](size_t a0, size_t na, size_t b0, size_t nb, int peer) {
        host_.exchange(full.data() + a0, na * sizeof(float), full.data() + b0, nb * sizeof(float), peer);
    });
    return full;
}

void GradTree::run(int n, const std::function<void(int k)>& leaf) {
    const int P = host_.size(), r = host_.rank();
    ItemRange mine = tree_share(n, r, P);
    if (!mine.empty()) local_sum(mine, leaf);
    else
        for (int i = 0; i < DT_COUNT; i++) m_.ops.zero(slot(0)[i], (size_t)m_.cfg.numel(i));
    // The butterfly: after level l, rank r holds the sum of the node at depth log2(P) - l - 1 above it.
    int depth = 0;
    while ((1 << depth) < P) depth++;
    for (int l = 0; l < depth; l++) {
        const int peer = r ^ (1 << l);
        // the two nodes at depth (depth - l): the one this rank's sum covers and the peer's
        ItemRange a = tree_share(n, r >> l, P >> l), b = tree_share(n, peer >> l, P >> l);
        if (a.empty() && b.empty()) continue;  // both groups are past the end of the batch (both sides know)
        exchange_slot(0, 1, peer);
        if (b.empty()) continue;  // the peer's group has no items: keep this sum
        if (a.empty()) {          // this group has none (slot 0 is still zero): take the peer's sum as it is
            for (int i = 0; i < DT_COUNT; i++) m_.ops.copy(slot(0)[i], slot(1)[i], (size_t)m_.cfg.numel(i));
            continue;
        }
        add_slot(0, 1);  // left + right == right + left, bit for bit
    }
    for (int i = 0; i < DT_COUNT; i++) m_.g[i] = slots_[0][i];
}

void GradTree::gather_rows(std::vector<double>& rows) {
    const int P = host_.size(), r = host_.rank();
    std::vector<double> recv(rows.size());
    double t0 = now_seconds();
    for (int bit = 1; bit < P; bit <<= 1) {  // each row has one owner: the others add exact zeros
        host_.exchange(rows.data(), rows.size() * sizeof(double), recv.data(), recv.size() * sizeof(double), r ^ bit);
        for (size_t i = 0; i < rows.size(); i++) rows[i] += recv[i];
    }
    comm_seconds_ += now_seconds() - t0;
}

}  // namespace beagle
