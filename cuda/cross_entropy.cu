// cross_entropy.cu: softmax cross-entropy over vocabulary chunks (never a whole n x vocab softmax in
// memory), with soft labels (the target's distribution, the Beagle loss) or token labels; forward and
// backward in one pass per chunk. Launched (launch_* at the end) by the CUDA backend (src/backend/gpu/: lse_update,
// ce_soft_chunk, ce_hard_chunk); tested by test/kernels/cuda_emu_kernels_loss.cpp.
//
// lse_update_kernel: one block per row r of the chunk z (n x C): mx = max(m[r], max_c z) (block_max),
//   s[r] = s[r] exp(m[r] - mx) + sum_c exp(z - mx) (block_sum), m[r] = mx: the online logsumexp.
// ce_soft_kernel: one block per row: with lse_t = m_t + log s_t and lse_d likewise,
//   p = exp(zt - lse_t), log q = zd - lse_d; loss[r] += -scale sum_c p log q (block_sum);
//   dz = scale (q - p) (assigned).
// ce_hard_kernel: one block per row: dz = scale (q - onehot(label - v0)); loss[r] += scale (lse_d - zd[label])
//   when the label falls in this chunk (vocab ids v0 .. v0 + C - 1).
// Block size fixed by the backend (256): one reduction order per row. Run-tested under the emulator with
// ragged chunk widths (C = 1, 37, 300) and block sizes 32/256/1024 against a double reference, and the
// chunked result against the one-chunk softmax. No PTX paths.
#include "kernels.cuh"

__global__ void lse_update_kernel(float* m, float* s, const float* z, int C) {
    __shared__ float red[33];
    const long long r = blockIdx.x;
    const float* zr = z + r * C;
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, zr[c]);
    mx = fmaxf(block_max(mx, red), m[r]);
    float sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) sum += expf(zr[c] - mx);
    sum = block_sum(sum, red);
    if (threadIdx.x == 0) {
        const float old = m[r] == -INFINITY ? 0.0f : s[r] * expf(m[r] - mx);
        s[r] = old + sum;
        m[r] = mx;
    }
}

__global__ void ce_soft_kernel(float* dz, float* loss, const float* zt, const float* zd, const float* m_t,
                               const float* s_t, const float* m_d, const float* s_d, int C, float scale) {
    __shared__ float red[33];
    const long long r = blockIdx.x;
    const float lt = m_t[r] + logf(s_t[r]), ld = m_d[r] + logf(s_d[r]);
    float acc = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const long long k = r * C + c;
        const float p = expf(zt[k] - lt), logq = zd[k] - ld;
        acc = fmaf(p, logq, acc);
        dz[k] = scale * (expf(logq) - p);
    }
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) loss[r] += -scale * acc;
}

__global__ void ce_hard_kernel(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d,
                               const int* labels, int v0, int C, float scale) {
    const long long r = blockIdx.x;
    const float ld = m_d[r] + logf(s_d[r]);
    const int label = labels[r];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const long long k = r * C + c;
        dz[k] = scale * (expf(zd[k] - ld) - (v0 + c == label ? 1.0f : 0.0f));
    }
    const int c = label - v0;
    if (threadIdx.x == 0 && c >= 0 && c < C) loss[r] += scale * (ld - zd[r * C + c]);
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
// One block of 256 threads per row: a fixed block size, one reduction order per row.
void launch_lse_update(float* m, float* s, const float* z, int n, int C, KernelRunner& kr) {
    if (n > 0) KRUN(kr, n, 256, 0, lse_update_kernel, m, s, z, C);
}

void launch_ce_soft(float* dz, float* loss, const float* zt, const float* zd, const float* m_t, const float* s_t,
                    const float* m_d, const float* s_d, int n, int C, float scale, KernelRunner& kr) {
    if (n > 0) KRUN(kr, n, 256, 0, ce_soft_kernel, dz, loss, zt, zd, m_t, s_t, m_d, s_d, C, scale);
}

void launch_ce_hard(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d, const int* labels, int v0,
                    int n, int C, float scale, KernelRunner& kr) {
    if (n > 0) KRUN(kr, n, 256, 0, ce_hard_kernel, dz, loss, zd, m_d, s_d, labels, v0, C, scale);
}
