# cuda/emu/emu.mk: build rules of the CPU emulator of CUDA, included by the main Makefile
# (`include cuda/emu/emu.mk` after BUILD, CXX, CXXFLAGS, LDFLAGS are set).
#   $(CUDAEMU_LIB)       build/libcudaemu.a: the emulator runtime (scheduler + CUDA runtime API on
#                        host memory) from cuda/emu/*.cpp; link it instead of libcudart.
#   $(CUDAEMU_CXXFLAGS)  flags to compile kernel files (cuda/*.cu) or their tests as C++ for it:
#                        $(CXX) $(CUDAEMU_CXXFLAGS) -x c++ -include cuda/compat.cuh -c x.cu
#   $(CUDA_EMU_OBJ)      every cuda/*.cu compiled for the emulator: build/obj/cuda/X.emu.o (for
#                        `make cuda-emu`: link them with the backend's host code and $(CUDAEMU_LIB)).
#   test/kernels/cuda_emu_X.cpp -> build/test/test_emu_X (picked up by scripts/run_tests.sh), added to `tests`.
#   make cuda-nvcc-check compiles every cuda/*.cu with nvcc for sm_80 and sm_90 (compile gate; the
#                        test test/cli/test_cuda_nvcc.sh does the same inside `make test`).
CUDA_HOME        ?= /usr/local/cuda
NVCC             ?= $(CUDA_HOME)/bin/nvcc
CUDAEMU_INC      := -isystem $(CUDA_HOME)/include -isystem $(CUDA_HOME)/include/cccl -Icuda
CUDAEMU_CXXFLAGS := $(CXXFLAGS) $(CUDAEMU_INC)
CUDAEMU_SRC      := $(sort $(wildcard cuda/emu/*.cpp))
CUDAEMU_OBJ      := $(CUDAEMU_SRC:%.cpp=$(BUILD)/obj/%.o)
CUDAEMU_LIB      := $(BUILD)/libcudaemu.a
CUDAEMU_TEST_SRC := $(sort $(wildcard test/kernels/cuda_emu_*.cpp))
CUDAEMU_TEST_BIN := $(CUDAEMU_TEST_SRC:test/kernels/cuda_emu_%.cpp=$(BUILD)/test/test_emu_%)

$(CUDAEMU_OBJ): $(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CUDAEMU_CXXFLAGS) -MMD -MP -c $< -o $@

$(CUDAEMU_LIB): $(CUDAEMU_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Kernel files as C++ objects for the emulator.
CUDA_EMU_SRC := $(sort $(wildcard cuda/*.cu))
CUDA_EMU_OBJ := $(CUDA_EMU_SRC:%.cu=$(BUILD)/obj/%.emu.o)
$(CUDA_EMU_OBJ): $(BUILD)/obj/%.emu.o: %.cu
	@mkdir -p $(dir $@)
	$(CXX) $(CUDAEMU_CXXFLAGS) -MMD -MP -x c++ -include cuda/compat.cuh -c $< -o $@

# Emulator tests: one binary per test file, kernels compiled as C++ with the compat header forced in.
# EMU_TEST_LIBS: libraries one test links besides the emulator (a target-specific variable, cuda/cuda.mk).
$(CUDAEMU_TEST_BIN): $(BUILD)/test/test_emu_%: test/kernels/cuda_emu_%.cpp $(CUDAEMU_LIB) test/testlib.h
	@mkdir -p $(dir $@)
	$(CXX) $(CUDAEMU_CXXFLAGS) -Isrc -Itest -MMD -MP -x c++ -include cuda/compat.cuh -o $@ $< -x none $(EMU_TEST_LIBS) $(CUDAEMU_LIB) $(LDFLAGS)

# Not in sanitizer builds (SAN set by test-asan): ASan does not follow the emulator's stack switches.
tests: $(if $(SAN),,$(CUDAEMU_TEST_BIN))

# nvcc compile gate: every cuda/*.cu, cuda/emu/*.cu and cuda/dev/*.cu for sm_80 and sm_90 (objects thrown away).
.PHONY: cuda-nvcc-check
cuda-nvcc-check:
	bash test/cli/test_cuda_nvcc.sh
