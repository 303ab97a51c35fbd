// backend.cpp: run-time backend choice (backend.h). The CUDA backend's factory make_cuda_ops()
// (src/backend/gpu/ops_cuda.cu) is referenced weakly: binaries built with it (make cuda, make
// cuda-emu) link its definition; the plain CPU build leaves it null and reports so.
#include "backend.h"

#include <cstring>

#include "../core/common.h"

namespace beagle {

std::unique_ptr<Ops> make_cuda_ops() __attribute__((weak));
std::unique_ptr<Comm> make_nccl_comm(Comm& host) __attribute__((weak));

static std::string g_selected;

bool has_cuda_backend() { return make_cuda_ops != nullptr; }
const char* default_backend() { return has_cuda_backend() ? "cuda" : "cpu"; }
void select_backend(const std::string& name) {
    if (name != "cpu" && name != "cuda") fail("--backend must be cpu or cuda, got '%s'", name.c_str());
    g_selected = name;
}
std::string selected_backend() { return g_selected.empty() ? std::string(default_backend()) : g_selected; }

std::unique_ptr<Ops> make_ops(const std::string& backend, int n_threads) {
    const std::string b = backend.empty() ? selected_backend() : backend;
    if (b == "cpu") return make_cpu_ops(n_threads);
    if (b == "cuda") {
        if (!has_cuda_backend())
            fail("this binary was built without CUDA: --backend cuda needs build/beagle-cuda (make cuda) or the CPU "
                 "emulator build build/beagle-cuda-emu (make cuda-emu)");
        return make_cuda_ops();
    }
    fail("unknown backend '%s' (expected cpu or cuda)", b.c_str());
}

std::unique_ptr<Comm> make_device_comm(Ops& ops, Comm& host) {
    if (host.size() == 1 || strcmp(ops.name(), "cuda") != 0) return nullptr;
    BEAGLE_CHECK(make_nccl_comm != nullptr, "the CUDA backend of this binary has no NCCL communicator");
    return make_nccl_comm(host);
}

}  // namespace beagle
