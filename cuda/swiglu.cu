// swiglu.cu: the SwiGLU activation out = silu(gate) * up, forward and backward. Launched (launch_* at the end) by the CUDA
// backend (src/backend/gpu/: swiglu, swiglu_bwd); tested by test/kernels/cuda_emu_kernels_rows.cpp.
//
// swiglu_fwd_kernel: element-wise, grid-stride: out = g * (1 / (1 + exp(-g))) * u (the CPU formula).
// swiglu_bwd_kernel: element-wise: with sig = 1 / (1 + exp(-g)),
//   dup = dout * g * sig,  dgate = dout * u * sig * (1 + g (1 - sig))  (both assigned).
// Run-tested under the emulator (odd lengths, large |gate|) against a double reference. No PTX paths.
#include "kernels.cuh"

__global__ void swiglu_fwd_kernel(float* out, const float* gate, const float* up, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float g = gate[i];
        out[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
    }
}

__global__ void swiglu_bwd_kernel(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                  long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float g = gate[i], sig = 1.0f / (1.0f + expf(-g));
        const float d = dout[i], u = up[i];
        dup[i] = d * g * sig;
        dgate[i] = d * u * sig * (1.0f + g * (1.0f - sig));
    }
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_swiglu(float* out, const float* gate, const float* up, long long n, KernelRunner& kr) {
    if (n > 0) KRUN(kr, elementwise_grid(n), 256, 0, swiglu_fwd_kernel, out, gate, up, n);
}

void launch_swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long long n,
                       KernelRunner& kr) {
    if (n > 0) KRUN(kr, elementwise_grid(n), 256, 0, swiglu_bwd_kernel, dgate, dup, dout, gate, up, n);
}
