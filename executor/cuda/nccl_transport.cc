// The nccl transport (see nccl_transport.h).
#include "executor/cuda/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "executor/cuda/attention_kernels.cuh"
#include "executor/cuda/nccl_comm.h"
#include "executor/posting_phases.h"

namespace rm::gpu {

namespace {

constexpr int kCreateTag = 0x7e11;  // MPI_Comm_create_group's tag


std::string ring_name(const std::vector<int>& members) {
  std::string s = "ring [";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) s += ' ';
    s += std::to_string(members[i]);
  }
  return s + "]";
}

// One ring's communicator and the stream its transfers run on, shared by every transport
// of the process that connects the same group. No destructor: its resources go at
// MPI_Finalize (destroy) or after a failure (abort), never at static destruction, when
// the peers and the CUDA runtime may be gone.
struct Ring {
  std::vector<int> members;  // world ranks by position (= NCCL rank)
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;

  // Gives up on everything in flight (kernels waiting for a dead peer end).
  void abort() {
    if (comm != nullptr) ncclCommAbort(comm);
    if (stream != nullptr) cudaStreamDestroy(stream);
    comm = nullptr;
    stream = nullptr;
  }
  // Normal end: ncclCommFinalize completes what was issued and synchronises with the
  // ring's other ranks (they finalize too), then ncclCommDestroy frees the rest locally
  // (nccl.h). Errors are ignored: the process is finishing.
  void destroy() {
    if (comm != nullptr) {
      ncclCommFinalize(comm);
      ncclCommDestroy(comm);
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
    comm = nullptr;
    stream = nullptr;
  }
};

// The process's rings by group. A std::map: every rank walks it in the same (key) order,
// so two ranks that share two rings finalize them in the same order.
std::map<std::vector<int>, std::shared_ptr<Ring>>& rings() {
  static std::map<std::vector<int>, std::shared_ptr<Ring>> all;
  return all;
}

void abort_rings() {
  for (auto& [group, ring] : rings()) ring->abort();
  rings().clear();
}

// MPI_Finalize first frees MPI_COMM_SELF, which calls the delete callbacks of its
// attributes (MPI-3.1 section 8.7.1, "Allowing User Functions at Process Termination"):
// the one place where MPI, CUDA and every peer are still up at the end of any program
// that uses the backend (ringmaster run, calibrate, the GPU tests).
int destroy_rings(MPI_Comm, int, void*, void*) {
  for (auto& [group, ring] : rings()) ring->destroy();
  rings().clear();
  return MPI_SUCCESS;
}

void destroy_rings_at_finalize() {
  static bool registered = false;
  if (registered) return;
  int key = MPI_KEYVAL_INVALID;
  check_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, destroy_rings, &key, nullptr),
            "MPI_Comm_create_keyval (NCCL teardown)");
  check_mpi(MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr), "MPI_Comm_set_attr (NCCL teardown)");
  registered = true;
}

// Collective over `members` (ranks of `world`): their communicator, NCCL rank = the
// rank's position in `members`.
std::shared_ptr<Ring> create_ring(MPI_Comm world, const std::vector<int>& members) {
  const int P = static_cast<int>(members.size());
  MPI_Group world_group = MPI_GROUP_NULL, ring_group = MPI_GROUP_NULL;
  check_mpi(MPI_Comm_group(world, &world_group), "MPI_Comm_group");
  check_mpi(MPI_Group_incl(world_group, P, members.data(), &ring_group), "MPI_Group_incl");
  MPI_Comm ring_comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_create_group(world, ring_group, kCreateTag, &ring_comm),
            "MPI_Comm_create_group (" + ring_name(members) + ")");
  MPI_Group_free(&ring_group);
  MPI_Group_free(&world_group);
  // MPI_Group_incl keeps the list's order, so the ring communicator's rank is the position.
  auto ring = std::make_shared<Ring>();
  ring->members = members;
  try {
    // Lower numbers are greater priorities (cudaDeviceGetStreamPriorityRange).
    int least = 0, greatest = 0;
    RM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                  "cudaDeviceGetStreamPriorityRange");
    RM_CUDA_CHECK(cudaStreamCreateWithPriority(&ring->stream, cudaStreamNonBlocking, greatest),
                  "cudaStreamCreate (communication stream)");
    ring->comm = nccl_comm_of(ring_comm, ring_name(members));
  } catch (...) {
    MPI_Comm_free(&ring_comm);
    ring->abort();
    throw;
  }
  MPI_Comm_free(&ring_comm);
  return ring;
}

