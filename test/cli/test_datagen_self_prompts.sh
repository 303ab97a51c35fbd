#!/usr/bin/env bash
# test_datagen_self_prompts.sh: `beagle datagen --self-prompts N` (Magpie: the target writes its own user
# turns after the chat template's user prefix, then answers them) on a tiny random ChatML model
# (tool_random_llama --chatml 1: vocab 128, so the end-of-turn tokens come often enough that many turns
# end within --max-prompt and many are redrawn):
#   - the same seed gives the same bytes; another --batch, -t or --shard-seqs gives the same user turns
#     (each sequence's turn depends only on the seed and its index) and the same shards; another seed differs;
#   - kill -9 (from outside) after the first shard, then resume: the bytes of the straight run; a deleted shard, a deleted
#     shard's turns file or self_prompts.jsonl are rewritten identically;
#   - every stored prompt decodes to the template's system + user prefix, the (non-empty) turn written
#     to self_prompts.jsonl, then the end of the turn and the assistant prefix;
#   - --prompts DIR/self_prompts.jsonl (greedy, a --max-prompt that cuts nothing) gives identical shards;
#   - mpirun -np 2 (if installed) writes the bytes of 1 process;
#   - --prompts / --sample / --self-prompts are mutually exclusive; a model without a chat template is refused;
#   - on SmolLM2 (BEAGLE_MODEL, if present): the real template's prefixes, and the re-fed shards identical.
set -u
M=$BEAGLE_ROOT/data/models
B=$BEAGLE_BIN
TOOL=$(dirname "$B")/test/tool_random_llama
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
[ -x "$TOOL" ] || { echo "SKIP: $TOOL not built (make tests)"; exit 77; }
"$TOOL" "$tmp/chat.gguf" --layers 2 --vocab 128 --dim 128 --heads 4 --kv-heads 2 --ffn 256 --chatml 1 > /dev/null 2>&1 \
  || { echo "FAIL tool_random_llama"; exit 1; }
gen() { "$B" datagen -m "$tmp/chat.gguf" --self-prompts 96 -n 200 --max-prompt 48 "$@"; }

gen -o "$tmp/a" --batch 8 --shard-seqs 8 -t 1 2> "$tmp/a.log" || { bad "clean run"; cat "$tmp/a.log"; }
[ "$(ls "$tmp/a"/shard-*.bin | wc -l)" = 12 ] && [ "$(wc -l < "$tmp/a/self_prompts.jsonl")" = 96 ] \
  && ok "12 shards, 96 turns; $(tail -c 200 "$tmp/a.log" | tr '\r' '\n' | tail -1)" || bad "shard / turn count: $(ls "$tmp/a")"
gen -o "$tmp/a2" --batch 8 --shard-seqs 8 -t 1 2> /dev/null
diff -r "$tmp/a" "$tmp/a2" > /dev/null && ok "same seed: same bytes" || bad "same seed, different bytes"
gen -o "$tmp/b" --batch 3 --shard-seqs 8 -t 2 2> /dev/null
diff -r "$tmp/a" "$tmp/b" > /dev/null && ok "batch 3 / 2 threads = batch 8 / 1 thread, byte for byte" || bad "batch size changed the data"
gen -o "$tmp/s5" --batch 8 --shard-seqs 5 -t 1 2> /dev/null
cmp -s "$tmp/a/self_prompts.jsonl" "$tmp/s5/self_prompts.jsonl" && ok "--shard-seqs 5: the same turns" || bad "shard size changed the turns"
gen -o "$tmp/d" --batch 8 --shard-seqs 8 -t 1 -s 99 2> /dev/null
cmp -s "$tmp/a/self_prompts.jsonl" "$tmp/d/self_prompts.jsonl" && bad "another seed gave the same turns" || ok "another seed: other turns"
[ "$(sort -u "$tmp/a/self_prompts.jsonl" | wc -l)" -ge 90 ] && ok "turns distinct: $(sort -u "$tmp/a/self_prompts.jsonl" | wc -l) of 96" \
  || bad "turns repeat: $(sort -u "$tmp/a/self_prompts.jsonl" | wc -l) distinct of 96"

# killed (SIGKILL, as kill -9) from outside once the first shard is on disk, then resume. kill_when.py
# starts beagle itself, so the signal reaches beagle and not a shell around it (which would leave beagle
# running beside the resumed run).
python3 "$BEAGLE_ROOT/test/tools/kill_when.py" --files "$tmp/c/shard-*.bin" 1 -- \
  "$B" datagen -m "$tmp/chat.gguf" --self-prompts 96 -n 200 --max-prompt 48 -o "$tmp/c" --batch 8 --shard-seqs 8 -t 1 2> /dev/null; rc=$?
