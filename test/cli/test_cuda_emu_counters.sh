#!/usr/bin/env bash
# test_cuda_emu_counters.sh: the CUDA backend's runtime counters (docs/gpu.md) under the emulator
# (build/beagle-cuda-emu), read from `generate --json` and the training summary:
#   - greedy SD with the shipped stories260K draft, chain and tree of 24: no cudaMalloc after the
#     first round (allocs_after_warmup 0: Llama and Draft size the scratch up front, Ops::reserve, and
#     the draft's key temporaries are kept), chain: at most 2 syncs per round (its gamma argmax ids
#     stay on the device between draft steps and come down in one copy, then the verify's ids); tree:
#     at most 2 syncs per round too (its working tree stays on the device between depths, Ops::tree_expand,
#     and comes down in one copy; the host loop syncs once per depth, depth + 1 = 6); at most 16 KiB down
#     per round (ids, the tree's 16-byte nodes, never logits or states); each round (the cost-aware tree's
#     too) at most 3 graph launches (the draft's steps, the verify pass, a tree's KV compaction) and 16
#     launches in all, with the text of plain greedy decoding;
#   - the same drafts sampled (temperature 0.8): no cudaMalloc after the first round either, and the verify's
#     logits and states stay on the device. The chain is drawn there (Draft::sample_ids: each step's row warped
#     and drawn with the host's coin) and accepted there but for the coins (SpecDecoder::accept_backend_chain):
#     per round exactly 3 syncs (its 5 ids; p(x) and q(x) of the chain; the two rows where the walk ends) and
#     at most 20 + 40 bytes + a p and a q row of 2 KiB down (the host loop: 7.67 syncs, 15.7 KB with this seed);
#     its draft steps a graph as the greedy chain's (at most 16 launches a round), the text that without graphs.
#     The tree's candidates are point masses: only the rows the acceptance walk reads come down (the accepted
#     path's, tau rows of 2 KiB per round, one copy each), so at most its own downloads (nodes and top-k, under
#     8 KiB) + tau x 2 KiB and 1 + tau syncs per round (downloading T rows of logits and states would be 60 KiB
#     per round; the checks allow 1 byte and 0.01 sync for the JSON's rounding of tau and the figures);
#   - SmolLM2-135M Q4_1 with its shipped draft (reduced vocabulary of 8192: the chain's ids go through
#     the d2t table on the device), greedy chain: at most 2 syncs per round and the text of plain
#     greedy decoding on the same backend (not the CPU's: at the 6th token of this prompt the emulated
#     backend's Q4_1 sums, in another order, pick another token, " United" vs " answer"; a short run:
#     each emulated SmolLM2 round takes ~10-25 s on a loaded machine), its rounds graphs as stories260K's
#     (at most 3 graph launches and 16 launches a round: 375 without graphs); the greedy tree of 24 the same
#     (its next queries' ids through d2t on the device too);
#   - training stage 1 then stage 2 (batch 2, window 2, 2 simulation steps): no cudaMalloc after the
#     first optimizer step (the trainer's pool, warmed at the largest shapes before the first step) and
#     at most 2 syncs per step (one loss download, one gradient norm); the same for a wide draft (dim
#     1024 of a random 1-layer target, sequences of 128: 4 MiB of input states per step, more than a
#     4 MiB staging arena holds between syncs; the arena grows instead of adding a sync).
# The counts are exact (every runtime call runs in the emulator), so the bounds are the design's, not
# tolerances. BEAGLE_CUDA_BIN=build/beagle-cuda runs the same checks on a GPU.
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
EMU=${BEAGLE_CUDA_BIN:-$B/beagle-cuda-emu}
CPU=${BEAGLE_BIN:-build/beagle}
M=$PWD/data/models
D=weights/beagle-stories260K.bin
[ -x "$EMU" ] || { echo "FAIL: $EMU missing (make cuda-emu)"; exit 1; }
[ -f "$D" ] || { echo "SKIP: no draft at $D"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
# check name json-file python-expression-over-g (the "gpu" object) and j (the whole JSON line)
check() {
  local name=$1 file=$2 expr=$3
  if python3 - "$file" "$expr" <<'EOF'
import json, sys
line = [l for l in open(sys.argv[1]) if l.startswith("{")][-1]
j = json.loads(line)
g = j["gpu"]
ok = eval(sys.argv[2], {}, {"g": g, "j": j})
print("     " + json.dumps(g))
sys.exit(0 if ok else 1)
EOF
  then echo "ok   $name"; else echo "FAIL $name: $expr"; fails=$((fails+1)); fi
}
P="Once upon a time, there was a little dog named Max who liked to run"
# greedy rounds are graphs (docs/gpu.md "CUDA graphs"): the draft's steps one graph (Draft::begin_steps), the
# verify pass another (Llama::forward), a tree's KV compaction a third (Llama::compact), and outside them only
# the verify's head (RMSNorm, LM head, argmax) and the accepted path's gather into the draft's state staging:
# 6-8 launches a round once each shape is captured (a round whose new keys are too many to capture, as after a
# long prompt, launches every kernel: at most 16 on average over these rounds, against 171 / 193 without
# graphs); the text is that of plain greedy decoding
"$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 40 --temp 0 > "$tmp/plain.txt" 2> /dev/null
for mode in "chain" "tree --total-tokens 24" "tree --total-tokens auto"; do
  "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 40 --temp 0 -d "$D" --spec $mode --json \
    > "$tmp/sd.txt" 2> "$tmp/g.json" || { echo "FAIL $mode: exit $?"; cat "$tmp/g.json"; fails=$((fails+1)); continue; }
  check "$mode: allocs_after_warmup == 0, syncs_per_round <= 2, d2h_bytes_per_round <= 16384, graph_launches_per_round <= 3, launches_per_round <= 16" "$tmp/g.json" \
    "g['rounds'] >= 3 and g['allocs_after_warmup'] == 0 and g['syncs_per_round'] <= 2 and g['d2h_bytes_per_round'] <= 16384 \
     and 1 <= g['graph_launches_per_round'] <= 3 and g['launches_per_round'] <= 16"
  if cmp -s "$tmp/plain.txt" "$tmp/sd.txt"; then echo "ok   $mode text == plain greedy"; else
    echo "FAIL $mode text differs from plain greedy"; diff "$tmp/plain.txt" "$tmp/sd.txt"; fails=$((fails+1)); fi
done
# sampled (temperature 0.8): the host decides acceptance from the rows of the path alone (bounds above; the
# tree's tau 3.33 and the chain's 2.67 with this seed); nothing is allocated after the first round either:
# Ops::reserve sizes the quantized-activation scratch of a model whose widest input is not a multiple of 32
# (stories260K's ffn 172) and the first captured plain step's slots up front, so a sampled tree of
# --total-tokens auto does not allocate when its largest draft batch or first plain step comes late
# (test_cuda_backend_ops and test_cuda_backend_graph pin both, which these runs do not always reach)
# (mode, bytes, syncs, per tau: 1 = + tau rows of 2 KiB and + tau syncs)
for mode in "chain 4156 3 0" "tree 8192 1 1"; do
  set -- $mode
  args="$1"; [ "$1" = tree ] && args="tree --total-tokens 24"
  "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 40 --temp 0.8 --seed 3 -d "$D" --spec $args --json \
    > "$tmp/sd.txt" 2> "$tmp/g.json" || { echo "FAIL sampled $1: exit $?"; cat "$tmp/g.json"; fails=$((fails+1)); continue; }
  check "sampled $1: allocs_after_warmup == 0, d2h_bytes_per_round <= $2 + $4 x tau x 2048, syncs_per_round <= $3 + $4 x tau" \
    "$tmp/g.json" "g['rounds'] >= 3 and g['allocs_after_warmup'] == 0 and j['tau'] > 1 and \
      g['d2h_bytes_per_round'] <= $2 + $4 * j['tau'] * 2048 + 1 and g['syncs_per_round'] <= $3 + $4 * j['tau'] + 0.01"
  if [ "$1" = chain ]; then  # its draft steps a graph too (coins staged): 175 launches a round without graphs
    check "sampled chain: graph_launches_per_round <= 2, launches_per_round <= 16" "$tmp/g.json" \
      "1 <= g['graph_launches_per_round'] <= 2 and g['launches_per_round'] <= 16"
    BEAGLE_CUDA_GRAPH=0 "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 40 --temp 0.8 --seed 3 -d "$D" \
      --spec chain > "$tmp/ng.txt" 2> /dev/null
    if cmp -s "$tmp/ng.txt" "$tmp/sd.txt"; then echo "ok   sampled chain text == without graphs"; else
      echo "FAIL sampled chain text differs without graphs"; fails=$((fails+1)); fi
  fi
done
# the shipped EAGLE draft (arch eagle): its chain's ids stay on the device too (forward_ids places the token
# embedding before fc), greedy <= 2 syncs and sampled 3 per round (6.0 and 7.44 before); its trees keep the host
# loop (depth + 1 = 6 syncs); neither allocates after the first round (its new keys' temporaries are kept:
# 8-12 cudaMallocs after warm-up before)
E=weights/eagle-stories260K.bin
if [ -f "$E" ]; then
  for mode in "chain 0 2" "chain 0.8 3" "tree 0 6"; do
    set -- $mode
    args="$1"; [ "$1" = tree ] && args="tree --total-tokens 24"
    "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 40 --temp $2 --seed 3 -d "$E" --spec $args --json \
      > /dev/null 2> "$tmp/g.json" || { echo "FAIL eagle $1 temp $2: exit $?"; cat "$tmp/g.json"; fails=$((fails+1)); continue; }
    check "eagle $1 temp $2: allocs_after_warmup == 0, syncs_per_round <= $3" "$tmp/g.json" \
      "g['rounds'] >= 3 and g['allocs_after_warmup'] == 0 and g['syncs_per_round'] <= $3"
  done
else
  echo "FAIL: $E missing"; fails=$((fails+1))
fi
SM=${BEAGLE_MODEL:-weights/SmolLM2-135M-Instruct.Q4_1.gguf}
SD=weights/beagle-smollm2-135m.bin
skips=0
if [ -f "$SM" ] && [ -f "$SD" ]; then
  Q="The capital of France is"
  "$EMU" generate -m "$SM" -p "$Q" -n 6 --temp 0 > "$tmp/plain.txt" 2> /dev/null
  for mode in "chain" "tree --total-tokens 24"; do
    name="SmolLM2 ${mode%% *}"
    if "$EMU" generate -m "$SM" -d "$SD" -p "$Q" -n 6 --temp 0 --spec $mode --json > "$tmp/sd.txt" 2> "$tmp/s.json"; then
      check "$name (d2t on the device): syncs_per_round <= 2, allocs_after_warmup == 0, graph_launches_per_round <= 3, launches_per_round <= 16" "$tmp/s.json" \
        'g["rounds"] >= 2 and g["syncs_per_round"] <= 2 and g["allocs_after_warmup"] == 0 and 1 <= g["graph_launches_per_round"] <= 3 and g["launches_per_round"] <= 16'
      if cmp -s "$tmp/plain.txt" "$tmp/sd.txt"; then echo "ok   $name text == plain greedy"; else
        echo "FAIL $name text differs from plain greedy"; diff "$tmp/plain.txt" "$tmp/sd.txt"; fails=$((fails+1)); fi
    else
      echo "FAIL $name: exit $?"; cat "$tmp/s.json"; fails=$((fails+1))
    fi
  done
else
  echo "SKIP: SmolLM2 chain and tree: no model at $SM or draft at $SD (make model)"; skips=$((skips+1))
fi
T=(-m "$M/stories260K.bin" -z "$M/tok512.bin")
"$CPU" datagen "${T[@]}" --sample 8 -n 64 --shard-seqs 4 --keep-states -o "$tmp/d" -t 1 2> "$tmp/err.txt" || { echo "FAIL datagen"; cat "$tmp/err.txt"; exit 1; }
"$EMU" train "${T[@]}" --data "$tmp/d" --seq-len 64 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 1 \
  --batch 2 -t 1 -q -o "$tmp/t.bin" > /dev/null 2> "$tmp/err.txt" || { echo "FAIL train: exit $?"; cat "$tmp/err.txt"; exit 1; }
python3 -c "import json; print(json.dumps(json.load(open('$tmp/t.bin.json'))))" > "$tmp/t.json"
check "train stage 1 + 2: allocs_after_first_step == 0, syncs_per_step <= 2" "$tmp/t.json" \
  'g["steps"] >= 4 and g["allocs_after_first_step"] == 0 and g["syncs_per_step"] <= 2'
# tokens-only data: the target computes the states on the device, each step queuing the next step's
# prefills before its own sync, so they cost no sync of their own; the same draft as from stored states
"$CPU" datagen "${T[@]}" --sample 8 -n 64 --shard-seqs 4 -o "$tmp/dt" -t 1 2> "$tmp/err.txt" || { echo "FAIL datagen (tokens)"; cat "$tmp/err.txt"; exit 1; }
"$EMU" train "${T[@]}" --data "$tmp/dt" --seq-len 64 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 1 \
  --batch 2 -t 1 -q -o "$tmp/tt.bin" > /dev/null 2> "$tmp/err.txt" || { echo "FAIL train (tokens): exit $?"; cat "$tmp/err.txt"; exit 1; }
python3 -c "import json; print(json.dumps(json.load(open('$tmp/tt.bin.json'))))" > "$tmp/tt.json"
check "train from tokens (states computed on the device): allocs_after_first_step == 0, syncs_per_step <= 2" "$tmp/tt.json" \
  'j["states"] == "computed" and g["steps"] >= 4 and g["allocs_after_first_step"] == 0 and g["syncs_per_step"] <= 2'
W="$tmp/wide.gguf"
"$B/test/tool_random_llama" "$W" --layers 1 --vocab 512 --dim 1024 --heads 8 --kv-heads 4 --ffn 256 > /dev/null 2>&1 \
  || { echo "FAIL tool_random_llama"; exit 1; }
"$CPU" datagen -m "$W" --sample 8 -n 128 --batch 8 --shard-seqs 8 --keep-states -o "$tmp/dw" -t 1 > /dev/null 2> "$tmp/err.txt" \
  || { echo "FAIL datagen (wide)"; cat "$tmp/err.txt"; exit 1; }
"$EMU" train -m "$W" --data "$tmp/dw" --batch 4 --seq-len 128 --window 2 --sim-steps 2 --stage1-epochs 1 \
  --stage2-epochs 1 --max-steps 2 -t 1 -q -o "$tmp/w.bin" > /dev/null 2> "$tmp/err.txt" \
  || { echo "FAIL train (wide): exit $?"; cat "$tmp/err.txt"; exit 1; }
python3 -c "import json; print(json.dumps(json.load(open('$tmp/w.bin.json'))))" > "$tmp/w.json"
check "train, a dim-1024 draft (4 MiB of states per step): syncs_per_step <= 2, allocs_after_first_step == 0" "$tmp/w.json" \
  'g["steps"] == 2 and g["allocs_after_first_step"] == 0 and g["syncs_per_step"] <= 2'
echo "$fails failures, $skips parts skipped"
[ $fails -eq 0 ] || exit 1
[ $skips -eq 0 ] || exit 77
