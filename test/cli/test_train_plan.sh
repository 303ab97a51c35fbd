#!/usr/bin/env bash
# test_train_plan.sh: `beagle train --plan` for 7B-class drafts (dim 4096, 32 heads, 8 or 32 KV
# heads, ffn 11008, vocab 32000 and 128256, seq 2048, batch 1, S = 3) stays under 24 GiB and its
# S-dependent part is exactly one KV set. (The figures come from train_memory(), which
# test_stage2_memory checks against the trainer's counting allocator on small configs.)
set -u
fails=0
for g in 7b 7b-mha 7b-llama3 "7b-mha,vocab=128256"; do
  out=$("$BEAGLE_BIN" train --plan "$g" --sim-steps 3 2>&1); rc=$?
  total=$(echo "$out" | awk '/^TOTAL/ {print $2, $3}')
  kv=$(echo "$out" | sed -n 's/.*= \([0-9.]*\) KV sets.*/\1/p')
  if [ $rc -eq 0 ] && echo "$total" | grep -q "<" && [ "$kv" = "1.00" ]; then echo "ok   $g: total $total GiB, S-dependent part $kv KV sets"
  else echo "FAIL $g: rc $rc total '$total' kv '$kv'"; echo "$out"; fails=$((fails+1)); fi
done
"$BEAGLE_BIN" train --plan "dim=4096,bogus=3" > /dev/null 2>&1; [ $? -eq 1 ] && echo "ok   bad geometry rejected" || { echo "FAIL bad geometry"; fails=$((fails+1)); }
echo "$fails failures"
[ $fails -eq 0 ]
