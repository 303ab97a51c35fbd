// cuda_emu_graph.cpp -> build/test/test_emu_graph: stream capture and CUDA graphs in the emulator
// (cuda/emu/cudart.cpp). A step of two kernels, a memset and three async copies (cuda/emu/graph.cu)
// captured once and replayed gives, at each replay, the same bytes as the same step run directly
// (input changed between steps through the same pinned buffer; kernel arguments are the captured
// copies); nothing runs while capturing; and the calls the runtime forbids inside a capture fail with
// its errors and invalidate the capture (synchronous copies, allocation, syncing the capturing stream,
// work on the legacy stream while a blocking stream captures), while a relaxed capture allows them.
#include "testlib.h"

#include "../cuda/emu/graph.cu"

#include <vector>

#define CHECK_ERR(expr, want)                                                                         \
    do {                                                                                              \
        const cudaError_t e_ = (expr);                                                                \
        CHECK(e_ == (want), "%s returned %s, want %s (%s)", #expr, cudaGetErrorName(e_), cudaGetErrorName(want), \
              beagle_emu::last_error_detail().c_str());                                              \
    } while (0)

static const int N = 300;  // two 256-thread blocks for graph_axpb_kernel (the second partial)

struct Buffers {
    GraphStep g{};
    float* in = nullptr;  // pinned, N
    Buffers() {
        cudaMallocHost((void**)&in, N * sizeof(float));
        cudaMallocHost((void**)&g.out, (N + 1) * sizeof(float));
        cudaMalloc((void**)&g.x, N * sizeof(float));
        cudaMalloc((void**)&g.y, N * sizeof(float));
        cudaMalloc((void**)&g.acc, N * sizeof(float));
        cudaMalloc((void**)&g.sum, sizeof(float));
        g.in = in;
        g.n = N;
        g.a = 1.5f;
        g.b = -0.25f;
        reset();
    }
    ~Buffers() {
        cudaFreeHost(in);
        cudaFreeHost(g.out);
        for (float* p : {g.x, g.y, g.acc, g.sum}) cudaFree(p);
    }
    void reset() {  // acc = 0, sum = 7 (the memset must clear it), out = -1
        cudaMemset(g.acc, 0, N * sizeof(float));
        const float seven = 7.0f;
        cudaMemcpy(g.sum, &seven, sizeof seven, cudaMemcpyHostToDevice);
        for (int i = 0; i <= N; i++) g.out[i] = -1.0f;
    }
    void set_input(int step) {
        for (int i = 0; i < N; i++) in[i] = (float)((i * 7 + step * 13) % 29 - 14) / 8.0f;
    }
};

