// The nccl transport (see nccl_transport.h).
#include "executor/cuda/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <set>
#include <string>
#include <utility>

#include "executor/cuda/attention_kernels.cuh"

namespace rm::gpu {

namespace {

constexpr int kIdTag = 0x7e11;  // MPI tag of the ncclUniqueId handshake

void check_nccl(ncclResult_t r, ncclComm_t comm, const std::string& op, const char* file,
                int line) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string reason = ncclGetErrorString(r);
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0')
    reason += std::string(" (") + last + ")";
  throw_cuda_error(op.c_str(), reason, file, line);
}
#define RM_NCCL_CHECK(expr, comm, op) check_nccl((expr), (comm), (op), __FILE__, __LINE__)

void check_mpi(int rc, const std::string& op) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_cuda_error(op.c_str(), std::string(msg, static_cast<size_t>(len)), __FILE__, __LINE__);
}

struct Link {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

// Directed links by (from, to) rank, for the life of the process (see the header).
std::map<std::pair<int, int>, Link>& links() {
  static std::map<std::pair<int, int>, Link> all;
  return all;
}

class NcclTransport final : public Transport {
 public:
  explicit NcclTransport(MPI_Comm comm) : comm_(comm) {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  }
  ~NcclTransport() override {
    for (Request& r : requests_)
      if (r.event != nullptr) cudaEventDestroy(r.event);
  }

  std::string name() const override { return "nccl"; }

