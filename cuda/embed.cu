// embed.cu: the token embedding, x[t, :] = E[tokens[t], :] dequantized from the stored table (F32, F16,
// BF16, Q8_0, Q4_0, Q4_1: common.cuh dequant_elem, the formulas of src/core/dtype.cpp). Launched (launch_* at the end) by
// the CUDA backend (src/backend/gpu/: embed); tested by test/kernels/cuda_emu_kernels_rows.cpp.
//
// embed_kernel: one block per token row, threads over the columns. Row of token t: tokens[t], or
//   map[tokens[t]] when map is not null (the greedy chain: ids written on the device by topk_kernel
//   into a reduced draft vocabulary, map = its d2t table on the device, so no id visits the host
//   between draft steps). Host token ids are checked on the host before the upload; device ids are in
//   range by construction (argmax < the head's rows; d2t checked at load). The map costs one int read
//   per row, the same for every thread of the block (a broadcast from L1).
// The embedding's backward (scatter-add of the row gradients into dE, duplicates summed in token
// order) is rows_scatter_kernel in rows.cu with accumulate = 1.
// Run-tested under the emulator for every stored type against the host's dequantize_row formulas
// (bit-exact). No PTX paths.
#include "kernels.cuh"

__global__ void embed_kernel(float* x, const uint8_t* E, int dtype, long long row_bytes, const int* tokens,
                             const int* map, int dim) {
    const long long t = blockIdx.x;
    const int id = map ? map[tokens[t]] : tokens[t];
    const uint8_t* row = E + (long long)id * row_bytes;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) x[t * dim + i] = dequant_elem(dtype, row, i);
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_embed(float* x, const uint8_t* E, int dtype, long long row_bytes, const int* tokens, const int* map, int T,
                  int dim, KernelRunner& kr) {
    if (T > 0) KRUN(kr, T, 256, 0, embed_kernel, x, E, dtype, row_bytes, tokens, map, dim);
}
