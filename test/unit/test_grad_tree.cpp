// test_grad_tree.cpp: GradTree (data_parallel.h) sums a batch's gradients to the same bits on 1, 2 and 4
// ranks (each rank a thread here, with an in-process communicator), for batches of 8, 7 and 3 items (a
// rank may have none); and the test of that check: a GradTree whose ranks add their own items in place
// (FlatGradTree, through GradTree::local_sum) gives other bits on 2 ranks than on 1, and the comparison
// sees it. test/cli/test_train_mpi.sh runs whole trainings under mpirun for the same property.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "decode/session.h"
#include "model/draft.h"
#include "testlib.h"
#include "train/data_parallel.h"

using namespace beagle;

// P ranks in one process: exchange() posts a copy to the peer's queue and takes the peer's message.
struct Mailboxes {
    explicit Mailboxes(int p) : P(p), q((size_t)p * p) {}
    int P;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::deque<std::vector<char>>> q;  // q[from * P + to]
};

class ThreadComm : public Comm {
public:
    ThreadComm(Mailboxes& mb, int rank) : mb_(mb), rank_(rank) {}
    const char* name() const override { return "threads"; }
    int rank() const override { return rank_; }
    int size() const override { return mb_.P; }
    void exchange(const void* send, size_t send_bytes, void* recv, size_t recv_bytes, int peer) override {
        std::unique_lock<std::mutex> lk(mb_.mu);
        mb_.q[(size_t)rank_ * mb_.P + peer].emplace_back((const char*)send, (const char*)send + send_bytes);
        mb_.cv.notify_all();
        auto& in = mb_.q[(size_t)peer * mb_.P + rank_];
        mb_.cv.wait(lk, [&] { return !in.empty(); });
        BEAGLE_CHECK(in.front().size() == recv_bytes, "exchange: %zu bytes for %zu", in.front().size(), recv_bytes);
        if (recv_bytes) memcpy(recv, in.front().data(), recv_bytes);  // an empty exchange may pass null
        in.pop_front();
    }
    void broadcast(void*, size_t, int) override { fail("ThreadComm: broadcast is not used by GradTree::run"); }
    void barrier() override { fail("ThreadComm: barrier is not used by GradTree::run"); }

private:
    Mailboxes& mb_;
    int rank_;
};

// The planted bug: a rank's items added one after another into one gradient set, so the grouping of the
// sums depends on how many items each rank has.
class FlatGradTree : public GradTree {
public:
    using GradTree::GradTree;

protected:
    void local_sum(ItemRange mine, const std::function<void(int k)>& leaf) override {
        float** g = slot(0);
        for (int i = 0; i < DT_COUNT; i++) {
            m_.g[i] = g[i];
            m_.ops.zero(g[i], (size_t)m_.cfg.numel(i));
        }
        for (int k = mine.lo; k < mine.hi; k++) leaf(k);
    }
};

// Item k's gradient, added into the model's gradient set (a leaf's contract): seeded values whose
// magnitudes span a few decades, so that the order of the sums shows in the bits.
static void add_item_grad(DraftModelT<Ops>& m, int k) {
    for (int i = 0; i < DT_COUNT; i++) {
        const size_t n = (size_t)m.cfg.numel(i);
        if (n == 0) continue;
        std::vector<float> x(n), y(n);
        uint64_t s = 0x9e3779b97f4a7c15ULL * (uint64_t)(k + 1) + (uint64_t)i;
        for (size_t j = 0; j < n; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            x[j] = (float)((double)(s >> 40) / (1 << 24) - 0.5) * (float)(1 << (s & 7));
        }
        m.ops.download(y.data(), m.g[i], n);
        for (size_t j = 0; j < n; j++) y[j] += x[j];
        m.ops.upload(m.g[i], y.data(), n);
    }
}

// The batch's summed gradients (every tensor, host floats) on rank 0 of P threads; every rank must
// end with the same bits.
template <class Tree>
static std::vector<float> batch_sum(const DraftWeights& dw, const DraftFrozen& fz, int P, int n) {
    Mailboxes mb(P);
    std::vector<std::vector<float>> got(P);
    std::vector<std::thread> ranks;
    for (int r = 0; r < P; r++)
        ranks.emplace_back([&, r] {
            std::unique_ptr<Ops> ops = make_ops("cpu", 1);
            DraftModelT<Ops> m(*ops, dw, fz);
            ThreadComm c(mb, r);
            Tree tree(m, c, c);
            tree.run(n, [&](int k) { add_item_grad(m, k); });
            for (int i = 0; i < DT_COUNT; i++) {
                const size_t at = got[r].size(), len = (size_t)m.cfg.numel(i);
                got[r].resize(at + len);
                if (len) m.ops.download(got[r].data() + at, m.g[i], len);
            }
        });
    for (auto& t : ranks) t.join();
    for (int r = 1; r < P; r++)
        CHECK(got[r].size() == got[0].size() && memcmp(got[r].data(), got[0].data(), got[0].size() * 4) == 0,
              "P %d, n %d: rank %d holds other bits than rank 0", P, n, r);
    return got[0];
}

static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

int main() {
    const std::string M = test_models_dir();
    try {
        Session s(M + "stories260K.bin", M + "tok512.bin", 1, 64, 64);
        DraftWeights dw;
        dw.init_random(draft_config_for_target(s.mf->config, s.tok->spec()), 3);
        const DraftFrozen fz = frozen_from_target(*s.mf, true);
        for (int n : {8, 7, 3}) {
            const std::vector<float> one = batch_sum<GradTree>(dw, fz, 1, n);
            for (int P : {2, 4}) {
                const bool same = same_bits(one, batch_sum<GradTree>(dw, fz, P, n));
                CHECK(same, "batch of %d: %d ranks sum to other bits than 1", n, P);
                if (same) printf("ok   batch of %d on %d ranks: the bits of 1 rank\n", n, P);
            }
        }
        // the planted rank-count-dependent reduction must be caught by the same comparison
        const std::vector<float> flat1 = batch_sum<FlatGradTree>(dw, fz, 1, 8), flat2 = batch_sum<FlatGradTree>(dw, fz, 2, 8);
        CHECK(!same_bits(flat1, flat2), "planted: each rank's items summed in place, yet 2 ranks gave the bits of 1");
        if (!same_bits(flat1, flat2)) printf("ok   planted: items summed in place per rank: 2 ranks differ from 1 (caught)\n");
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("grad_tree");
}
