// backend.h: choosing the op backend (src/backend/ops.h) at run time. Every binary has the CPU
// backend; build/beagle-cuda and build/beagle-cuda-emu also link the CUDA backend (src/backend/gpu/,
// make_cuda_ops) and then default to it. Called by the CLI (--backend) and the Session.
#pragma once
#include <memory>
#include <string>

#include "../core/comm.h"
#include "ops.h"

namespace beagle {

// "cpu" or "cuda"; "" = the selected backend (select_backend), else default_backend().
// "cuda" in a binary without the CUDA backend: Error "this binary was built without CUDA ...";
// on a machine without a usable GPU: Error "no CUDA device found (...)".
std::unique_ptr<Ops> make_ops(const std::string& backend, int n_threads);
bool has_cuda_backend();                        // this binary links the CUDA backend
const char* default_backend();                  // "cuda" if has_cuda_backend(), else "cpu"
void select_backend(const std::string& name);   // what make_ops("") returns; Error unless "cpu" or "cuda"
std::string selected_backend();                 // the selected name, or default_backend()

// The communicator of backend buffers for a data-parallel run over `host`'s ranks: NCCL on the CUDA
// backend (src/backend/gpu/comm_nccl.cu; the project's stand-in cuda/emu/nccl.cpp in the emulator
// build), none (nullptr: host memory goes over `host` itself) on the CPU backend or in one process.
std::unique_ptr<Comm> make_device_comm(Ops& ops, Comm& host);

}  // namespace beagle
