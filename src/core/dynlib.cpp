// dynlib.cpp: dlopen / dlsym with errors that name the library (dynlib.h), for the engines loaded at
// run time only (MPI: comm.cpp; NCCL: src/backend/gpu/comm_nccl.cu).
#include "dynlib.h"

#include <dlfcn.h>

#include "common.h"

namespace beagle {

DynLib::DynLib(const char* soname, const char* why, const char* install) : soname_(soname) {
    handle_ = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
    if (!handle_) fail("%s needs %s, which cannot be loaded (%s); %s", why, soname, dlerror(), install);
}

void* DynLib::symbol(const char* name) const {
    void* p = dlsym(handle_, name);
    if (!p) fail("%s has no symbol %s (%s)", soname_.c_str(), name, dlerror());
    return p;
}

}  // namespace beagle
