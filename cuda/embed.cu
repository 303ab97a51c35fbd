// embed.cu: the token embedding, x[t, :] = E[tokens[t], :] dequantized from the stored table (F32, F16,
// BF16, Q8_0, Q4_0, Q4_1: common.cuh dequant_elem, the formulas of src/core/dtype.cpp). Launched (launch_* at the end) by
// the CUDA backend (src/backend/gpu/: embed); tested by test/kernels/cuda_emu_kernels_rows.cpp.
//
// embed_kernel: one block per token row, threads over the columns. Token ids are checked on the host
//   (they are host arrays in the op interface) before the upload.
// The embedding's backward (scatter-add of the row gradients into dE, duplicates summed in token
// order) is rows_scatter_kernel in rows.cu with accumulate = 1.
// Run-tested under the emulator for every stored type against the host's dequantize_row formulas
// (bit-exact). No PTX paths.
#include "kernels.cuh"

__global__ void embed_kernel(float* x, const uint8_t* E, int dtype, long long row_bytes, const int* tokens, int dim) {
    const long long t = blockIdx.x;
    const uint8_t* row = E + (long long)tokens[t] * row_bytes;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) x[t * dim + i] = dequant_elem(dtype, row, i);
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_embed(float* x, const uint8_t* E, int dtype, long long row_bytes, const int* tokens, int T, int dim,
                  KernelRunner& kr) {
    if (T > 0) KRUN(kr, T, 256, 0, embed_kernel, x, E, dtype, row_bytes, tokens, dim);
}
