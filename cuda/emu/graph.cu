// graph.cu: one fixed-shape "step" of stream work (an upload from pinned memory, two kernels, a memset,
// two downloads into pinned memory), run directly or captured once into a CUDA graph and replayed.
// test/cli/test_cuda_nvcc.sh compiles it with nvcc (the capture and graph calls have the real runtime's
// signatures); test/kernels/cuda_emu_graph.cpp runs it under the emulator: replays == direct runs.
#include "../compat.cuh"

// y[i] = a x[i] + b: one thread per element. a and b are launch arguments, so a graph holds the values
// they had at capture.
__global__ void graph_axpb_kernel(float* y, const float* x, float a, float b, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

// acc[i] += y[i], then *sum += sum_i acc[i] (the new values). One block of GRAPH_THREADS threads: each
// strides over the elements, a shared-memory tree adds the thread partials in a fixed order.
constexpr int GRAPH_THREADS = 128;
__global__ void graph_accumulate_kernel(float* acc, float* sum, const float* y, int n) {
    __shared__ float part[GRAPH_THREADS];
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += GRAPH_THREADS) {
        acc[i] += y[i];
        s += acc[i];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = GRAPH_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) *sum += part[0];
}

struct GraphStep {
    const float* in;  // n floats of pinned host memory: the step's input, read when the step runs
    float* out;       // n + 1 floats of pinned host memory: acc, then sum
    float *x, *y, *acc, *sum;  // device
    int n;
    float a, b;
};

// The step on stream s: in -> x; y = a x + b; sum = 0; acc += y, sum = sum of acc; acc, sum -> out.
// Six stream operations, in this order (the graph's six nodes).
inline void graph_step(const GraphStep& g, cudaStream_t s) {
    cudaMemcpyAsync(g.x, g.in, g.n * sizeof(float), cudaMemcpyHostToDevice, s);
    KLAUNCH((g.n + 255) / 256, 256, 0, s, graph_axpb_kernel)(g.y, g.x, g.a, g.b, g.n);
    cudaMemsetAsync(g.sum, 0, sizeof(float), s);
    KLAUNCH(1, GRAPH_THREADS, 0, s, graph_accumulate_kernel)(g.acc, g.sum, g.y, g.n);
    cudaMemcpyAsync(g.out, g.acc, g.n * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaMemcpyAsync(g.out + g.n, g.sum, sizeof(float), cudaMemcpyDeviceToHost, s);
}

// Captures graph_step on s (which must not be the legacy stream) into an executable graph. The first
// error of the capture is returned (cudaErrorStreamCaptureInvalidated if a call inside broke it).
inline cudaError_t graph_capture_step(const GraphStep& g, cudaStream_t s, cudaGraphExec_t* exec, size_t* nodes) {
    *exec = nullptr;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess) return e;
    graph_step(g, s);
    cudaGraph_t graph = nullptr;
    e = cudaStreamEndCapture(s, &graph);
    if (e != cudaSuccess) return e;
    e = cudaGraphGetNodes(graph, nullptr, nodes);
    if (e == cudaSuccess) e = cudaGraphInstantiate(exec, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph is independent of it
    return e;
}
