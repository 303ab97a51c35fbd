// dynlib.h: a shared library loaded at run time (dlopen) and its symbols (dlsym), for the engines a
// binary uses only in some runs (MPI under mpirun: core/comm.cpp; NCCL over several GPUs:
// backend/gpu/comm_nccl.cu), so that a run without them needs none of their libraries installed.
#pragma once
#include <string>

namespace beagle {

class DynLib {
public:
    // Loads `soname` with RTLD_NOW | RTLD_GLOBAL (plug-ins of the library resolve against it); never
    // unloaded. Error: "<why> needs <soname>, which cannot be loaded (<dlerror>); <install>".
    DynLib(const char* soname, const char* why, const char* install);
    void* symbol(const char* name) const;  // Error naming the symbol and the library when absent
    template <class F>
    void get(F& f, const char* name) const { f = reinterpret_cast<F>(symbol(name)); }

private:
    void* handle_ = nullptr;
    std::string soname_;
};

}  // namespace beagle
