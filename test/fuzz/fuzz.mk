# test/fuzz/fuzz.mk: coverage-guided fuzzing (libFuzzer, clang, ASan + UBSan, leak checks on) of every
# parser of outside input; harnesses test/fuzz/fuzz_<name>.cpp, dictionaries test/fuzz/dict/<name>.dict.
#   make fuzz FUZZ_SECONDS=N  build the harnesses in build-fuzz/ (library: -fsanitize=fuzzer-no-link,
#                             -DBEAGLE_FUZZ: files are read to the heap, not mapped, so ASan sees
#                             every read past the end), make the seed corpora (test/fuzz/make_seeds.sh),
#                             run each harness N seconds and print "fuzz <name> execs <n> cov <c>
#                             crashes <k>"; exit non-zero if any crashed, hung or leaked
#                             (reproducers in build-fuzz/artifacts/<name>/). FUZZ_ONLY=regex: some.
#   make fuzz-build           build only (scripts/sysdeps.sh fuzz installs clang and libFuzzer if absent).
# `make tests` also builds each harness with g++ -O2 against build/libbeagle.a with -DFUZZ_REPLAY
# (build/test/fuzz/replay_<name>): test/cli/test_fuzz_regress.sh replays test/fuzz/regress/<name>/* and
# the seeds through them.
FUZZ_SECONDS ?= 20
FUZZ_ONLY    ?= .
FUZZ_BUILD   := build-fuzz
FUZZ_CXX     ?= clang++
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -DBEAGLE_FUZZ
FUZZ_SRC     := $(sort $(wildcard test/fuzz/fuzz_*.cpp))
FUZZ_NAMES   := $(FUZZ_SRC:test/fuzz/fuzz_%.cpp=%)
FUZZ_HDRS    := test/fuzz/fuzz_common.h test/unit/test_loaders_util.h

.PHONY: fuzz fuzz-build fuzz-bins
fuzz: fuzz-build $(BUILD)/test/fuzz/make_seeds $(MODEL)
	FUZZ_BUILD=$(FUZZ_BUILD) BUILD=$(BUILD) bash test/fuzz/run_fuzz.sh $(FUZZ_SECONDS) '$(FUZZ_ONLY)'

fuzz-build: | $(SYS_HDRS)
	bash scripts/sysdeps.sh fuzz
	$(MAKE) BUILD=$(FUZZ_BUILD) CXX=$(FUZZ_CXX) OPT=-O1 FUZZING=1 fuzz-bins

# (run through fuzz-build) The parsers and what they call (core, io, tokenizer, data, the draft and
# checkpoint files) carry coverage and sanitizer instrumentation; the compute code they link in
# (backends, decoding, training, the llama forward) is compiled plainly: not fuzzed, and much faster
# to build.
ifdef FUZZING
SAN := $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_INSTRUMENTED := $(filter $(BUILD)/obj/src/core/% $(BUILD)/obj/src/io/% $(BUILD)/obj/src/tokenizer/% \
                       $(BUILD)/obj/src/data/%, $(OBJ)) $(BUILD)/obj/src/model/draft.o $(BUILD)/obj/src/train/train_loop.o \
                     $(BUILD)/obj/src/serve/openai.o $(BUILD)/obj/src/serve/remote.o
$(filter-out $(FUZZ_INSTRUMENTED), $(OBJ)): SAN := -DBEAGLE_FUZZ
endif
fuzz-bins: $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%)
$(BUILD)/fuzz/fuzz_%: test/fuzz/fuzz_%.cpp $(FUZZ_HDRS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -fsanitize=fuzzer -Isrc -Itest -Itest/unit -o $@ $< $(LIB) $(LDFLAGS) $(HTTPLIB_LIBS)

# The same harnesses as replay programs, and the seed writer, in the normal build.
REPLAY_BIN := $(FUZZ_NAMES:%=$(BUILD)/test/fuzz/replay_%)
$(REPLAY_BIN): $(BUILD)/test/fuzz/replay_%: test/fuzz/fuzz_%.cpp $(FUZZ_HDRS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DFUZZ_REPLAY -Isrc -Itest -Itest/unit -o $@ $< $(LIB) $(LDFLAGS) $(HTTPLIB_LIBS)
$(BUILD)/test/fuzz/make_seeds: test/fuzz/make_seeds.cpp $(FUZZ_HDRS) $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -Isrc -Itest -Itest/unit -o $@ $< $(LIB) $(LDFLAGS)
# Not in sanitizer builds (SAN set by test-asan): make fuzz runs these harnesses under ASan + UBSan already.
tests: $(if $(SAN),,$(REPLAY_BIN) $(BUILD)/test/fuzz/make_seeds)