  void connect(const std::vector<int>& peers) override {
    std::vector<int> fresh;
    for (int p : std::set<int>(peers.begin(), peers.end()))
      if (p != rank_ && links().count({rank_, p}) == 0) fresh.push_back(p);
    if (fresh.empty()) return;
    // The sending end of each link draws its id; sends first, so no rank blocks in a
    // receive before its own ids are on their way.
    std::vector<ncclUniqueId> out_ids(fresh.size()), in_ids(fresh.size());
    std::vector<MPI_Request> sends(fresh.size());
    for (size_t i = 0; i < fresh.size(); ++i) {
      RM_NCCL_CHECK(ncclGetUniqueId(&out_ids[i]), nullptr, "ncclGetUniqueId");
      check_mpi(MPI_Isend(&out_ids[i], sizeof(ncclUniqueId), MPI_BYTE, fresh[i], kIdTag, comm_,
                          &sends[i]),
                "MPI_Isend of the NCCL id to rank " + std::to_string(fresh[i]));
    }
    for (size_t i = 0; i < fresh.size(); ++i)
      check_mpi(MPI_Recv(&in_ids[i], sizeof(ncclUniqueId), MPI_BYTE, fresh[i], kIdTag, comm_,
                         MPI_STATUS_IGNORE),
                "MPI_Recv of the NCCL id from rank " + std::to_string(fresh[i]));
    check_mpi(MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall (NCCL ids)");

    std::vector<Link> out(fresh.size()), in(fresh.size());
    RM_NCCL_CHECK(ncclGroupStart(), nullptr, "ncclGroupStart (links)");
    for (size_t i = 0; i < fresh.size(); ++i) {
      // In a link's 2-rank communicator the sender is rank 0 and the receiver rank 1.
      RM_NCCL_CHECK(ncclCommInitRank(&out[i].comm, 2, out_ids[i], 0), nullptr,
                    "ncclCommInitRank (link to rank " + std::to_string(fresh[i]) + ")");
      RM_NCCL_CHECK(ncclCommInitRank(&in[i].comm, 2, in_ids[i], 1), nullptr,
                    "ncclCommInitRank (link from rank " + std::to_string(fresh[i]) + ")");
    }
    RM_NCCL_CHECK(ncclGroupEnd(), nullptr, "ncclGroupEnd (links)");
    for (size_t i = 0; i < fresh.size(); ++i) {
      RM_CUDA_CHECK(cudaStreamCreateWithFlags(&out[i].stream, cudaStreamNonBlocking),
                    "cudaStreamCreate (link stream)");
      RM_CUDA_CHECK(cudaStreamCreateWithFlags(&in[i].stream, cudaStreamNonBlocking),
                    "cudaStreamCreate (link stream)");
      links()[{rank_, fresh[i]}] = out[i];
      links()[{fresh[i], rank_}] = in[i];
    }
  }

  int isend(const DeviceRegion& region, int peer, int tag) override {
    Link& l = link(rank_, peer);
    const int id = new_request(l, true, region.bytes, peer, tag);
    RM_NCCL_CHECK(ncclSend(region.ptr(), region.bytes, ncclUint8, 1, l.comm, l.stream), l.comm,
                  "ncclSend to rank " + std::to_string(peer));
    RM_CUDA_CHECK(cudaEventRecord(requests_[id].event, l.stream), "cudaEventRecord (send)");
    return id;
  }

  int irecv(const DeviceRegion& region, int peer, int tag) override {
    Link& l = link(peer, rank_);
    const int id = new_request(l, false, region.bytes, peer, tag);
    RM_NCCL_CHECK(ncclRecv(region.ptr(), region.bytes, ncclUint8, 0, l.comm, l.stream), l.comm,
                  "ncclRecv from rank " + std::to_string(peer));
    RM_CUDA_CHECK(cudaEventRecord(requests_[id].event, l.stream), "cudaEventRecord (recv)");
    return id;
  }

  bool test(int request) override {
    Request& r = requests_.at(static_cast<size_t>(request));
    const cudaError_t e = cudaEventQuery(r.event);
    if (e == cudaSuccess) {
      r.active = false;
      free_.push_back(request);
      return true;
    }
    if (e != cudaErrorNotReady) check_cuda(e, describe(request).c_str(), __FILE__, __LINE__);
    ncclResult_t async = ncclSuccess;
    RM_NCCL_CHECK(ncclCommGetAsyncError(r.link->comm, &async), r.link->comm,
                  "ncclCommGetAsyncError");
    RM_NCCL_CHECK(async, r.link->comm, describe(request));
    return false;
  }

  void progress() override {}  // NCCL progresses on its own (kernels and proxy thread)

  std::string describe(int request) const override {
    const Request& r = requests_.at(static_cast<size_t>(request));
    return std::string(r.send ? "ncclSend of " : "ncclRecv of ") + std::to_string(r.bytes) +
           " bytes " + (r.send ? "to" : "from") + " rank " + std::to_string(r.peer) + " (tag " +
           std::to_string(r.tag) + ")";
  }

  void abort() override {
    // Aborting frees every link; later transfers would need a new connect().
    for (auto& [key, l] : links()) ncclCommAbort(l.comm);
    links().clear();
  }

 private:
  struct Request {
    cudaEvent_t event = nullptr;
    Link* link = nullptr;
    bool active = false;
    bool send = false;
    size_t bytes = 0;
    int peer = -1, tag = 0;
  };

  Link& link(int from, int to) {
    auto it = links().find({from, to});
    if (it == links().end())
      throw CudaError("nccl transport on " + error_context() + ": no link from rank " +
                      std::to_string(from) + " to rank " + std::to_string(to) +
                      " (connect() was not called with that peer)");
    return it->second;
  }

  int new_request(Link& l, bool send, size_t bytes, int peer, int tag) {
    int id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = static_cast<int>(requests_.size());
      requests_.emplace_back();
      RM_CUDA_CHECK(cudaEventCreateWithFlags(&requests_.back().event, cudaEventDisableTiming),
                    "cudaEventCreate (transfer)");
    }
    Request& r = requests_[static_cast<size_t>(id)];
    r.link = &l;
    r.active = true;
    r.send = send;
    r.bytes = bytes;
    r.peer = peer;
    r.tag = tag;
    return id;
  }

  MPI_Comm comm_;
  int rank_ = 0;
  std::vector<Request> requests_;
  std::vector<int> free_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm) {
  return std::make_unique<NcclTransport>(comm);
}

}  // namespace rm::gpu
