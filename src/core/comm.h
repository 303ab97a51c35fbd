// comm.h: the communicator of data-parallel runs (docs/distributed.md): rank, size, a paired exchange
// with one peer, broadcast, barrier. One process: SingleComm (needs nothing). Under mpirun: MPI, loaded
// at run time (dlopen of OpenMPI's libmpi.so.40), so a binary started without mpirun needs no MPI at all.
// The CUDA backend adds a device communicator over NCCL (src/backend/gpu/comm_nccl.cu).
#pragma once
#include <cstddef>
#include <memory>

namespace beagle {

class Comm {
public:
    virtual ~Comm() = default;
    virtual const char* name() const = 0;  // "single", "mpi", "nccl"
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // Sends send_bytes from `send` to rank `peer` and receives recv_bytes from it into `recv` (the peer's
    // send_bytes), both at once (no deadlock when both sides call it). The buffers are host memory, or
    // device memory for a device communicator (device_buffers()).
    virtual void exchange(const void* send, size_t send_bytes, void* recv, size_t recv_bytes, int peer) = 0;
    virtual void broadcast(void* buf, size_t bytes, int root) = 0;  // host memory
    virtual void barrier() = 0;
    virtual bool device_buffers() const { return false; }
};

// The process's communicator: MPI when launched by mpirun (OMPI_COMM_WORLD_SIZE set), else SingleComm.
// MPI requested but not loadable: Error naming the library and how to install it.
std::unique_ptr<Comm> make_comm();
std::unique_ptr<Comm> make_single_comm();
bool launched_by_mpirun();  // OMPI_COMM_WORLD_SIZE or PMI_SIZE in the environment
// After an error on this rank: stop every rank of an MPI run (MPI_Abort); nothing in a single process.
void abort_parallel_run(int code);
// The global rank and the node-local rank from mpirun's environment (0 when not launched by it).
int env_local_rank();

}  // namespace beagle
