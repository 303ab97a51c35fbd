// backend.h: choosing the op backend (src/backend/ops.h) at run time. Every binary has the CPU
// backend; build/beagle-cuda and build/beagle-cuda-emu also link the CUDA backend (src/backend/gpu/,
// make_cuda_ops) and then default to it. Called by the CLI (--backend) and the Session.
#pragma once
#include <memory>
#include <string>

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

}  // namespace beagle
