// comm.cpp: SingleComm and the MPI communicator (comm.h). MPI is OpenMPI's C ABI, loaded with dlopen
// only when mpirun started this process: MPI_Comm and MPI_Datatype are pointers to the library's
// predefined objects (ompi_mpi_comm_world, ompi_mpi_byte), looked up with dlsym like the functions.
// A rank that fails (an Error unwinding past the communicator) skips MPI_Finalize; the CLI prints the
// error and calls abort_parallel_run (MPI_Abort), so the other ranks stop too instead of waiting forever
// in an exchange.
#include "comm.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <exception>

#include "common.h"
#include "dynlib.h"

namespace beagle {

bool launched_by_mpirun() { return getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

int env_local_rank() {
    const char* s = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    return s ? atoi(s) : 0;
}

namespace {

class SingleComm : public Comm {
public:
    const char* name() const override { return "single"; }
    int rank() const override { return 0; }
    int size() const override { return 1; }
    void exchange(const void*, size_t, void*, size_t, int peer) override { fail("exchange with rank %d in a single-process run", peer); }
    void broadcast(void*, size_t, int) override {}
    void barrier() override {}
};

// The few MPI calls used, with OpenMPI's types (handles are pointers to library objects).
typedef void* MPI_Handle;
struct MpiApi {
    int (*Init)(int*, char***) = nullptr;
    int (*Initialized)(int*) = nullptr;
    int (*Finalize)() = nullptr;
    int (*Abort)(MPI_Handle, int) = nullptr;
    int (*Comm_rank)(MPI_Handle, int*) = nullptr;
    int (*Comm_size)(MPI_Handle, int*) = nullptr;
    int (*Sendrecv)(const void*, int, MPI_Handle, int, int, void*, int, MPI_Handle, int, int, MPI_Handle, void*) = nullptr;
    int (*Bcast)(void*, int, MPI_Handle, int, MPI_Handle) = nullptr;
    int (*Barrier)(MPI_Handle) = nullptr;
    MPI_Handle world = nullptr, byte = nullptr;
};

MpiApi load_mpi() {
    // RTLD_GLOBAL (DynLib): OpenMPI's own plug-ins (mca_*.so) resolve their symbols against libmpi.
    static const DynLib lib("libmpi.so.40", "a run launched by mpirun (OpenMPI 4 or 5)",
                            "install it with apt-get install openmpi-bin (scripts/sysdeps.sh test)");
    MpiApi a;
    lib.get(a.Init, "MPI_Init");
    lib.get(a.Initialized, "MPI_Initialized");
    lib.get(a.Finalize, "MPI_Finalize");
    lib.get(a.Abort, "MPI_Abort");
    lib.get(a.Comm_rank, "MPI_Comm_rank");
    lib.get(a.Comm_size, "MPI_Comm_size");
    lib.get(a.Sendrecv, "MPI_Sendrecv");
    lib.get(a.Bcast, "MPI_Bcast");
    lib.get(a.Barrier, "MPI_Barrier");
    a.world = lib.symbol("ompi_mpi_comm_world");  // MPI_COMM_WORLD, MPI_BYTE: addresses of library objects
    a.byte = lib.symbol("ompi_mpi_byte");
    return a;
}

const MpiApi* g_live = nullptr;  // the initialized, not finalized MPI (abort_parallel_run)

// MPI counts are int: large buffers go in pieces of at most 1 GiB.
const size_t kMaxPiece = (size_t)1 << 30;

class MpiComm : public Comm {
public:
    MpiComm() : mpi_(load_mpi()) {
        g_live = &mpi_;
        // Ranks waiting in an exchange yield the core instead of spinning (they often share cores,
        // as under --oversubscribe); the user's own setting wins.
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
        int inited = 0;
        mpi_.Initialized(&inited);
        if (!inited) check(mpi_.Init(nullptr, nullptr), "MPI_Init");
        check(mpi_.Comm_rank(mpi_.world, &rank_), "MPI_Comm_rank");
        check(mpi_.Comm_size(mpi_.world, &size_), "MPI_Comm_size");
    }
    ~MpiComm() override {
        // An Error is unwinding (this rank failed): no MPI_Finalize (it would wait for the other ranks);
        // the CLI reports the error, then abort_parallel_run stops every rank.
        if (std::uncaught_exceptions() > 0) return;
        g_live = nullptr;
        mpi_.Finalize();
    }
    const char* name() const override { return "mpi"; }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void exchange(const void* send, size_t send_bytes, void* recv, size_t recv_bytes, int peer) override {
        BEAGLE_CHECK(peer >= 0 && peer < size_ && peer != rank_, "MPI exchange: bad peer %d (rank %d of %d)", peer, rank_, size_);
        for (size_t off = 0; off < std::max(send_bytes, recv_bytes); off += kMaxPiece) {
            int ns = (int)std::min(kMaxPiece, send_bytes - std::min(off, send_bytes));
            int nr = (int)std::min(kMaxPiece, recv_bytes - std::min(off, recv_bytes));
            check(mpi_.Sendrecv((const char*)send + std::min(off, send_bytes), ns, mpi_.byte, peer, 0,
                                (char*)recv + std::min(off, recv_bytes), nr, mpi_.byte, peer, 0, mpi_.world, nullptr),
                  "MPI_Sendrecv");
        }
    }
    void broadcast(void* buf, size_t bytes, int root) override {
        for (size_t off = 0; off < bytes; off += kMaxPiece)
            check(mpi_.Bcast((char*)buf + off, (int)std::min(kMaxPiece, bytes - off), mpi_.byte, root, mpi_.world), "MPI_Bcast");
    }
    void barrier() override { check(mpi_.Barrier(mpi_.world), "MPI_Barrier"); }

private:
    void check(int rc, const char* what) {
        if (rc != 0) fail("%s failed (MPI error %d) on rank %d", what, rc, rank_);
    }
    MpiApi mpi_;
    int rank_ = 0, size_ = 1;
};

}  // namespace

void abort_parallel_run(int code) {
    if (g_live) g_live->Abort(g_live->world, code);
}

std::unique_ptr<Comm> make_single_comm() { return std::unique_ptr<Comm>(new SingleComm()); }

std::unique_ptr<Comm> make_comm() {
    if (!launched_by_mpirun()) return make_single_comm();
    return std::unique_ptr<Comm>(new MpiComm());
}

}  // namespace beagle
