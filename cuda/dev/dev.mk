# cuda/dev/dev.mk: the kernel progressions cuda/dev/*.cu (naive version -> shipped kernel, one file per
# op, see cuda/dev/README.md), included by the main Makefile after cuda/emu/emu.mk.
#   make cuda-dev   builds build/dev/<op> from every cuda/dev/<op>.cu for the CPU emulator (compiled as
#                   C++ with cuda/compat.cuh forced in, linked with $(CUDAEMU_LIB)) and runs them all:
#                   one line "<op> v<N> ok max_err <e>" per version; fails if any version fails.
# The binaries are also built by `make tests` and run by test/cli/test_cuda_dev.sh; test/cli/test_cuda_nvcc.sh
# compiles the same files with nvcc (sm_80, sm_90).
CUDA_DEV_SRC := $(sort $(wildcard cuda/dev/*.cu))
CUDA_DEV_BIN := $(CUDA_DEV_SRC:cuda/dev/%.cu=$(BUILD)/dev/%)
# run in the reading order of cuda/dev/README.md, then any other file
CUDA_DEV_ORDER := $(addprefix $(BUILD)/dev/,matmul qmatmul attention xattn)
CUDA_DEV_RUN := $(filter $(CUDA_DEV_BIN),$(CUDA_DEV_ORDER)) $(filter-out $(CUDA_DEV_ORDER),$(CUDA_DEV_BIN))

$(CUDA_DEV_BIN): $(BUILD)/dev/%: cuda/dev/%.cu $(CUDAEMU_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CUDAEMU_CXXFLAGS) -MMD -MP -x c++ -include cuda/compat.cuh -o $@ $< -x none $(CUDAEMU_LIB) $(LDFLAGS)

.PHONY: cuda-dev
cuda-dev: $(CUDA_DEV_BIN)
	@for b in $(CUDA_DEV_RUN); do $$b || exit 1; done

# Not in sanitizer builds (the emulator switches stacks).
tests: $(if $(SAN),,$(CUDA_DEV_BIN))