class NcclTransport final : public Transport {
 public:
  explicit NcclTransport(MPI_Comm comm) : comm_(comm) {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  }

  ~NcclTransport() override {
    // Destructors do not throw. Transfers still on the device would write into buffers
    // the backend is about to free, and may wait for a peer that is gone: abort them.
    bool in_flight = false;
    for (const Request& r : requests_)
      if (r.active && r.group >= 0 && cudaEventQuery(groups_[r.group].event) != cudaSuccess)
        in_flight = true;
    if (in_flight) abort_rings();
    for (Group& g : groups_) cudaEventDestroy(g.event);
  }

  std::string name() const override { return "nccl"; }

  void connect(const std::vector<int>& group) override {
    for (const Request& r : requests_)
      if (r.active)
        throw std::logic_error("nccl transport: connect() with transfers in flight");
    position_in_group(group, rank_);  // checks: no rank twice, this rank a member
    nccl_rank_.clear();
    for (size_t i = 0; i < group.size(); ++i) nccl_rank_[group[i]] = static_cast<int>(i);
    ring_.reset();
    if (group.size() < 2) return;  // a ring of one: no transfers, no communicator
    destroy_rings_at_finalize();
    auto it = rings().find(group);
    if (it == rings().end()) it = rings().emplace(group, create_ring(comm_, group)).first;
    ring_ = it->second;
  }

  void begin_phase() override {
    phases_.begin();
    issue();  // posts made outside a phase go first, as their own group
  }

  void end_phase() override {
    phases_.end();
    issue();
  }

  int isend(const DeviceRegion& region, int peer, int tag) override {
    return post(true, region, peer, tag);
  }
  int irecv(const DeviceRegion& region, int peer, int tag) override {
    return post(false, region, peer, tag);
  }

  bool test(int request) override {
    Request& r = active(request);
    if (r.group < 0) {
      phases_.check_wait(r.phase);
      issue();
    }
    const cudaError_t e = cudaEventQuery(groups_[r.group].event);
    if (e == cudaSuccess) {
      complete(request);
      return true;
    }
    if (e != cudaErrorNotReady) check_cuda(e, describe(request).c_str(), __FILE__, __LINE__);
    check_nccl_async(live_ring().comm, describe(request));
    return false;
  }

  void progress() override {
    if (!phases_.open()) issue();  // NCCL itself progresses on its own (kernels, proxy thread)
  }

  std::string describe(int request) const override {
    const Request& r = requests_.at(static_cast<size_t>(request));
    const int src = r.send ? rank_ : r.peer, dst = r.send ? r.peer : rank_;
    std::string s = std::string(r.send ? "ncclSend of " : "ncclRecv of ") +
                    std::to_string(r.region.bytes) + " bytes " + (r.send ? "to" : "from") +
                    " rank " + std::to_string(r.peer) + " (tag " + std::to_string(r.tag) +
                    "): message " + std::to_string(r.index) + " on link " + std::to_string(src) +
                    " -> " + std::to_string(dst);
    if (r.group < 0) return s + ", not yet issued";
    s += ", NCCL group " + std::to_string(groups_[r.group].number);
    if (ring_) s += " on " + ring_name(ring_->members);
    return s + "; NCCL pairs it with message " + std::to_string(r.index) +
           " of that link whatever its tag and size (the cpu backend and the local transport "
           "check the message contract)";
  }

  void abort() override {
    pending_.clear();
    phases_.reset();
    for (size_t i = 0; i < requests_.size(); ++i)
      if (requests_[i].active) complete(static_cast<int>(i));
    abort_rings();
    ring_.reset();
  }

 private:
  struct Request {
    bool active = false;  // posted, not yet completed by test()
    bool send = false;
    DeviceRegion region;
    int peer = -1, tag = 0;
    long long index = 0;  // message number on its link
    int group = -1;       // index into groups_ once issued
    long long phase = -1;  // PostingPhases::posted() when it was posted
  };
  // The requests issued by one ncclGroupStart/End and the event recorded after it.
  struct Group {
    cudaEvent_t event = nullptr;
    int open = 0;          // its requests not yet completed
    long long number = 0;  // groups issued by this transport before it
  };

