// comm_nccl.cu: the device communicator of the CUDA backend (backend.h make_device_comm): gradient
// exchanges between GPUs (one per rank) with NCCL's grouped ncclSend/ncclRecv on the default stream;
// broadcast and barrier of host memory go over the host communicator (MPI), which also carries NCCL's
// unique id from rank 0. NCCL is loaded with dlopen (libnccl.so.2) only by a run of several ranks,
// so one process needs no NCCL; the emulator build links the project's stand-in (cuda/emu/nccl.cpp).
#include <nccl.h>

#include "../../core/comm.h"
#include "../../core/common.h"
#include "../../core/dynlib.h"

namespace beagle {

namespace {

struct NcclApi {
    decltype(&ncclGetUniqueId) GetUniqueId;
    decltype(&ncclCommInitRank) CommInitRank;
    decltype(&ncclCommDestroy) CommDestroy;
    decltype(&ncclSend) Send;
    decltype(&ncclRecv) Recv;
    decltype(&ncclGroupStart) GroupStart;
    decltype(&ncclGroupEnd) GroupEnd;
    decltype(&ncclGetErrorString) GetErrorString;
};

#if BEAGLE_CUDA_EMULATOR
NcclApi load_nccl() {
    return {ncclGetUniqueId, ncclCommInitRank, ncclCommDestroy, ncclSend, ncclRecv, ncclGroupStart, ncclGroupEnd, ncclGetErrorString};
}
#else
NcclApi load_nccl() {
    static const DynLib lib("libnccl.so.2", "training on several ranks on the CUDA backend",
                            "it comes with the CUDA toolkit (or apt-get install libnccl2)");
    NcclApi a;
    lib.get(a.GetUniqueId, "ncclGetUniqueId");
    lib.get(a.CommInitRank, "ncclCommInitRank");
    lib.get(a.CommDestroy, "ncclCommDestroy");
    lib.get(a.Send, "ncclSend");
    lib.get(a.Recv, "ncclRecv");
    lib.get(a.GroupStart, "ncclGroupStart");
    lib.get(a.GroupEnd, "ncclGroupEnd");
    lib.get(a.GetErrorString, "ncclGetErrorString");
    return a;
}
#endif

class NcclComm : public Comm {
public:
    explicit NcclComm(Comm& host) : host_(host), nccl_(load_nccl()) {
        ncclUniqueId id;
        if (host.rank() == 0) check(nccl_.GetUniqueId(&id), "ncclGetUniqueId");
        host.broadcast(&id, sizeof(id), 0);
        check(nccl_.CommInitRank(&comm_, host.size(), id, host.rank()), "ncclCommInitRank");
    }
    ~NcclComm() override {
        if (comm_) nccl_.CommDestroy(comm_);
    }
    const char* name() const override { return "nccl"; }
    int rank() const override { return host_.rank(); }
    int size() const override { return host_.size(); }
    bool device_buffers() const override { return true; }
    void exchange(const void* send, size_t send_bytes, void* recv, size_t recv_bytes, int peer) override {
        check(nccl_.GroupStart(), "ncclGroupStart");
        if (send_bytes) check(nccl_.Send(send, send_bytes, ncclInt8, peer, comm_, 0), "ncclSend");
        if (recv_bytes) check(nccl_.Recv(recv, recv_bytes, ncclInt8, peer, comm_, 0), "ncclRecv");
        check(nccl_.GroupEnd(), "ncclGroupEnd");
        cudaError_t e = cudaStreamSynchronize(0);
        if (e != cudaSuccess) fail("NCCL exchange with rank %d: %s", peer, cudaGetErrorString(e));
    }
    void broadcast(void* buf, size_t bytes, int root) override { host_.broadcast(buf, bytes, root); }
    void barrier() override { host_.barrier(); }

private:
    void check(ncclResult_t r, const char* what) {
        if (r != ncclSuccess) fail("%s failed on rank %d of %d: %s", what, host_.rank(), host_.size(), nccl_.GetErrorString(r));
    }
    Comm& host_;
    NcclApi nccl_;
    ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(Comm& host) { return std::unique_ptr<Comm>(new NcclComm(host)); }

}  // namespace beagle
