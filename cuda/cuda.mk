# cuda/cuda.mk: the CUDA backend builds, included by the main Makefile after cuda/emu/emu.mk.
#   make cuda-emu      build/beagle-cuda-emu: the beagle CLI + library with the CUDA backend's host
#                      code (src/backend/gpu/*.cu) compiled by g++ against the CPU emulator runtime
#                      $(CUDAEMU_LIB) and the kernels $(CUDA_EMU_OBJ): every kernel runs on the CPU.
#   make cuda          build/beagle-cuda: the same sources through nvcc for sm_80, sm_86, sm_89, sm_90,
#                      linked with the real CUDA runtime (static). Default backend: cuda.
#   make cuda-device-tests  build/test-device/test_cuda_backend_*: the backend tests linked with the nvcc
#                      objects and the real runtime, for a machine with a GPU (scripts/gpu_check.sh runs them;
#                      not under build/test/, so make test never runs them without a device).
#   make test-kernels  only the kernel tests (test/kernels/cuda_emu_kernels_*.cpp -> build/test/test_emu_kernels_*)
#                      and the coverage check of every __global__ (test/cli/test_cuda_kernel_coverage.sh).
# Tests of the backend as a whole: test/kernels/cuda_backend_*.cpp -> build/test/test_cuda_backend_* (linked
# with libbeagle, the CUDA backend and the emulator), test/cli/test_cuda_*.sh.
CUDA_ARCHS       ?= 80 86 89 90
CUDA_GENCODE     := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
NVCCFLAGS        ?= -std=c++17 -O2 -Xcompiler -pthread,-mavx2,-mfma,-mf16c -Icuda -isystem $(CUDA_HOME)/include/cccl
CUDA_LIBDIR      ?= $(CUDA_HOME)/lib64
CUDA_GPU_SRC     := $(sort $(wildcard src/backend/gpu/*.cu))
CUDA_KERNEL_SRC  := $(sort $(wildcard cuda/*.cu))

# ---- emulator build (g++) ----
CUDA_GPU_EMU_OBJ := $(CUDA_GPU_SRC:%.cu=$(BUILD)/obj/%.emu.o)
$(CUDA_GPU_EMU_OBJ): $(BUILD)/obj/%.emu.o: %.cu
	@mkdir -p $(dir $@)
	$(CXX) $(CUDAEMU_CXXFLAGS) -MMD -MP -x c++ -include cuda/compat.cuh -c $< -o $@

$(BUILD)/beagle-cuda-emu: $(CLI_OBJ) $(CUDA_GPU_EMU_OBJ) $(CUDA_EMU_OBJ) $(LIB) $(CUDAEMU_LIB)
	$(CXX) $(CXXFLAGS) -o $@ $(CLI_OBJ) $(CUDA_GPU_EMU_OBJ) $(CUDA_EMU_OBJ) $(LIB) $(CUDAEMU_LIB) $(LDFLAGS) $(HTTPLIB_LIBS)

# Backend tests: the library, the CUDA backend and the kernels, all on the emulator.
CUDA_BACKEND_TEST_SRC := $(sort $(wildcard test/kernels/cuda_backend_*.cpp))
CUDA_BACKEND_TEST_BIN := $(CUDA_BACKEND_TEST_SRC:test/kernels/cuda_backend_%.cpp=$(BUILD)/test/test_cuda_backend_%)
$(CUDA_BACKEND_TEST_BIN): $(BUILD)/test/test_cuda_backend_%: test/kernels/cuda_backend_%.cpp $(CUDA_GPU_EMU_OBJ) $(CUDA_EMU_OBJ) $(LIB) $(CUDAEMU_LIB) test/testlib.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -Isrc -Itest -MMD -MP -o $@ $< $(CUDA_GPU_EMU_OBJ) $(CUDA_EMU_OBJ) $(LIB) $(CUDAEMU_LIB) $(LDFLAGS)

# The sampling kernel's test compares with the host's warp_dense (src/decode/sampling.cpp): it links the library.
$(BUILD)/test/test_emu_kernels_sample: $(LIB)
$(BUILD)/test/test_emu_kernels_sample: EMU_TEST_LIBS = $(LIB)
# The k-quant kernels' test dequantizes with the host's dequantize_row (src/core/dtype.cpp): it links it too.
$(BUILD)/test/test_emu_kernels_gemm_kquant: $(LIB)
$(BUILD)/test/test_emu_kernels_gemm_kquant: EMU_TEST_LIBS = $(LIB)

# Not in sanitizer builds (the emulator switches stacks).
tests: $(if $(SAN),,$(BUILD)/beagle-cuda-emu $(CUDA_BACKEND_TEST_BIN))

# ---- nvcc build ----
CUDA_NVCC_OBJ := $(CUDA_GPU_SRC:%.cu=$(BUILD)/obj-nvcc/%.o) $(CUDA_KERNEL_SRC:%.cu=$(BUILD)/obj-nvcc/%.o)
$(CUDA_NVCC_OBJ): $(BUILD)/obj-nvcc/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(CUDA_GENCODE) -MMD -MP -c $< -o $@

$(BUILD)/beagle-cuda: $(CLI_OBJ) $(CUDA_NVCC_OBJ) $(LIB)
	$(CXX) $(CXXFLAGS) -o $@ $(CLI_OBJ) $(CUDA_NVCC_OBJ) $(LIB) -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt $(LDFLAGS) $(HTTPLIB_LIBS)

CUDA_DEVICE_TEST_BIN := $(CUDA_BACKEND_TEST_SRC:test/kernels/cuda_backend_%.cpp=$(BUILD)/test-device/test_cuda_backend_%)
$(CUDA_DEVICE_TEST_BIN): $(BUILD)/test-device/test_cuda_backend_%: test/kernels/cuda_backend_%.cpp $(CUDA_NVCC_OBJ) $(LIB) test/testlib.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -Isrc -Itest -o $@ $< $(CUDA_NVCC_OBJ) $(LIB) -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt $(LDFLAGS)

.PHONY: cuda cuda-emu test-kernels cuda-device-tests
cuda-device-tests: $(CUDA_DEVICE_TEST_BIN)
cuda: $(BUILD)/beagle-cuda
cuda-emu: $(BUILD)/beagle-cuda-emu

KERNEL_TEST_BIN := $(filter $(BUILD)/test/test_emu_kernels_%,$(CUDAEMU_TEST_BIN))
test-kernels: $(KERNEL_TEST_BIN)
	rm -f $(BUILD)/kernel-tests/*.log
	bash scripts/run_tests.sh $(BUILD) 'test_emu_kernels_|test_cuda_kernel_coverage'