  int post(bool send, const DeviceRegion& region, int peer, int tag) {
    if (peer == rank_ || nccl_rank_.count(peer) == 0)
      throw std::logic_error("nccl transport on " + error_context() + ": a transfer " +
                             (send ? "to" : "from") + " rank " + std::to_string(peer) +
                             ", which is not another member of this rank's ring");
    const int id = take_slot(requests_, free_);
    Request& r = requests_[static_cast<size_t>(id)];
    r = Request{true, send, region, peer, tag, counters_.next(!send, peer), -1, phases_.posted()};
    pending_.push_back(id);
    return id;
  }

  Ring& live_ring() {
    if (!ring_ || ring_->comm == nullptr)
      throw CudaError("nccl transport on " + error_context() +
                      ": no communicator (connect() was not called with a ring of two or more, "
                      "or the transport was aborted)");
    return *ring_;
  }

  int new_group() {
    int g = -1;
    for (size_t i = 0; i < groups_.size() && g < 0; ++i)
      if (groups_[i].open == 0) g = static_cast<int>(i);
    if (g < 0) {
      groups_.emplace_back();
      g = static_cast<int>(groups_.size()) - 1;
      RM_CUDA_CHECK(cudaEventCreateWithFlags(&groups_[g].event, cudaEventDisableTiming),
                    "cudaEventCreate (transfer group)");
    }
    groups_[g].number = groups_issued_++;
    return g;
  }

  // Issues the pending posts as one group on the communication stream.
  void issue() {
    if (pending_.empty()) return;
    Ring& ring = live_ring();
    const int g = new_group();
    RM_NCCL_CHECK(ncclGroupStart(), ring.comm, "ncclGroupStart");
    // A failed call leaves the group's earlier calls in it, and they launch at ncclGroupEnd;
    // after a failed group NCCL wants its communicators aborted (user guide, "Error
    // handling"): abort the rings, so nothing waits on a peer or writes a freed buffer.
    auto fail = [&](ncclResult_t res, const std::string& op) {
      const std::string reason = nccl_error_reason(res, ring.comm);
      abort_rings();
      throw_cuda_error(op.c_str(), reason, __FILE__, __LINE__);
    };
    for (int id : pending_) {
      const Request& r = requests_[static_cast<size_t>(id)];
      const int peer = nccl_rank_.at(r.peer);
      const ncclResult_t res =
          r.send ? ncclSend(r.region.ptr(), r.region.bytes, ncclUint8, peer, ring.comm, ring.stream)
                 : ncclRecv(r.region.ptr(), r.region.bytes, ncclUint8, peer, ring.comm, ring.stream);
      if (res != ncclSuccess && res != ncclInProgress) {
        ncclGroupEnd();  // close the group before reporting; its own error is the same
        fail(res, describe(id));
      }
    }
    if (const ncclResult_t res = ncclGroupEnd(); res != ncclSuccess && res != ncclInProgress)
      fail(res, "ncclGroupEnd (" + std::to_string(pending_.size()) + " transfers)");
    RM_CUDA_CHECK(cudaEventRecord(groups_[g].event, ring.stream), "cudaEventRecord (transfers)");
    for (int id : pending_) requests_[static_cast<size_t>(id)].group = g;
    groups_[g].open = static_cast<int>(pending_.size());
    pending_.clear();
  }

  Request& active(int request) {
    if (request < 0 || request >= static_cast<int>(requests_.size()) ||
        !requests_[static_cast<size_t>(request)].active)
      throw std::logic_error("nccl transport: request " + std::to_string(request) +
                             " is not in flight");
    return requests_[static_cast<size_t>(request)];
  }

  void complete(int request) {
    Request& r = requests_[static_cast<size_t>(request)];
    if (r.group >= 0) --groups_[r.group].open;
    r.active = false;
    r.group = -1;
    free_.push_back(request);
  }

  MPI_Comm comm_;
  int rank_ = 0;
  std::map<int, int> nccl_rank_;  // world rank -> NCCL rank (ring position)
  std::shared_ptr<Ring> ring_;
  exec::PostingPhases phases_{"nccl"};
  std::vector<int> pending_;      // posted, not yet issued, in posting order
  std::vector<Request> requests_;
  std::vector<int> free_;
  std::vector<Group> groups_;
  long long groups_issued_ = 0;
  LinkCounters counters_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm) {
  return std::make_unique<NcclTransport>(comm);
}

}  // namespace rm::gpu
