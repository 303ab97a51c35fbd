// trainer.cpp: stage-1 and stage-2 training iterations of the draft (see trainer.h), and the
// memory formula of one iteration. Called by the `beagle train` loop (train_loop.cpp), gradcheck and tests.
//
// Stage 1: all T true states give the key set (noise added); the queries are every row whose window
// start b >= 1; query b+k sees true rows j < b (BLOCK mask, n_pred 0). One forward, one backward.
// Stage 2: step s computes the queries b+s-1 of every window (rows of masks.h stage2_rows); before
// step s >= 2 the predicted states f^ of step s-1 are written IN PLACE into the second key set
// (row r holds f^_r, T rows, one buffer for all steps) and its K/V recomputed; query b+s-1 sees
// true rows j < b and predicted rows b..b+s-2. Loss = sum_s beta_s mean_i L_i(step s) / sum beta,
// beta_s = S - s + 1. Detached (default): the written states are constants; each step's backward
// runs right after its forward and frees its activations; gradients w.r.t. the second set's K/V
// accumulate and go through its projection once at the end. --sim-grad-through: all steps are kept
// and back-propagated in reverse, the predicted rows' K/V gradients flowing into the step that
// produced them.
#include "trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../core/common.h"
#include "masks.h"
#include "../model/eagle_layers.h"
#include "../model/medusa_layers.h"
#include "../model/moa_layers.h"
#include "../core/rng.h"

