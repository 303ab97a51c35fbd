// nccl.cpp: the emulator's stand-in for the few NCCL calls Beagle uses (src/backend/gpu/comm_nccl.cu):
// unique id, init, send/recv in a group, destroy, error strings, with the types of the toolkit's
// nccl.h. "Device" memory is host memory here, and the ranks are processes on one machine, so a
// message is a file: ncclGroupEnd writes each send to <id>.<from>.<to>.<n> (tmp + rename, so a
// reader never sees half of it), then waits for each receive's file, reads and deletes it. Sends never
// block, so paired send/recv in a group cannot deadlock. The id names a fresh directory-less prefix
// in /dev/shm (or /tmp); rank 0 makes it, the caller broadcasts it (as with real NCCL).
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emu.h"

struct ncclComm {
    std::string prefix;
    int nranks = 0, rank = 0;
    std::map<std::pair<int, int>, long> seq;  // (from, to) -> messages so far
};

namespace {

struct Op {
    bool send;
    void* buf;
    size_t bytes;
    int peer;
    ncclComm_t comm;
    cudaStream_t stream;
};
int g_depth = 0;
std::vector<Op> g_ops;

size_t type_bytes(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
        default: return 0;
    }
}

std::string msg_path(ncclComm_t c, int from, int to, long n) {
    return c->prefix + "." + std::to_string(from) + "." + std::to_string(to) + "." + std::to_string(n);
}

ncclResult_t do_send(const Op& op) {
    if (cudaStreamSynchronize(op.stream) != cudaSuccess) return ncclUnhandledCudaError;  // the data is written
    std::string path = msg_path(op.comm, op.comm->rank, op.peer, op.comm->seq[{op.comm->rank, op.peer}]++);
    std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) return ncclSystemError;
    bool ok = fwrite(op.buf, 1, op.bytes, f) == op.bytes;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) return ncclSystemError;
    return ncclSuccess;
}

ncclResult_t do_recv(const Op& op) {
    std::string path = msg_path(op.comm, op.peer, op.comm->rank, op.comm->seq[{op.peer, op.comm->rank}]++);
    auto t0 = std::chrono::steady_clock::now();
    FILE* f;
    while (!(f = fopen(path.c_str(), "rb"))) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(600)) return ncclRemoteError;  // peer gone
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    bool ok = fread(op.buf, 1, op.bytes, f) == op.bytes && fgetc(f) == EOF;
    fclose(f);
    unlink(path.c_str());
    return ok ? ncclSuccess : ncclSystemError;
}

ncclResult_t run_ops() {
    std::vector<Op> ops;
    ops.swap(g_ops);
    for (const Op& op : ops)
        if (op.send)
            if (ncclResult_t r = do_send(op)) return r;
    for (const Op& op : ops)
        if (!op.send)
            if (ncclResult_t r = do_recv(op)) return r;
    return ncclSuccess;
}

ncclResult_t enqueue(bool send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                     cudaStream_t stream) {
    if (!comm || peer < 0 || peer >= comm->nranks || peer == comm->rank || !type_bytes(t)) return ncclInvalidArgument;
    g_ops.push_back({send, const_cast<void*>(buf), count * type_bytes(t), peer, comm, stream});
    return g_depth > 0 ? ncclSuccess : run_ops();
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    std::random_device rd;
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string p = std::string(dir) + "/beagle-nccl-emu-" + std::to_string(getpid()) + "-" + std::to_string(rd());
    if (p.size() >= sizeof(id->internal)) return ncclInternalError;
    memset(id->internal, 0, sizeof(id->internal));
    memcpy(id->internal, p.c_str(), p.size());
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks || !id.internal[0]) return ncclInvalidArgument;
    ncclComm* c = new ncclComm();
    c->prefix.assign(id.internal, strnlen(id.internal, sizeof(id.internal)));
    c->nranks = nranks;
    c->rank = rank;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
    return enqueue(true, buf, count, t, peer, comm, stream);
}

ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
    return enqueue(false, buf, count, t, peer, comm, stream);
}

ncclResult_t ncclGroupStart() {
    g_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (g_depth <= 0) return ncclInvalidUsage;
    return --g_depth > 0 ? ncclSuccess : run_ops();
}

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (emulator stand-in)";
        case ncclSystemError: return "system error: a message file could not be written or read (emulator stand-in)";
        case ncclInvalidArgument: return "invalid argument (emulator stand-in)";
        case ncclInvalidUsage: return "invalid usage (emulator stand-in)";
        case ncclRemoteError: return "remote error: no message from the peer in 600 s (emulator stand-in)";
        default: return "error (emulator stand-in)";
    }
}

}  // extern "C"