n_before=$(ls "$tmp/c"/shard-*.bin 2> /dev/null | wc -l)
[ $rc -eq 137 ] && [ "$n_before" -ge 1 ] && [ "$n_before" -lt 12 ] && [ -e "$tmp/c/self_prompts-00000.jsonl" ] && [ ! -e "$tmp/c/self_prompts.jsonl" ] &&
  ok "killed by SIGKILL (exit $rc) after $n_before of 12 shards" || bad "the kill: exit $rc, $n_before shards, $(ls "$tmp/c")"
gen -o "$tmp/c" --batch 8 --shard-seqs 8 -t 1 2> "$tmp/c.log" || { bad "resume"; cat "$tmp/c.log"; }
diff -r "$tmp/a" "$tmp/c" > /dev/null && ok "killed after $n_before of 12 shards, resumed: identical to the straight run" || bad "resumed data differs"
rm "$tmp/c/shard-00003.bin" "$tmp/c/self_prompts-00005.jsonl" "$tmp/c/shard-00007.bin" "$tmp/c/self_prompts-00007.jsonl" "$tmp/c/self_prompts.jsonl"
gen -o "$tmp/c" --batch 5 --shard-seqs 8 -t 1 2> /dev/null
diff -r "$tmp/a" "$tmp/c" > /dev/null && ok "deleted shard / turns file / both / self_prompts.jsonl rewritten identically" || bad "rewritten files differ"

# mpirun -np 2: rank r writes shards r, r + 2, ...; rank 0 joins the turns: the bytes of one process
if command -v mpirun > /dev/null; then
  if [ -n "${ASAN_OPTIONS:-}" ]; then export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"; fi  # see test_train_mpi.sh
  mpirun --oversubscribe --allow-run-as-root --bind-to none -x ASAN_OPTIONS -np 2 \
    "$B" datagen -m "$tmp/chat.gguf" --self-prompts 96 -n 200 --max-prompt 48 --batch 8 --shard-seqs 8 -t 1 -o "$tmp/m" 2> "$tmp/m.log" \
    || { bad "mpirun -np 2"; cat "$tmp/m.log"; }
  diff -r "$tmp/a" "$tmp/m" > /dev/null && ok "mpirun -np 2: identical to 1 process" || bad "mpirun -np 2 differs"
else
  echo "skip mpirun part: no mpirun"
fi

# the stored prompts: template prefix + the turn of self_prompts.jsonl + end of turn + assistant prefix
python3 - "$tmp/a" "$B" "$tmp/chat.gguf" \
  "<s><|im_start|>system
You are a tiny random model<|im_end|>
<|im_start|>user
" "<|im_end|>
<|im_start|>assistant
" << 'EOF' && ok "every prompt = template prefix + its self_prompts.jsonl turn + assistant prefix" || bad "stored prompts"
import glob, json, struct, subprocess, sys
d, beagle, model, pre, post = sys.argv[1:6]
prompts = []
for path in sorted(glob.glob(d + "/shard-*.bin")):
    b = open(path, "rb").read()
    n_seqs, n_tok = struct.unpack_from("<IQ", b, 20)
    tab = [struct.unpack_from("<QII", b, 48 + 16 * i) for i in range(n_seqs)]
    t0 = (48 + 16 * n_seqs + 63) // 64 * 64
    for first, ln, n_prompt in tab:
        prompts.append(list(struct.unpack_from("<%di" % n_prompt, b, t0 + 4 * first)))
turns = [json.loads(l)["prompt"] for l in open(d + "/self_prompts.jsonl")]
assert len(turns) == len(prompts) == 96, (len(turns), len(prompts))
inp = "".join(json.dumps({"ids": p}) + "\n" for p in prompts)
open(d + "/../ids.jsonl", "w").write(inp)
out = subprocess.run([beagle, "tokenize", "-m", model, "--render-special", "--jsonl", d + "/../ids.jsonl"],
                     capture_output=True, text=True, check=True).stdout.splitlines()
for i, (line, turn) in enumerate(zip(out, turns)):
    text = json.loads(line)["decoded"]
    assert text == pre + turn + post, "prompt %d: %r vs turn %r" % (i, text, turn)
    assert turn, "prompt %d: empty turn" % i
EOF