// Three steps run directly, then three replays of the captured step: the same n + 1 output floats
// (memcmp) after each, and each replay launches the two kernels.
static void test_replay_equals_direct() {
    cudaStream_t s;
    CHECK_ERR(cudaStreamCreate(&s), cudaSuccess);
    const int steps = 3;
    std::vector<std::vector<float>> direct(steps);
    {
        Buffers b;
        for (int t = 0; t < steps; t++) {
            b.set_input(t);
            graph_step(b.g, s);
            CHECK_ERR(cudaStreamSynchronize(s), cudaSuccess);
            direct[t].assign(b.g.out, b.g.out + N + 1);
        }
        CHECK(direct[1][N] != direct[0][N], "the steps accumulate (sums %g %g)", direct[0][N], direct[1][N]);
    }
    Buffers b;
    b.set_input(0);
    const uint64_t before = beagle_emu::launch_count();
    cudaGraphExec_t exec = nullptr;
    size_t nodes = 0;
    CHECK_ERR(graph_capture_step(b.g, s, &exec, &nodes), cudaSuccess);
    CHECK(nodes == 6, "%zu graph nodes, want 6 (3 copies, 1 memset, 2 kernels)", nodes);
    CHECK(beagle_emu::launch_count() == before, "a kernel ran during capture");
    CHECK(b.g.out[0] == -1.0f && b.g.out[N] == -1.0f, "a copy ran during capture");
    float sum = 0;
    CHECK_ERR(cudaMemcpy(&sum, b.g.sum, sizeof sum, cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK(sum == 7.0f, "the memset ran during capture (sum %g)", sum);
    b.g.a = 100.0f;  // the graph holds the arguments of the capture
    for (int t = 0; t < steps; t++) {
        b.set_input(t);
        const uint64_t l0 = beagle_emu::launch_count();
        CHECK_ERR(cudaGraphLaunch(exec, s), cudaSuccess);
        CHECK_ERR(cudaStreamSynchronize(s), cudaSuccess);
        CHECK(beagle_emu::launch_count() - l0 == 2, "replay %d ran %llu kernels, want 2", t,
              (unsigned long long)(beagle_emu::launch_count() - l0));
        CHECK(memcmp(b.g.out, direct[t].data(), (N + 1) * sizeof(float)) == 0,
              "replay %d differs from the direct step: acc[0] %g vs %g, acc[%d] %g vs %g, sum %g vs %g", t, b.g.out[0],
              direct[t][0], N - 1, b.g.out[N - 1], direct[t][N - 1], b.g.out[N], direct[t][N]);
    }
    CHECK_ERR(cudaGraphExecDestroy(exec), cudaSuccess);
    CHECK_ERR(cudaGraphExecDestroy(exec), cudaErrorInvalidValue);
    CHECK_ERR(cudaGraphLaunch(exec, s), cudaErrorInvalidValue);
    CHECK_ERR(cudaStreamDestroy(s), cudaSuccess);
    cudaGetLastError();
}

// End a capture that a forbidden call broke: no graph, cudaErrorStreamCaptureInvalidated.
static void expect_invalidated(cudaStream_t s, const char* what) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    CHECK_ERR(cudaStreamIsCapturing(s, &st), cudaSuccess);
    CHECK(st == cudaStreamCaptureStatusInvalidated, "%s: capture status %d, want invalidated", what, (int)st);
    cudaGraph_t g = (cudaGraph_t)1;
    CHECK_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    CHECK(g == nullptr, "%s: an invalidated capture gave a graph", what);
    CHECK_ERR(cudaStreamIsCapturing(s, &st), cudaSuccess);
    CHECK(st == cudaStreamCaptureStatusNone, "%s: still capturing after EndCapture", what);
    cudaGetLastError();
}

static void test_capture_rules() {
    Buffers b;
    cudaStream_t s, nb;
    CHECK_ERR(cudaStreamCreate(&s), cudaSuccess);                               // blocking
    CHECK_ERR(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
    float h = 0;
    cudaGraph_t g = nullptr;
    cudaStreamCaptureStatus st;

    // where capture can start and end
    CHECK_ERR(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    CHECK_ERR(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    CHECK_ERR(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);  // not capturing
    CHECK_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    CHECK_ERR(cudaStreamIsCapturing(s, &st), cudaSuccess);
    CHECK(st == cudaStreamCaptureStatusActive, "status %d", (int)st);
    CHECK_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);  // twice
    CHECK_ERR(cudaStreamIsCapturing(0, &st), cudaErrorStreamCaptureImplicit);  // legacy vs. blocking capture
    CHECK_ERR(cudaStreamEndCapture(s, &g), cudaSuccess);  // an empty capture is a valid, empty graph
    size_t n = 99;
    CHECK_ERR(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
    CHECK(n == 0, "empty capture has %zu nodes", n);
    CHECK_ERR(cudaGraphDestroy(g), cudaSuccess);

    // synchronous copy while a blocking stream captures: it runs on the legacy stream
    CHECK_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    CHECK_ERR(cudaMemcpy(&h, b.g.sum, sizeof h, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureImplicit);
    CHECK(beagle_emu::last_error_detail().find("cudaMemcpy") != std::string::npos, "detail names the call: %s",
          beagle_emu::last_error_detail().c_str());
    expect_invalidated(s, "cudaMemcpy, blocking stream");

    // ... and on a non-blocking stream in global mode: a potentially unsafe call
    CHECK_ERR(cudaStreamBeginCapture(nb, cudaStreamCaptureModeGlobal), cudaSuccess);
    CHECK_ERR(cudaMemcpy(&h, b.g.sum, sizeof h, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(nb, "cudaMemcpy, non-blocking stream");

    // allocation inside a global capture
    void* p = nullptr;
    CHECK_ERR(cudaStreamBeginCapture(nb, cudaStreamCaptureModeGlobal), cudaSuccess);
    CHECK_ERR(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
    CHECK(p == nullptr, "cudaMalloc refused but allocated");
    expect_invalidated(nb, "cudaMalloc");

    // waiting for the capturing stream (nothing on it has run)
    CHECK_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    CHECK_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, "cudaStreamSynchronize");
    CHECK_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    CHECK_ERR(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, "cudaDeviceSynchronize");

    // a kernel on the legacy stream while a blocking stream captures: refused, not run
    CHECK_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    KLAUNCH(1, 32, 0, 0, graph_axpb_kernel)(b.g.y, b.g.x, 1.0f, 0.0f, 1);
    CHECK_ERR(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
    expect_invalidated(s, "legacy-stream launch");
    // ... but with a non-blocking capturing stream it runs at once
    b.reset();
    CHECK_ERR(cudaStreamBeginCapture(nb, cudaStreamCaptureModeGlobal), cudaSuccess);
    const uint64_t l0 = beagle_emu::launch_count();
    KLAUNCH(1, GRAPH_THREADS, 0, 0, graph_accumulate_kernel)(b.g.acc, b.g.sum, b.g.y, 0);
    CHECK_ERR(cudaGetLastError(), cudaSuccess);
    CHECK(beagle_emu::launch_count() == l0 + 1, "the legacy-stream kernel did not run");
    CHECK_ERR(cudaStreamEndCapture(nb, &g), cudaSuccess);
    CHECK_ERR(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
    CHECK(n == 0, "the legacy-stream kernel was captured (%zu nodes)", n);
    CHECK_ERR(cudaGraphDestroy(g), cudaSuccess);

    // a launch the runtime rejects inside a capture leaves no usable graph (it would miss a node)
    CHECK_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    KLAUNCH(1, 2048, 0, s, graph_axpb_kernel)(b.g.y, b.g.x, 1.0f, 0.0f, 1);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
    expect_invalidated(s, "bad launch configuration");

    // relaxed mode: allocation and synchronous copies are the caller's business
    CHECK_ERR(cudaStreamBeginCapture(nb, cudaStreamCaptureModeRelaxed), cudaSuccess);
    CHECK_ERR(cudaMalloc(&p, 64), cudaSuccess);
    CHECK_ERR(cudaMemcpy(&h, b.g.sum, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK_ERR(cudaFree(p), cudaSuccess);
    CHECK_ERR(cudaStreamEndCapture(nb, &g), cudaSuccess);
    CHECK_ERR(cudaGraphDestroy(g), cudaSuccess);

    // a graph's own misuse
    cudaGraphExec_t exec = nullptr;
    CHECK_ERR(cudaGraphInstantiate(&exec, nullptr, 0), cudaErrorInvalidValue);
    CHECK_ERR(cudaGraphLaunch(nullptr, s), cudaErrorInvalidValue);
    CHECK_ERR(cudaStreamDestroy(s), cudaSuccess);
    CHECK_ERR(cudaStreamDestroy(nb), cudaSuccess);
    cudaGetLastError();
}

int main() {
    beagle_emu::set_quiet(true);
    test_replay_equals_direct();
    test_capture_rules();
    return test_summary("test_emu_graph");
}
