// rope.cu: rotary position embedding, forward and backward (adjacent-pair convention: the pairs
// (x[2i], x[2i+1]) of each head, docs/method.md / src/io/llama_config.h). Launched (launch_* at the end) by the CUDA backend
// (src/backend/gpu/: the op rope, forward and inverse); tested by
// test/kernels/cuda_emu_kernels_rows.cpp.
//
// rope_kernel: one thread per (buffer, row t, head h, pair i): angle = pos[t] * freq[i] (float, as the CPU
//   backend), (v0, v1) <- (v0 c - v1 s, v0 s + v1 c). Two buffers at the same positions in one launch
//   (the target's q with n_heads heads and k with n_kv_heads: the first T n_heads hd/2 threads rotate
//   x, the rest x2), so a layer's RoPE is one launch, not two; x2 may be null (n_heads2 = 0). Each pair
//   is rotated by the same code whichever buffer it is in: the same bits as two launches.
//   freq[] (head_dim / 2 inverse frequencies, with Llama-3 scaling when the model has it) is computed
//   once on the host by the CPU backend's CpuOps::rope_freqs and uploaded, so both backends rotate by
//   the same float angles. inverse = 1 rotates by minus the angle: RoPE is orthogonal, so that is its
//   backward (dx = R^T dy).
// Run-tested under the emulator (odd head counts, head_dim 8..128, Llama-3 scaled frequencies) against a
// double reference, including inverse(forward(x)) == x, and two buffers in one launch bit for bit
// against one launch each. No PTX paths.
#include "kernels.cuh"

__global__ void rope_kernel(float* x, int n_heads, float* x2, int n_heads2, const int* pos, const float* freq, int T,
                            int head_dim, int inverse) {
    const int half = head_dim / 2;
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n1 = (long long)T * n_heads * half;
    if (idx >= n1) {  // the second buffer
        idx -= n1;
        x = x2;
        n_heads = n_heads2;
        if (idx >= (long long)T * n_heads * half) return;
    }
    const int i = (int)(idx % half);
    const long long th = idx / half;  // t * n_heads + h
    const int t = (int)(th / n_heads);
    const float angle = (float)pos[t] * freq[i];
    const float c = cosf(angle);
    const float s = inverse ? -sinf(angle) : sinf(angle);
    float* v = x + th * head_dim + 2 * i;
    const float v0 = v[0], v1 = v[1];
    v[0] = v0 * c - v1 * s;
    v[1] = v0 * s + v1 * c;
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_rope(float* x, int n_heads, float* x2, int n_heads2, const int* pos, const float* freq, int T, int head_dim,
                 bool inverse, KernelRunner& kr) {
    kcheck(kr, head_dim > 0 && head_dim % 2 == 0, "rope: head_dim %d must be even and positive", head_dim);
    kcheck(kr, n_heads >= 0 && n_heads2 >= 0 && (x2 || n_heads2 == 0), "rope: bad second buffer (%d heads)", n_heads2);
    const long long n = (long long)T * (n_heads + n_heads2) * (head_dim / 2);
    if (T <= 0 || n <= 0) return;
    if (n_heads == 0) {  // the kernel's first buffer must have heads (t = th / n_heads)
        x = x2;
        n_heads = n_heads2;
        x2 = nullptr;
        n_heads2 = 0;
    }
    KRUN(kr, (int)((n + 255) / 256), 256, 0, rope_kernel, x, n_heads, x2, n_heads2, pos, freq, T, head_dim,
         inverse ? 1 : 0);
}