# self_prompts.jsonl re-fed with --prompts: the same shards (greedy answers, same per-sequence seeds)
"$B" datagen -m "$tmp/chat.gguf" --prompts "$tmp/a/self_prompts.jsonl" -n 200 --max-prompt 4096 --batch 8 --shard-seqs 8 -t 1 -o "$tmp/r" 2> /dev/null \
  || bad "re-feed run"
same=1; for f in "$tmp/a"/shard-*.bin; do cmp -s "$f" "$tmp/r/$(basename "$f")" || same=0; done
[ $same = 1 ] && ok "--prompts DIR/self_prompts.jsonl: identical shards" || bad "re-fed turns give other shards"

# errors
err() {  # err NAME PATTERN ARGS...: exit status 1 and PATTERN in the message
  local name=$1 pat=$2; shift 2
  "$B" datagen -m "$tmp/chat.gguf" -o "$tmp/x" "$@" 2> "$tmp/e.log"; local rc=$?
  [ $rc -eq 1 ] && grep -q "$pat" "$tmp/e.log" && ok "$name: $(cat "$tmp/e.log")" || { bad "$name (rc $rc)"; cat "$tmp/e.log"; }
}
err "--self-prompts with --prompts" "exactly one of --prompts FILE, --sample N or --self-prompts N" --self-prompts 4 --prompts "$tmp/a/self_prompts.jsonl"
err "--self-prompts with --sample" "exactly one of" --self-prompts 4 --sample 4
err "--prompts with --sample" "exactly one of" --prompts "$tmp/a/self_prompts.jsonl" --sample 4
err "--self-prompts with --skip" "apply to --prompts only" --self-prompts 4 --skip 2
err "--prompt-temp 0" "prompt-temp must be > 0" --self-prompts 4 --prompt-temp 0
err "--self-prompts --no-chat" "needs a chat template" --self-prompts 4 --no-chat
"$B" datagen -m "$M/stories260K.bin" -z "$M/tok512.bin" --self-prompts 4 -o "$tmp/y" 2> "$tmp/e.log"
[ $? -eq 1 ] && grep -q "needs a chat template" "$tmp/e.log" && ok "base model refused: $(cat "$tmp/e.log")" || { bad "base model"; cat "$tmp/e.log"; }

# SmolLM2: the real template (its default system line), a few seconds
if [ -f "${BEAGLE_MODEL:-}" ]; then
  S="$B datagen -m $BEAGLE_MODEL -n 8 --batch 4 -t 2"
  $S --self-prompts 4 --max-prompt 48 -o "$tmp/sm" 2> /dev/null || bad "SmolLM2 run"
  $S --prompts "$tmp/sm/self_prompts.jsonl" --max-prompt 512 -o "$tmp/smr" 2> /dev/null || bad "SmolLM2 re-feed run"
  cmp -s "$tmp/sm/shard-00000.bin" "$tmp/smr/shard-00000.bin" && ok "SmolLM2: re-fed turns give the identical shard" || bad "SmolLM2 re-feed differs"
  python3 - "$tmp/sm" "$B" "$BEAGLE_MODEL" << 'EOF' && ok "SmolLM2: every prompt is system + user prefix, turn, assistant prefix: $(head -c 150 "$tmp/sm/self_prompts.jsonl")" || bad "SmolLM2 prompts"
import json, struct, subprocess, sys
d, beagle, model = sys.argv[1:4]
b = open(d + "/shard-00000.bin", "rb").read()
n_seqs = struct.unpack_from("<I", b, 20)[0]
t0 = (48 + 16 * n_seqs + 63) // 64 * 64
turns = [json.loads(l)["prompt"] for l in open(d + "/self_prompts.jsonl")]
assert n_seqs == len(turns) == 4
for i in range(n_seqs):
    first, ln, n_prompt = struct.unpack_from("<QII", b, 48 + 16 * i)
    ids = list(struct.unpack_from("<%di" % n_prompt, b, t0 + 4 * first))
    text = subprocess.run([beagle, "tokenize", "-m", model, "--render-special", "--decode", " ".join(map(str, ids))],
                          capture_output=True, text=True, check=True).stdout
    want = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\n" + turns[i] + "<|im_end|>\n<|im_start|>assistant\n")
    assert text.rstrip("\n") == want.rstrip("\n"), (text, want)
EOF
else
  echo "skip SmolLM2 part: BEAGLE_MODEL not found"
fi
echo "$fails failures"
[ $fails -eq 0 ]
