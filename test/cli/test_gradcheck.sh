#!/usr/bin/env bash
# test_gradcheck.sh: `beagle gradcheck` (float64, tiny random draft) for stage 1, stage 2 detached and
# stage 2 --sim-grad-through, plus token labels and other shapes (MHA, S = w, offset 0, no loss
# mask), fused state layers (w_mix), the EAGLE-style draft (--arch eagle: fc_e, fc_f and the self-attention layer; its
# training-time test --ttt over S = 2..4 steps), the Medusa heads (--arch medusa: medusa_w, medusa_b) and the
# Mixture of Attentions draft (--arch moa): every
# trainable tensor's analytic gradient must match central finite differences (relative error <= 1e-5,
# printed per tensor). The check is shown failing on a planted backward bug (--plant-bug). Also: bad
# flags give clear errors.
set -u
BIN=${BEAGLE_BIN:-build/beagle}
fail=0
run() {
  local out tensors="wq wk wv wo norm_q norm_kv norm_m w_gate w_up w_down"
  [ "${1:-}" = "--arch" ] && [ "${2:-}" = "eagle" ] && tensors="wq wk wv wo norm_q norm_m w_gate w_up w_down fc_e fc_f"
  [ "${1:-}" = "--arch" ] && [ "${2:-}" = "medusa" ] && tensors="medusa_w medusa_b"
  local moa=0
  [ "${1:-}" = "--arch" ] && [ "${2:-}" = "moa" ] && moa=1 &&
    tensors="$tensors sa_wq sa_wk sa_wv sa_wo norm_sa lsa_wq lsa_wk lsa_wv lsa_wo norm_lsa"
  case " $* " in *" --state-layers "*) [ $moa = 1 ] || tensors="$tensors w_mix" ;; esac
  out=$("$BIN" gradcheck "$@" 2>&1); rc=$?
  echo "$out"
  if [ $rc -ne 0 ]; then echo "FAIL: beagle gradcheck $* exited $rc"; fail=1; return; fi
  for t in $tensors; do
    echo "$out" | grep -Eq "^$t +[0-9]+ .* ok$" || { echo "FAIL: tensor $t not reported ok ($*)"; fail=1; }
  done
  echo "$out" | grep -q "^PASS" || { echo "FAIL: no PASS line ($*)"; fail=1; }
}
run --stage 1
run --stage 2
run --stage 2 --sim-grad-through
run --stage 1 --hard-labels --seed 5
run --stage 2 --T 17 --w 4 --S 4 --offset 0 --no-loss-mask --heads 2 --kv-heads 2 --head-dim 8 --seed 9
run --stage 2 --sim-grad-through --T 19 --w 5 --S 4 --offset 3 --hard-labels --vocab-chunk 7 --seed 3
run --arch eagle
# state layers (W_mix of s = f + W_mix h; random W_mix and layer rows): every stage and mode. A planted
# bug that drops the first row from W_mix's gradient was caught (w_mix rel_err 0.94; the last row cannot
# show one: no query sees the last key)
run --stage 1 --state-layers 2
run --stage 2 --state-layers 1 --T 17 --w 4 --S 4 --offset 0 --seed 4
run --stage 2 --sim-grad-through --state-layers 3 --seed 6
run --arch eagle --T 17 --no-loss-mask --heads 2 --kv-heads 2 --head-dim 8 --hard-labels --vocab-chunk 7 --seed 9
# the EAGLE draft's training-time test (--ttt, stage 2: S steps fed the draft's own f^, held fixed as the
# trainer holds them). A planted bug that back-propagated the steps in forward order (step 1's key rows
# before the later steps had added their gradients) was caught: wk rel_err 0.73, wv 0.45, norm_q 0.49
run --arch eagle --stage 2 --ttt --S 2
run --arch eagle --stage 2 --ttt --S 3 --T 17 --w 4 --hard-labels --heads 2 --kv-heads 1 --head-dim 8 --seed 4
run --arch eagle --stage 2 --ttt --S 4 --T 9 --w 4 --no-loss-mask --seed 7
# the Medusa heads (K heads, head k's loss against row p + 1 + k, weights 0.8^k; soft and token labels, the loss mask)
run --arch medusa
run --arch medusa --medusa-heads 1 --T 5 --no-loss-mask --seed 2
run --arch medusa --medusa-heads 5 --T 17 --hard-labels --vocab-chunk 7 --dim 8 --seed 8
# the Mixture of Attentions draft (--arch moa: LSA over f and the state-layer rows, the tokens' self-attention,
# the cross-attention block; one objective in any stage). A planted bug that dropped Wv_s's term from the
# self-attention's input gradient was caught: norm_sa rel_err 0.89
run --arch moa
run --arch moa --state-layers 1 --stage 2 --T 17 --w 4 --hard-labels --heads 2 --kv-heads 1 --head-dim 8 --seed 4 --no-loss-mask --vocab-chunk 7
run --arch moa --state-layers 4 --T 11 --w 2 --offset 0 --seed 8
out=$("$BIN" gradcheck --arch moa --plant-bug 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -Eq "^w_gate .* FAIL$" || { echo "FAIL: planted bug (arch moa) not caught: exit $rc"; fail=1; }

# detached and sim-grad-through give different gradients for the same loss
det=$("$BIN" gradcheck --stage 2 | grep '^wq ')
thr=$("$BIN" gradcheck --stage 2 --sim-grad-through | grep '^wq ')
[ "$(echo "$det" | awk '{print $3}')" != "$(echo "$thr" | awk '{print $3}')" ] || { echo "FAIL: detached == grad-through"; fail=1; }

# the check fails on a planted backward bug (--plant-bug: swiglu backward's dgate off by a relative 1e-4,
# 10x the tolerance): exit 1, FAIL line, w_gate (and what is upstream of it) FAIL, w_up and w_down (not
# downstream of dgate) still ok, and the bug announced loudly; the same run without the bug passes above.
for st in 1 2; do
  out=$("$BIN" gradcheck --stage $st --plant-bug 2>&1); rc=$?
  [ $rc -eq 1 ] || { echo "FAIL: planted bug (stage $st) not caught: exit $rc"; fail=1; }
  echo "$out" | grep -q "^FAIL: not every" || { echo "FAIL: planted bug (stage $st): no FAIL line"; fail=1; }
  echo "$out" | grep -Eq "^w_gate .* FAIL$" || { echo "FAIL: planted bug (stage $st): w_gate not FAIL"; fail=1; }
  for t in w_up w_down; do
    echo "$out" | grep -Eq "^$t +[0-9]+ .* ok$" || { echo "FAIL: planted bug (stage $st): $t should stay ok"; fail=1; }
  done
  echo "$out" | grep -q "PLANTED BUG" || { echo "FAIL: planted bug not announced"; fail=1; }
  echo "planted bug, stage $st: caught (exit $rc), $(echo "$out" | grep -c ' FAIL$') tensors FAIL"
done
# the Medusa heads' SiLU derivative is swiglu_bwd's dgate: the same planted bug must fail both their tensors
out=$("$BIN" gradcheck --arch medusa --plant-bug 2>&1); rc=$?
[ $rc -eq 1 ] || { echo "FAIL: planted bug (medusa) not caught: exit $rc"; fail=1; }
for t in medusa_w medusa_b; do
  echo "$out" | grep -Eq "^$t .* FAIL$" || { echo "FAIL: planted bug (medusa): $t not FAIL"; fail=1; }
done

# bad input
out=$("$BIN" gradcheck --stage 3 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "stage must be 1 or 2" || { echo "FAIL: --stage 3: rc $rc: $out"; fail=1; }
out=$("$BIN" gradcheck --stage 1 --sim-grad-through 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "needs --stage 2" || { echo "FAIL: --sim-grad-through with stage 1: $out"; fail=1; }
out=$("$BIN" gradcheck --stage 2 --w 2 --S 3 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "S <= w" || { echo "FAIL: S > w: $out"; fail=1; }
out=$("$BIN" gradcheck --stage 1 --heads 3 --kv-heads 2 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "multiple of n_kv_heads" || { echo "FAIL: bad heads: $out"; fail=1; }
out=$("$BIN" gradcheck --arch hydra 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "not one of beagle, eagle, medusa" || { echo "FAIL: --arch hydra: rc $rc: $out"; fail=1; }
out=$("$BIN" gradcheck --arch medusa --medusa-heads 0 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "medusa-heads must be in 1..16" || { echo "FAIL: --medusa-heads 0: rc $rc: $out"; fail=1; }
[ $fail -eq 0 ] && echo "test_gradcheck: all passed"
exit $fail
