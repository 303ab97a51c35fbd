// cuda_emu_kernels_tree.cpp -> build/test/test_emu_kernels_tree: tree_expand_kernel (cuda/tree.cu), one
// depth of the drafter's dynamic tree on the device, in the CPU emulator against the drafter's host
// expansion written here as BeagleDrafter's host loop does it (stable sort of the frontier by score, the
// best topk, rows below min_score popped, children appended with score(parent) + (val - lse)), over whole
// trees of several depths. Inputs with many ties: values from a set of 4 (and -inf pads with id -1),
// logsumexps from a set of 2, so equal scores are common and the order of ties decides the frontier.
// Checked exactly (no tolerance: the same float expression, the same order): each depth's query rows
// (the host's rows first, in its order; the rest pruned), their ids, their mask rows (decoded to the set of
// ancestors whose kept prediction they see), and at the end the live nodes (token, parent, score bits) ==
// the host's tree node for node. Block sizes 32/256/1024 and reverse/random thread orders.
#include <algorithm>

#include "cuda_kernel_test.h"
#include "tree.cu"

struct HNode { int tok, parent; float score; };

static void test_tree(int depth, int topk, int k, float min_score, int block, const std::string& tag) {
    const std::string what = kt_fmt("depth %d topk %d k %d min %g block %d %s", depth, topk, k, min_score, block,
                                    tag.c_str());
    const int words = (1 + topk * depth + 63) / 64, max_nodes = 1 + k + depth * topk * k;
    std::vector<int> nodes((size_t)max_nodes * 4, 0x7f7f7f7f), rows[2], ids(topk, -5);
    std::vector<uint64_t> mask[2];
    for (int b = 0; b < 2; b++) {
        rows[b].assign(topk, -5);
        mask[b].assign((size_t)topk * words, 0xdeadbeefULL);
    }
    std::vector<HNode> host(1, {-1, -1, 0.0f});
    std::vector<int> frontier(1, 0), h2d(1, 0);   // host node -> device node
    std::vector<int> pred_node;                    // kept predicted row -> device node
    const float vals[4] = {-0.5f, -1.0f, -1.25f, -2.0f}, lses[2] = {0.0f, 0.75f};
    int n = 1, N = 1, bad = 0;
    for (int d = 0; d < depth; d++) {
        // the host loop's rows
        std::vector<int> ex(frontier);
        std::stable_sort(ex.begin(), ex.end(), [&](int a, int b) { return host[a].score > host[b].score; });
        if ((int)ex.size() > topk) ex.resize(topk);
        if (d > 0)
            while (!ex.empty() && host[ex.back()].score < min_score) ex.pop_back();
        const int nh = (int)ex.size();
        // the device's rows: the host's first, in its order, then rows it pruned
        const std::vector<int>& dr = rows[d % 2];
        bad += nh > n;
        for (int i = 0; i < n; i++) {
            const int node = d == 0 ? 0 : dr[i];
            if (i < nh) {
                bad += h2d[ex[i]] != node;
            } else {
                const float s = __int_as_float(nodes[4 * node + 2]);
                bad += nodes[4 * node + 3] && !(s < min_score);
            }
        }
        // the depth's top-k: ids, values descending, -1 / -inf pads in some rows
        std::vector<int> idx((size_t)n * k);
        std::vector<float> val((size_t)n * k), lse(n);
        for (int i = 0; i < n; i++) {
            lse[i] = lses[(int)(kt_rand() * 2)];
            const int pads = kt_rand() < 0.2 ? 1 + (int)(kt_rand() * k) / 2 : 0;
            for (int j = 0; j < k; j++) {
                idx[(size_t)i * k + j] = j < k - pads ? (int)(kt_rand() * 1000) : -1;
                val[(size_t)i * k + j] = j < k - pads ? vals[(int)(kt_rand() * 4)] : -INFINITY;
            }
            std::sort(val.begin() + (size_t)i * k, val.begin() + (size_t)(i + 1) * k, std::greater<float>());
        }
        const bool last = d + 1 == depth;
        int base = -1;
        if (!last) {
            base = (int)pred_node.size();
            for (int i = 0; i < n; i++) pred_node.push_back(d == 0 ? 0 : dr[i]);
        }
        const int n_next = last ? 0 : std::min(topk, n * k);
        TreeExpandKArgs a;
        a.idx = idx.data();
        a.val = val.data();
        a.lse = lse.data();
        a.nodes = nodes.data();
        a.rows = d ? rows[d % 2].data() : nullptr;
        a.mask = d ? mask[d % 2].data() : nullptr;
        a.rows_next = rows[(d + 1) % 2].data();
        a.mask_next = mask[(d + 1) % 2].data();
        a.ids_next = ids.data();
        a.words = words;
        a.n = n;
        a.k = k;
        a.n_nodes = N;
        a.depth = d;
        a.n_next = n_next;
        a.base = base;
        a.min_score = min_score;
        TLAUNCH(1, block, 0, tree_expand_kernel)(a);
        // the host loop's children
        frontier.clear();
        for (int i = 0; i < nh; i++)
            for (int j = 0; j < k; j++) {
                const size_t e = (size_t)i * k + j;
                host.push_back({idx[e], ex[i], host[ex[i]].score + (val[e] - lse[i])});
                frontier.push_back((int)host.size() - 1);
                h2d.push_back(N + (int)e);
            }
        for (int e = nh * k; e < n * k; e++) bad += nodes[4 * (N + e) + 3] != 0;  // children of pruned rows: dead
        // the next rows' ids and mask rows: the ancestors whose kept predictions they see
        const std::vector<int>& nr = rows[(d + 1) % 2];
        for (int r = 0; r < n_next; r++) {
            const int c = nr[r];
            bad += c < N || c >= N + n * k || ids[r] != std::max(nodes[4 * c], 0);
            if (c < N || c >= N + n * k) continue;
            std::vector<int> want, got;
            for (int p = nodes[4 * c + 1]; p >= 0; p = p == 0 ? -1 : nodes[4 * p + 1]) want.push_back(p);
            for (size_t pr = 0; pr < pred_node.size(); pr++)
                if ((mask[(d + 1) % 2][(size_t)r * words + pr / 64] >> (pr % 64)) & 1) got.push_back(pred_node[pr]);
            std::sort(want.begin(), want.end());
            std::sort(got.begin(), got.end());
            bad += want != got;
        }
        N += n * k;
        n = n_next;
    }
    // the live nodes, compacted, against the host's tree
    std::vector<int> got, ref, d2h(N, -1);
    d2h[0] = 0;
    for (int c = 1, m = 1; c < N; c++) {
        if (!nodes[4 * c + 3]) continue;
        d2h[c] = m++;
        got.insert(got.end(), {nodes[4 * c], d2h[nodes[4 * c + 1]], nodes[4 * c + 2]});
    }
    for (size_t i = 1; i < host.size(); i++) {
        float s = host[i].score;
        int bits;
        memcpy(&bits, &s, 4);
        ref.insert(ref.end(), {host[i].tok, host[i].parent, bits});
    }
    CHECK(got.size() == ref.size(), "tree_expand_kernel [%s]: %zu live nodes, host %zu", what.c_str(), got.size() / 3,
          ref.size() / 3);
    if (got.size() == ref.size()) kt_compare_int("tree_expand_kernel", got.data(), ref.data(), got.size(), what + " nodes");
    const int zero = 0;
    kt_compare_int("tree_expand_kernel", &bad, &zero, 1, what + " rows, ids, masks");
}

int main() {
    for (int block : {32, 256, 1024}) {
        test_tree(5, 10, 10, -INFINITY, block, "");      // the defaults: 411 nodes
        test_tree(4, 6, 4, -2.6f, block, "pruned");      // cost-aware: rows below min_score pruned
    }
    test_tree(1, 3, 3, -INFINITY, 64, "one depth");
    test_tree(6, 8, 8, -3.1f, 128, "pruned, deep");
    test_tree(3, 2, 5, -1.0f, 64, "all pruned at depth 2");
    test_tree(4, 70, 10, -INFINITY, 256, "two mask words");
    kt_debug_modes([](const char* mode) {
        test_tree(4, 10, 10, -INFINITY, 64, mode);
        test_tree(4, 6, 4, -2.6f, 64, kt_fmt("pruned %s", mode));
    });
    return kt_finish("test_emu_kernels_tree");
}