namespace beagle {

template <class O>
struct DraftTrainerT<O>::Step {
    int s = 1;
    std::vector<int> Q, qtok, qpos;  // query rows, their tokens and positions
    XAttnMask mask;
    QueryActs<R> A;
    R* dfh = nullptr;
};

template <class O>
DraftTrainerT<O>::DraftTrainerT(DraftModelT<O>& m, const TrainOptions& opt) : m_(m), opt_(opt), al_(m.ops) {
    BEAGLE_CHECK(opt.stage == 1 || opt.stage == 2, "training stage must be 1 or 2, got %d", opt.stage);
    BEAGLE_CHECK(opt.w >= 1, "window size w must be >= 1, got %d", opt.w);
    if (opt.stage == 2)
        BEAGLE_CHECK(opt.S >= 1 && opt.S <= opt.w, "stage 2 needs 1 <= S <= w, got S = %d, w = %d", opt.S, opt.w);
    BEAGLE_CHECK(m.embd && m.lm_head, "training needs the frozen f32 embedding and LM head (DraftFrozen tables)");
    BEAGLE_CHECK(opt.noise_std >= 0, "noise std must be >= 0, got %g", opt.noise_std);
    if (m.cfg.arch == ARCH_MEDUSA) opt_.loss.w_v = 0;  // Medusa's heads: cross-entropy only (run_medusa)
    BEAGLE_CHECK(!opt.ttt || m.cfg.arch == ARCH_EAGLE, "the training-time test (--ttt) trains an EAGLE draft (this is %s)",
                 draft_arch_name(m.cfg.arch));
}

template <class O>
void DraftTrainerT<O>::step_forward(Step& st, const TrainBatch& b, const std::vector<int>& pos, const R* f, int s,
                                    float scale, const XAttnKeysT<R>& keys, const XAttnMask& mask, IterStats* stats) {
    const DraftConfig& c = m_.cfg;
    int n = (int)st.Q.size();
    st.s = s;
    st.mask = mask;
    st.qtok.resize(n);
    st.qpos.resize(n);
    for (int i = 0; i < n; i++) {
        st.qtok[i] = b.tokens[st.Q[i]];
        st.qpos[i] = pos[st.Q[i]];
    }
    query_acts_alloc(al_, c, &st.A, n);
    query_forward(m_, st.A, n, st.qtok.data(), st.qpos.data(), st.Q.data(), keys, mask);
    step_loss(st, b, f, s, scale, stats);
}

// The loss of a step's queries: query i predicted the state of row Q[i] (st.A.fh row i); st.dfh (allocated
// here) receives d loss / d f^.
template <class O>
void DraftTrainerT<O>::step_loss(Step& st, const TrainBatch& b, const R* f, int s, float scale, IterStats* stats) {
    const DraftConfig& c = m_.cfg;
    O& ops = m_.ops;
    int n = (int)st.Q.size(), dim = c.dim;
    st.dfh = al_.alloc((size_t)n * dim);

    // loss rows: the queries not masked out (hard labels also need a next token)
    std::vector<int> Lidx, lrows, labels;
    for (int i = 0; i < n; i++) {
        int q = st.Q[i];
        if (b.loss_mask && !b.loss_mask[q]) continue;
        if (opt_.loss.hard_labels && q + 1 >= b.T) continue;
        Lidx.push_back(i);
        lrows.push_back(q);
        if (opt_.loss.hard_labels) labels.push_back(b.tokens[q + 1]);
    }
    int nL = (int)Lidx.size();
    std::vector<R> logits;
    if (nL > 0) {
        size_t NL = (size_t)nL;
        R* fhL = al_.alloc(NL * dim);
        R* fL = al_.alloc(NL * dim);
        R* dfhL = al_.alloc(NL * dim);
        R* cv = al_.alloc(2 * NL);  // ce then vl: one copy brings both losses down
        R* ce = cv;
        R* vl = cv + NL;
        ops.gather_rows(fhL, st.A.fh, Lidx.data(), nL, dim);
        ops.gather_rows(fL, f, lrows.data(), nL, dim);
        float sc = scale / (float)nL;
        draft_loss(m_, al_, fhL, fL, labels.empty() ? nullptr : labels.data(), nL, opt_.loss, sc, dfhL, ce, vl,
                   capture ? &logits : nullptr);
        ops.scatter_rows(st.dfh, dfhL, Lidx.data(), nL, dim, false);
        log_losses(cv, nL, scale);  // summed on the host in finish_losses()
        for (R** p : {&fhL, &fL, &dfhL, &cv}) al_.release(*p);
    } else {
        log_losses(nullptr, 0, scale);
    }
    stats->step_rows.push_back(nL);
    if (capture) {
        std::vector<R> fh((size_t)n * dim);
        ops.download(fh.data(), st.A.fh, fh.size());
        int li = 0;
        for (int i = 0; i < n; i++) {
            typename TrainCaptureT<R>::Row row;
            row.step = s;
            row.row = st.Q[i];
            row.fh.assign(fh.begin() + (size_t)i * dim, fh.begin() + (size_t)(i + 1) * dim);
            if (li < nL && Lidx[li] == i) {
                size_t V = (size_t)c.head_rows();
                row.logits.assign(logits.begin() + (size_t)li * V, logits.begin() + (size_t)(li + 1) * V);
                li++;
            }
            capture->rows.push_back(std::move(row));
        }
    }
}

template <class O>
void DraftTrainerT<O>::step_backward(Step& st, const std::vector<int>& pos, const XAttnKeysT<R>& keys,
                                     const XAttnGradsT<R>& dkeys, const XAttnMask& mask) {
    query_backward(m_, al_, st.A, st.dfh, st.qpos.data(), st.Q.data(), keys, dkeys, mask);
}

template <class O>
void DraftTrainerT<O>::step_free(Step& st) {
    if (m_.cfg.arch == ARCH_EAGLE) eagle_acts_free(al_, &st.A);
    else query_acts_free(al_, &st.A);
    al_.release(st.dfh);
}

// EAGLE (eagle_layers.h): the queries are rows p = 1..T-1, query i = p - 1 with input E(t_p) and the noisy
// state s_{p-1}, predicting f_p; causal self-attention over the queries' own x (BLOCK mask, w 1, qrow
// i + 1: query i sees key rows 0..i). The same losses and loss rows as a Beagle query predicting row p.
// Training-time test (opt_.ttt, stage 2: EAGLE-3 / HASS): steps 2..S feed each query the draft's own f^
// of the step before, one row earlier, and let it see those steps' K/V rows (masks.h ttt_mask); loss
// sum_k beta_k mean L(step k) / sum beta, beta_k = S - k + 1, as Beagle's stage 2. The f^ inputs are
// constants (no gradient through them); the key rows of every step get the gradients of every query
// that sees them, so all steps are kept and back-propagated in reverse (memory grows with S, as in EAGLE-3).
template <class O>
void DraftTrainerT<O>::run_eagle(const TrainBatch& b, const R* f, const R* s, const std::vector<int>& pos,
                                 float loss_scale, bool backward, IterStats* stats) {
    const DraftConfig& c = m_.cfg;
    O& ops = m_.ops;
    const int n = b.T - 1, kvd = c.kv_dim();
    if (n <= 0) {
        log_losses(nullptr, 0, loss_scale);  // a step without loss rows (finish_losses: step loss 0)
        stats->step_rows.push_back(0);
        return;
    }
    const int S = opt_.ttt && opt_.stage == 2 ? std::min(opt_.S, n) : 1;
    const double sum_beta = S * (S + 1) / 2.0;
    const int n1 = ttt_offset(n, S + 1);  // set 1: the K/V rows of steps 2..S
    R* K = al_.alloc((size_t)n * kvd);
    R* V = al_.alloc((size_t)n * kvd);
    R* K1 = n1 ? al_.alloc((size_t)n1 * kvd) : nullptr;
    R* V1 = n1 ? al_.alloc((size_t)n1 * kvd) : nullptr;
    XAttnKeysT<R> keys;
    keys.k0 = K;
    keys.v0 = V;
    keys.n0 = n;
    keys.k1 = K1;
    keys.v1 = V1;
    std::vector<Step> st(S);
    std::vector<R*> frozen(S, nullptr);  // gradcheck: step k's inputs f^ held fixed (frozen_pred)
    if (record_pred) record_pred->clear();
    size_t frozen_at = 0;
    std::vector<TttMask> tm(S);
    std::vector<std::vector<int>> qrow(S);
    for (int k = 1; k <= S; k++) {
        Step& sk = st[k - 1];
        const int nk = n - k + 1;
        sk.Q.resize(nk);
        sk.qtok.resize(nk);
        sk.qpos.resize(nk);
        for (int r = 0; r < nk; r++) {
            sk.Q[r] = r + k;
            sk.qtok[r] = b.tokens[r + k];
            sk.qpos[r] = pos[r + k];
        }
        if (k == 1) {
            qrow[0].resize(nk);
            for (int r = 0; r < nk; r++) qrow[0][r] = r + 1;
            sk.mask.kind = XAttnMask::BLOCK;
            sk.mask.w = 1;
            sk.mask.offset = 0;
            sk.mask.n_pred = 0;
        } else {
            tm[k - 1] = ttt_mask(n, k);
            qrow[k - 1] = tm[k - 1].qrow;
            sk.mask = tm[k - 1].mask();
        }
        keys.n1 = k == 1 ? 0 : ttt_offset(n, k) + nk;  // the rows written so far, this step's last
        R* Kk = k == 1 ? K : K1 + (size_t)ttt_offset(n, k) * kvd;
        R* Vk = k == 1 ? V : V1 + (size_t)ttt_offset(n, k) * kvd;
        const R* feat = k == 1 ? s : st[k - 2].A.fh;  // step k - 1's f^, local row r for query r
        if (k >= 2 && frozen_pred) {  // the inputs of a recorded run: steps 1..S-1's f^ one after another
            const size_t rows = (size_t)(nk + 1) * c.dim;
            BEAGLE_CHECK(frozen_at + rows <= frozen_pred->size(), "frozen EAGLE inputs: %zu values, need %zu",
                         frozen_pred->size(), frozen_at + rows);
            frozen[k - 1] = al_.alloc(rows);
            ops.upload(frozen[k - 1], frozen_pred->data() + frozen_at, rows);
            frozen_at += rows;
            feat = frozen[k - 1];
        }
        eagle_acts_alloc(al_, c, &sk.A, nk);
        eagle_forward(m_, al_, sk.A, nk, sk.qtok.data(), feat, sk.qpos.data(), Kk, Vk, qrow[k - 1].data(), keys, sk.mask);
        step_loss(sk, b, f, k, (float)(loss_scale * (S - k + 1) / sum_beta), stats);
        if (record_pred && k < S) {  // the f^ the next step is fed
            const size_t at = record_pred->size();
            record_pred->resize(at + (size_t)nk * c.dim);
            ops.download(record_pred->data() + at, sk.A.fh, (size_t)nk * c.dim);
        }
    }
    if (backward) {
        R* dK = al_.alloc((size_t)n * kvd);
        R* dV = al_.alloc((size_t)n * kvd);
        R* dK1 = n1 ? al_.alloc((size_t)n1 * kvd) : nullptr;
        R* dV1 = n1 ? al_.alloc((size_t)n1 * kvd) : nullptr;
        ops.zero(dK, (size_t)n * kvd);
        ops.zero(dV, (size_t)n * kvd);
        if (n1) {
            ops.zero(dK1, (size_t)n1 * kvd);
            ops.zero(dV1, (size_t)n1 * kvd);
        }
        XAttnGradsT<R> dkeys;
        dkeys.dk0 = dK;
        dkeys.dv0 = dV;
        dkeys.dk1 = dK1;
        dkeys.dv1 = dV1;
        for (int k = S; k >= 1; k--) {  // later steps first: a step's key rows are complete before its turn
            Step& sk = st[k - 1];
            keys.n1 = k == 1 ? 0 : ttt_offset(n, k) + n - k + 1;
            R* dKk = k == 1 ? dK : dK1 + (size_t)ttt_offset(n, k) * kvd;
            R* dVk = k == 1 ? dV : dV1 + (size_t)ttt_offset(n, k) * kvd;
            const R* feat = k == 1 ? s : frozen[k - 1] ? frozen[k - 1] : st[k - 2].A.fh;
            eagle_backward(m_, al_, sk.A, sk.dfh, feat, sk.qpos.data(), qrow[k - 1].data(), keys, dkeys, dKk, dVk, sk.mask);
        }
        for (R** p : {&dK1, &dV1}) if (*p) al_.release(*p);
        al_.release(dK);
        al_.release(dV);
    }
    for (int k = S; k >= 1; k--) {
        step_free(st[k - 1]);
        if (frozen[k - 1]) al_.release(frozen[k - 1]);
    }
    for (R** p : {&K1, &V1}) if (*p) al_.release(*p);
    al_.release(K);
    al_.release(V);
}

// Medusa (medusa_layers.h): every position p < T - 1 runs the K heads on its noisy state s_p (one matmul);
// head k's rows p = 0..T - 3 - k predict t_{p+2+k}: their loss is step_loss's for a query predicting row
// p + 1 + k (the target's distribution there, or with hard labels its next token; the loss mask of that
// row), one step per head, weighted beta_k = 0.8^k (Medusa-1) and normalised by sum beta. The states are
// inputs: the gradients go to W and b only.
template <class O>
void DraftTrainerT<O>::run_medusa(const TrainBatch& b, const R* f, const R* s, float loss_scale, bool backward,
                                  IterStats* stats) {
    const DraftConfig& c = m_.cfg;
    O& ops = m_.ops;
    const int n = b.T - 1, K = c.medusa_heads, dim = c.dim;
    if (n <= 0) {
        log_losses(nullptr, 0, loss_scale);
        stats->step_rows.push_back(0);
        return;
    }
    const size_t NKD = (size_t)n * K * dim;
    double sum_beta = 0;
    for (int k = 0; k < K; k++) sum_beta += std::pow(0.8, k);
    R* ones = al_.alloc(NKD);
    {
        std::vector<R> h(NKD, R(1));
        ops.upload(ones, h.data(), NKD);
    }
    R* z = al_.alloc(NKD);
    R* u = al_.alloc(NKD);
    R* du = backward ? al_.alloc(NKD) : nullptr;  // (zeroed: rows no head's loss reaches stay 0)
    medusa_forward(m_, al_, s, z, u, ones, n);
    for (int k = 0; k < K; k++) {
        const int nk = std::max(0, n - k);  // positions p whose row p + 1 + k exists (p <= T - 2 - k)
        Step st;
        st.Q.resize(nk);
        std::vector<int> urow(nk);
        for (int p = 0; p < nk; p++) {
            st.Q[p] = p + 1 + k;
            urow[p] = p * K + k;
        }
        st.A.n = nk;
        st.A.fh = nk ? al_.alloc((size_t)nk * dim) : nullptr;
        if (nk) ops.gather_rows(st.A.fh, u, urow.data(), nk, dim);
        step_loss(st, b, f, k + 1, (float)(loss_scale * std::pow(0.8, k) / sum_beta), stats);
        if (backward && nk) ops.scatter_rows(du, st.dfh, urow.data(), nk, dim, false);
        if (st.A.fh) al_.release(st.A.fh);
        al_.release(st.dfh);
    }
    if (backward) {
        medusa_backward(m_, al_, s, z, ones, du, n);
        al_.release(du);
    }
    for (R** p : {&u, &z, &ones}) al_.release(*p);
}

// MoA (moa_layers.h): the keys are LSA over every position's rows (noisy s, then the clean state-layer rows h),
// the cross-attention K, V of their mean; the token side is causal self-attention over all T true tokens (BLOCK
// mask, w 1, qrow p + 1: row p sees rows 0..p); the cross-attention queries are stage 1's rows, query p taking u_p
// and seeing the keys j < its window start: the T-step bounded mask, w steps at most. One objective in any stage
// (the draft keeps no predicted states for stage 2 to simulate). One forward, then one backward: cross-attention
// block (its d u), self-attention, LSA.
template <class O>
void DraftTrainerT<O>::run_moa(const TrainBatch& b, const R* f, const R* s, const R* h, const std::vector<int>& pos,
                               int offset, float loss_scale, bool backward, IterStats* stats) {
    const DraftConfig& c = m_.cfg;
    O& ops = m_.ops;
    const int T = b.T, dim = c.dim;
    const size_t Tk = (size_t)T * c.kv_dim(), Td = (size_t)T * dim;
    LsaActs<R> L;
    lsa_acts_alloc(al_, c, &L, T);
    R* K = al_.alloc(Tk);
    R* V = al_.alloc(Tk);
    lsa_input(m_, L, s, h, T);
    lsa_forward(m_, L, T, pos.data(), K, V);
    SelfAttnActs<R> SA;
    self_attn_acts_alloc(al_, c, &SA, T);
    R* Ks = al_.alloc(Tk);
    R* Vs = al_.alloc(Tk);
    R* u = al_.alloc(Td);
    std::vector<int> qrow(T);
    for (int p = 0; p < T; p++) qrow[p] = p + 1;
    XAttnMask causal;
    causal.kind = XAttnMask::BLOCK;
    causal.w = 1;
    XAttnKeysT<R> skeys;
    skeys.k0 = Ks;
    skeys.v0 = Vs;
    skeys.n0 = T;
    self_attn_forward(m_, SA, T, b.tokens, pos.data(), Ks, Vs, qrow.data(), skeys, causal, u);

    Step st;
    st.Q = stage1_rows(T, opt_.w, offset);
    const int n = (int)st.Q.size();
    st.mask.kind = XAttnMask::BLOCK;
    st.mask.w = opt_.w;
    st.mask.offset = offset;
    st.qtok.resize(n);
    st.qpos.resize(n);
    for (int i = 0; i < n; i++) {
        st.qtok[i] = b.tokens[st.Q[i]];
        st.qpos[i] = pos[st.Q[i]];
    }
    XAttnKeysT<R> keys;
    keys.k0 = K;
    keys.v0 = V;
    keys.n0 = T;
    query_acts_alloc(al_, c, &st.A, n);
    ops.gather_rows(st.A.u, u, st.Q.data(), n, dim);  // the queries' inputs: u of their rows
    query_forward(m_, st.A, n, nullptr, st.qpos.data(), st.Q.data(), keys, st.mask);
    step_loss(st, b, f, 1, loss_scale, stats);
    if (backward) {
        R* dK = al_.alloc(Tk);
        R* dV = al_.alloc(Tk);
        XAttnGradsT<R> dkeys;
        dkeys.dk0 = dK;
        dkeys.dv0 = dV;
        query_backward(m_, al_, st.A, st.dfh, st.qpos.data(), st.Q.data(), keys, dkeys, st.mask, true);
        R* du = al_.alloc(Td);  // d loss / d u: the query rows' (st.dfh now holds them), zero elsewhere
        ops.scatter_rows(du, st.dfh, st.Q.data(), n, dim, false);
        R* dKs = al_.alloc(Tk);
        R* dVs = al_.alloc(Tk);
        XAttnGradsT<R> sdkeys;
        sdkeys.dk0 = dKs;
        sdkeys.dv0 = dVs;
        self_attn_backward(m_, al_, SA, du, pos.data(), qrow.data(), skeys, sdkeys, dKs, dVs, causal);
        lsa_backward(m_, al_, L, T, pos.data(), dK, dV);
        for (R** p : {&dK, &dV, &du, &dKs, &dVs}) al_.release(*p);
    }
    step_free(st);
    self_attn_acts_free(al_, &SA);
    lsa_acts_free(al_, &L);
    for (R** p : {&K, &V, &Ks, &Vs, &u}) al_.release(*p);
}

template <class O>
IterStats DraftTrainerT<O>::run(const TrainBatch& b, int offset, uint64_t noise_seed, float loss_scale, bool backward) {
    const DraftConfig& c = m_.cfg;
    O& ops = m_.ops;
    int T = b.T, dim = c.dim, kvd = c.kv_dim();
    BEAGLE_CHECK(T >= 1 && b.tokens && b.states, "training batch: need T >= 1 tokens and states, got T = %d", T);
    BEAGLE_CHECK(offset >= 0 && offset < opt_.w, "window offset %d outside [0, w = %d)", offset, opt_.w);
    BEAGLE_CHECK(loss_scale > 0, "loss_scale must be > 0, got %g", loss_scale);
    BEAGLE_CHECK(b.pos0 >= 0, "training batch: negative start position %d", b.pos0);
    if (backward)
        for (int i = 0; i < DT_COUNT; i++)
            BEAGLE_CHECK(m_.g[i] || !c.has(i), "training with backward needs gradients: call enable_grads() first");
    for (int j = 0; j < T; j++)
        BEAGLE_CHECK(b.tokens[j] >= 0 && b.tokens[j] < c.vocab_size, "training token %d at row %d outside [0, %d)",
                     b.tokens[j], j, c.vocab_size);
    al_.reset_peak();
    IterStats stats;
    stats.offset = offset;
    size_t Td = (size_t)T * dim, Tk = (size_t)T * kvd;
    std::vector<int> pos(T);
    for (int j = 0; j < T; j++) pos[j] = b.pos0 + j;

    // true key set: s = f + noise
    R* f = al_.alloc(Td);
    upload_f(ops, f, b.states, Td);
    R* s = al_.alloc(Td);
    {
        std::vector<R> sh(b.states, b.states + Td);
        if (opt_.noise_std > 0) {
            TrainRng rng(noise_seed);
            for (size_t i = 0; i < Td; i++) sh[i] += (R)(opt_.noise_std * rng.normal());
        }
        ops.upload(s, sh.data(), Td);
    }
    R* h = nullptr;  // state layers: s = f + noise + W_mix h (MoA: the rows its LSA reads besides s)
    if (c.n_extra()) {
        BEAGLE_CHECK(b.extras, "training a draft with %d state layers needs their rows (data made with datagen "
                     "--state-layers)", c.n_extra());
        h = al_.alloc(Td * c.n_extra());
        upload_f(ops, h, b.extras, Td * c.n_extra());
    }
    if (c.arch == ARCH_MOA) {
        run_moa(b, f, s, h, pos, offset, loss_scale, backward, &stats);
        for (R** p : {&f, &s, &h}) al_.release(*p);
        pending_.push_back({stats, loss_scale, std::move(cur_steps_)});  // its losses: as below
        cur_steps_.clear();
        if (defer_losses) return stats;
        return finish_losses().back();
    }
    if (c.n_extra()) {
        R* sf = al_.alloc(Td);
        fuse_forward(m_, s, h, sf, T);
        al_.release(s);
        s = sf;
    }
    if (c.arch == ARCH_EAGLE || c.arch == ARCH_MEDUSA) {
        if (c.arch == ARCH_EAGLE) run_eagle(b, f, s, pos, loss_scale, backward, &stats);
        else run_medusa(b, f, s, loss_scale, backward, &stats);
        for (R** p : {&f, &s}) al_.release(*p);
        pending_.push_back({stats, loss_scale, std::move(cur_steps_)});  // its losses: as below
        cur_steps_.clear();
        if (defer_losses) return stats;
        return finish_losses().back();
    }
    R* ns = al_.alloc(Td);
    R* rstd = al_.alloc(T);
    R* K = al_.alloc(Tk);
    R* V = al_.alloc(Tk);
    R *dK = nullptr, *dV = nullptr;
    if (backward) {
        dK = al_.alloc(Tk);
        dV = al_.alloc(Tk);
    }
    key_forward(m_, s, ns, rstd, K, V, T, pos.data());
    XAttnKeysT<R> keys;
    keys.k0 = K;
    keys.v0 = V;
    keys.n0 = T;
    XAttnGradsT<R> dkeys;
    dkeys.dk0 = dK;
    dkeys.dv0 = dV;
    XAttnMask mask;
    mask.kind = XAttnMask::BLOCK;
    mask.w = opt_.w;
    mask.offset = offset;

    if (opt_.stage == 1) {
        Step st;
        st.Q = stage1_rows(T, opt_.w, offset);
        mask.n_pred = 0;
        step_forward(st, b, pos, f, 1, loss_scale, keys, mask, &stats);
        if (backward) step_backward(st, pos, keys, dkeys, mask);
        step_free(st);
    } else {
        int S = opt_.S;
        double sum_beta = S * (S + 1) / 2.0;
        R *sp = nullptr, *nsp = nullptr, *rstdp = nullptr, *Kp = nullptr, *Vp = nullptr, *dKp = nullptr, *dVp = nullptr;
        if (S >= 2) {  // the second KV set: T rows, written in place step after step
            sp = al_.alloc(Td);
            nsp = al_.alloc(Td);
            rstdp = al_.alloc(T);
            Kp = al_.alloc(Tk);
            Vp = al_.alloc(Tk);
            if (backward) {
                dKp = al_.alloc(Tk);
                dVp = al_.alloc(Tk);
            }
            keys.k1 = Kp;
            keys.v1 = Vp;
            keys.n1 = T;
            dkeys.dk1 = dKp;
            dkeys.dv1 = dVp;
        }
        if (record_pred) record_pred->assign(Td, R(0));
        std::vector<Step> kept(opt_.sim_grad_through ? S : 0);
        for (int st_i = 1; st_i <= S; st_i++) {
            mask.n_pred = st_i - 1;
            if (st_i >= 2) key_forward(m_, sp, nsp, rstdp, Kp, Vp, T, pos.data());
            Step local;
            Step& st = opt_.sim_grad_through ? kept[st_i - 1] : local;
            st.Q = stage2_rows(T, opt_.w, offset, st_i);
            float scale = (float)(loss_scale * (S - st_i + 1) / sum_beta);
            step_forward(st, b, pos, f, st_i, scale, keys, mask, &stats);
            int n = (int)st.Q.size();
            if (st_i < S && n > 0) {  // write f^ of these queries into the second KV set, in place
                if (frozen_pred) {
                    BEAGLE_CHECK(frozen_pred->size() == Td, "frozen predicted states: %zu values, expected %zu",
                                 frozen_pred->size(), Td);
                    std::vector<R> rows((size_t)n * dim);
                    for (int i = 0; i < n; i++)
                        memcpy(&rows[(size_t)i * dim], frozen_pred->data() + (size_t)st.Q[i] * dim, dim * sizeof(R));
                    R* tmp = al_.alloc(rows.size());
                    ops.upload(tmp, rows.data(), rows.size());
                    ops.scatter_rows(sp, tmp, st.Q.data(), n, dim, false);
                    al_.release(tmp);
                } else {
                    ops.scatter_rows(sp, st.A.fh, st.Q.data(), n, dim, false);
                }
                if (record_pred) {
                    std::vector<R> rows((size_t)n * dim);
                    ops.download(rows.data(), st.A.fh, rows.size());
                    for (int i = 0; i < n; i++)
                        memcpy(record_pred->data() + (size_t)st.Q[i] * dim, &rows[(size_t)i * dim], dim * sizeof(R));
                }
            }
            if (!opt_.sim_grad_through) {
                if (backward) step_backward(st, pos, keys, dkeys, mask);
                step_free(st);
            }
        }
        if (opt_.sim_grad_through) {
            for (int st_i = S; st_i >= 1; st_i--) {
                Step& st = kept[st_i - 1];
                int n = (int)st.Q.size();
                if (backward && st_i < S && n > 0) {
                    // the rows this step wrote into the second set: their K/V gradients (complete: all
                    // later steps are done) go back through the projection into this step's d f^
                    size_t N = (size_t)n;
                    R* sg = al_.alloc(N * dim);
                    R* nsg = al_.alloc(N * dim);
                    R* rg = al_.alloc(N);
                    R* dKg = al_.alloc(N * kvd);
                    R* dVg = al_.alloc(N * kvd);
                    R* ds = al_.alloc(N * dim);
                    ops.gather_rows(sg, sp, st.Q.data(), n, dim);
                    ops.gather_rows(nsg, nsp, st.Q.data(), n, dim);
                    ops.gather_rows(rg, rstdp, st.Q.data(), n, 1);
                    ops.gather_rows(dKg, dKp, st.Q.data(), n, kvd);
                    ops.gather_rows(dVg, dVp, st.Q.data(), n, kvd);
                    key_backward(m_, al_, sg, nsg, rg, dKg, dVg, n, st.qpos.data(), ds);
                    ops.add(st.dfh, ds, N * dim);
                    for (R** p : {&sg, &nsg, &rg, &dKg, &dVg, &ds}) al_.release(*p);
                }
                if (backward) step_backward(st, pos, keys, dkeys, st.mask);
                step_free(st);
            }
        } else if (backward && S >= 2) {
            key_backward(m_, al_, sp, nsp, rstdp, dKp, dVp, T, pos.data(), nullptr);
        }
        for (R** p : {&sp, &nsp, &rstdp, &Kp, &Vp, &dKp, &dVp}) al_.release(*p);
    }
    if (backward && h) {  // d loss / d s, then W_mix's gradient
        R* ds = al_.alloc(Td);
        ops.zero(ds, Td);
        key_backward(m_, al_, s, ns, rstd, dK, dV, T, pos.data(), ds);
        fuse_backward(m_, ds, h, T);
        al_.release(ds);
    } else if (backward) {
        key_backward(m_, al_, s, ns, rstd, dK, dV, T, pos.data(), nullptr);
    }
    for (R** p : {&f, &s, &ns, &rstd, &K, &V, &dK, &dV, &h}) al_.release(*p);
    pending_.push_back({stats, loss_scale, std::move(cur_steps_)});
    cur_steps_.clear();
    if (defer_losses) return stats;
    return finish_losses().back();
}

template <class O>
DraftTrainerT<O>::~DraftTrainerT() {
    if (log_) m_.ops.release(log_);
}

template <class O>
void DraftTrainerT<O>::log_losses(const R* cv, int n, float scale) {
    O& ops = m_.ops;
    const size_t need = log_used_ + 2 * (size_t)n;
    if (need > log_cap_) {  // grow (rare: the log keeps its size from one step to the next)
        size_t cap = std::max<size_t>(need * 2, 1024);
        R* grown = ops.alloc(cap);
        if (log_used_) ops.copy(grown, log_, log_used_);
        if (log_) ops.release(log_);
        log_ = grown;
        log_cap_ = cap;
    }
    if (n > 0) ops.copy(log_ + log_used_, cv, 2 * (size_t)n);
    cur_steps_.push_back({log_used_, n, scale});
    log_used_ = need;
}

template <class O>
std::vector<IterStats> DraftTrainerT<O>::finish_losses() {
    std::vector<R> h(log_used_);
    if (log_used_) m_.ops.download(h.data(), log_, log_used_);
    std::vector<IterStats> out;
    for (PendingRun& pr : pending_) {
        IterStats st = pr.stats;
        for (const LossStep& ls : pr.steps) {
            double sce = 0, svl = 0;
            for (int i = 0; i < ls.n; i++) {
                sce += (double)h[ls.off + i];
                svl += (double)h[ls.off + ls.n + i];
            }
            st.ce += sce;
            st.vloss += svl;
            st.step_loss.push_back(ls.n ? (sce + svl) / (double)ls.scale : 0.0);
        }
        st.loss = (st.ce + st.vloss) / pr.loss_scale;
        st.ce /= pr.loss_scale;
        st.vloss /= pr.loss_scale;
        out.push_back(std::move(st));
    }
    pending_.clear();
    log_used_ = 0;
    return out;
}


// ---- memory formula: mirrors run()'s allocations (default detached mode / stage 1, no loss mask) ----
TrainMemory train_memory(const DraftConfig& c, const TrainOptions& opt, int T, int offset, int sizeof_real) {
    TrainMemory mem;
    double B = sizeof_real, Td = (double)T * c.dim, Tk = (double)T * c.kv_dim();
    double params = 0;
    for (int i = 0; i < DT_COUNT; i++) params += (double)c.numel(i);
    double frozen = ((double)c.vocab_size + c.head_rows()) * c.dim + c.dim;  // embedding + LM head (rows) + final norm
    mem.lines.push_back({"draft weights", params * B});
    mem.lines.push_back({"gradients", params * B});
    mem.lines.push_back({"AdamW moments m, v", 2 * params * B});
    mem.lines.push_back({"frozen embedding + LM head + final norm", frozen * B});
    mem.persistent = (4 * params + frozen) * B;
    mem.weights = params * B;
    double qa = (double)query_acts_floats_per_row(c), qb = (double)query_backward_floats_per_row(c);

    if (c.arch == ARCH_EAGLE) {
        // run_eagle: one step in any stage (the training-time test: S steps in stage 2), step k over the
        // n_k = n - k + 1 rows (n = T - 1; step 1: rows p = 1..T-1, input E(t_p) and f_{p-1}), self-attention
        // over step 1's K, V and the later steps' (set 1, n1 rows): no Beagle key sets. In order: f and noisy
        // s; the K, V of every step; each step's activations, token embeddings and d f^ (kept: all steps
        // are back-propagated at the end), with its loss's buffers at its end; then dK, dV of every step and
        // the largest step's backward temporaries.
        const int n = std::max(0, T - 1);
        const int S = opt.ttt && opt.stage == 2 ? std::max(1, std::min(opt.S, n)) : 1;
        double n1 = 0;
        for (int k = 2; k <= S; k++) n1 += n - k + 1;
        const double keys = 2.0 * (n + n1) * c.kv_dim();
        double acts = 0, fwd_peak = 0;
        for (int k = 1; k <= S && n > 0; k++) {
            const double nk = n - k + 1;
            const int nL = opt.loss.hard_labels ? std::max(0, (int)nk - 1) : (int)nk;  // hard labels: row q + 1 < T
            const double loss_phase = nL > 0 ? 3.0 * nL * c.dim + 2.0 * nL + (double)draft_loss_floats(c, nL, opt.loss) : 0;
            acts += nk * (qa + 2.0 * c.dim);
            fwd_peak = std::max(fwd_peak, acts + loss_phase);
        }
        const double bwd_peak = acts + keys + n * qb;
        mem.lines.push_back({"input states f, noisy s", 2 * Td * B});
        mem.lines.push_back({S > 1 ? strfmt("self-attention K, V of the %d steps' rows", S) : "self-attention K, V of the T - 1 rows",
                             keys * B});
        mem.lines.push_back({S > 1 ? "activations + token embeddings + d f^ of every step" : "activations + token embeddings + d f^",
                             acts * B});
        mem.lines.push_back({"loss, or dK, dV + backward temporaries", (std::max(fwd_peak, bwd_peak) - acts) * B});
        mem.iteration_peak = n > 0 ? (2 * Td + keys + std::max(fwd_peak, bwd_peak)) * B : 2 * Td * B;
        return mem;
    }

    if (c.arch == ARCH_MEDUSA) {
        // run_medusa: f and noisy s; over the n = T - 1 positions the ones, z, u and du (n K dim each); the forward's
        // f_p repeated per head (n > 1); per head k its n - k rows of u and their d u, with the loss's buffers; the
        // backward's dz and d ones
        const int n = std::max(0, T - 1), K = c.medusa_heads;
        const double NKD = (double)n * K * c.dim;
        double heads = 0;
        for (int k = 0; k < K; k++) {
            const int nk = std::max(0, n - k), nL = opt.loss.hard_labels ? std::max(0, nk - 1) : nk;
            const double loss_phase = nL > 0 ? 3.0 * nL * c.dim + 2.0 * nL + (double)draft_loss_floats(c, nL, opt.loss) : 0;
            heads = std::max(heads, 2.0 * nk * c.dim + loss_phase);
        }
        const double peak = std::max({n > 1 ? NKD : 0.0, heads, 2 * NKD});
        mem.lines.push_back({"input states f, noisy s", 2 * Td * B});
        mem.lines.push_back({"heads: ones, z, u, d u (T - 1 positions x K heads x dim each)", 4 * NKD * B});
        mem.lines.push_back({"largest of: a head's rows + loss, the backward's dz", peak * B});
        mem.iteration_peak = n > 0 ? (2 * Td + 4 * NKD + peak) * B : 2 * Td * B;
        return mem;
    }
    if (c.arch == ARCH_MOA) {
        // run_moa, in order: f, noisy s, the layer rows h; LSA's activations and the keys K, V; the self-attention's
        // activations, its K, V and u; the cross-attention queries' activations and d f^, then the loss or the
        // backward: dK, dV, then the query block's temporaries, or d u, the self-attention's dK, dV and its
        // temporaries (datt, dq, d xs), or LSA's (d S with key_backward's d ns, then d o, datt, dq, dK, dV, d xn).
        const std::vector<int> Q = stage1_rows(T, opt.w, offset);
        const double n = (double)Q.size(), G = lsa_group(c), NG = G * T, Tx = Td * c.n_extra();
        int nL = 0;
        for (int q : Q) nL += !(opt.loss.hard_labels && q + 1 >= T);
        const double lsa = (double)T * lsa_floats_per_position(c), sa = (double)T * self_attn_floats_per_row(c);
        const double fixed = 2 * Td + Tx + lsa + 2 * Tk + sa + 2 * Tk + Td;
        const double acts = n * (qa + c.dim);
        const double loss_phase = nL > 0 ? 3.0 * nL * c.dim + 2.0 * nL + (double)draft_loss_floats(c, nL, opt.loss) : 0;
        const double lsa_bwd = Td + std::max(Td, NG * (2.0 * c.dim + 2.0 * c.q_dim() + 2.0 * c.kv_dim()));
        const double sa_bwd = (double)T * (2.0 * c.q_dim() + c.dim);
        const double bwd = 2 * Tk + std::max(n * qb, Td + 2 * Tk + std::max(sa_bwd, lsa_bwd));
        mem.lines.push_back({"input states f, noisy s", 2 * Td * B});
        if (c.n_extra()) mem.lines.push_back({strfmt("state-layer rows h (E = %d layers x T x dim)", c.n_extra()), Tx * B});
        mem.lines.push_back({strfmt("LSA activations (T x %d rows) and the cross-attention K, V", (int)G), (lsa + 2 * Tk) * B});
        mem.lines.push_back({"self-attention activations, its K, V and u", (sa + 2 * Tk + Td) * B});
        mem.lines.push_back({"cross-attention query activations + d f^", acts * B});
        mem.lines.push_back({"loss, or dK, dV + backward temporaries", std::max(loss_phase, bwd) * B});
        mem.iteration_peak = (fixed + acts + std::max(loss_phase, bwd)) * B;
        return mem;
    }

    double true_set = 3 * Td + T + 4 * Tk;        // f, s (noisy), ns, rstd, K, V, dK, dV
    const double Tx = Td * c.n_extra();           // state layers: their rows h, kept to the end (W_mix's gradient)
    double pred_set = 2 * Td + T + 4 * Tk;        // sp, nsp, rstdp, Kp, Vp, dKp, dVp
    mem.kv_set = pred_set * B;
    bool two = opt.stage == 2 && opt.S >= 2;
    int steps = opt.stage == 1 ? 1 : opt.S;
    double worst_step = 0, worst_acts = 0, worst_tmp = 0;
    for (int s = 1; s <= steps; s++) {
        std::vector<int> Q = opt.stage == 1 ? stage1_rows(T, opt.w, offset) : stage2_rows(T, opt.w, offset, s);
        int n = (int)Q.size(), nL = 0;
        for (int q : Q) nL += !(opt.loss.hard_labels && q + 1 >= T);
        double acts = n * (qa + c.dim);  // activations + d f^
        double loss_phase = nL > 0 ? 3.0 * nL * c.dim + 2.0 * nL + (double)draft_loss_floats(c, nL, opt.loss) : 0;
        double tmp = std::max(loss_phase, n * qb);
        if (acts + tmp > worst_step) {
            worst_step = acts + tmp;
            worst_acts = acts;
            worst_tmp = tmp;
        }
    }
    // key_backward's d ns; with state layers also d loss / d s (for W_mix's gradient), allocated before it
    double end_phase = c.n_extra() ? 2 * Td : Td;
    mem.lines.push_back({"true KV set (f, noisy s, norm, rstd, K, V, dK, dV)", true_set * B});
    if (c.n_extra()) mem.lines.push_back({strfmt("state-layer rows h (E = %d layers x T x dim)", c.n_extra()), Tx * B});
    if (two) mem.lines.push_back({"predicted KV set (stage 2, in place)", pred_set * B});
    mem.lines.push_back({"largest step: query activations + d f^", worst_acts * B});
    mem.lines.push_back({"largest step: loss or backward temporaries", worst_tmp * B});
    mem.lines.push_back({"key-set backward temporary", end_phase * B});
    mem.iteration_peak = (true_set + Tx + (two ? pred_set : 0) + std::max(worst_step, end_phase)) * B;
    return mem;
}

template class DraftTrainerT<Ops>;
template class DraftTrainerT<CpuOps64>;

}  // namespace beagle
