// The local transport (see local_transport.h).
#include "executor/cuda/local_transport.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "executor/cuda/attention_kernels.cuh"

namespace rm::gpu {

namespace {

constexpr int kDoneTag = 1;

void check_mpi(int rc, const std::string& op) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_cuda_error(op.c_str(), std::string(msg, static_cast<size_t>(len)), __FILE__, __LINE__);
}

struct Descriptor {
  cudaIpcMemHandle_t handle;
  uint64_t offset;
  uint64_t bytes;
  uint64_t seq;
};

class LocalTransport final : public Transport {
 public:
  explicit LocalTransport(MPI_Comm comm) {
    check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_dup(comm, &desc_comm_), "MPI_Comm_dup (local transport)");
    check_mpi(MPI_Comm_dup(comm, &done_comm_), "MPI_Comm_dup (local transport)");
    RM_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking),
                  "cudaStreamCreate (copy stream)");
  }

  ~LocalTransport() override {
    // Destructors do not throw: failures here only leak until the process exits.
    cudaStreamSynchronize(copy_stream_);
    for (Request& r : requests_)
      if (r.event != nullptr) cudaEventDestroy(r.event);
    for (auto& [key, ptr] : opened_) cudaIpcCloseMemHandle(ptr);
    cudaStreamDestroy(copy_stream_);
    for (auto& d : done_sends_) MPI_Wait(&d.request, MPI_STATUS_IGNORE);
    MPI_Comm_free(&desc_comm_);
    MPI_Comm_free(&done_comm_);
  }

  std::string name() const override { return "local"; }
  void connect(const std::vector<int>&) override {}  // nothing to set up per peer

  int isend(const DeviceRegion& region, int peer, int tag) override {
    const int id = new_request(true, region, peer, tag);
    Request& r = requests_[static_cast<size_t>(id)];
    r.desc.handle = export_handle(region.base);
    r.desc.offset = region.offset;
    r.desc.bytes = region.bytes;
    r.desc.seq = next_seq_++;
    check_mpi(MPI_Isend(&r.desc, sizeof(Descriptor), MPI_BYTE, peer, tag, desc_comm_, &r.mpi),
              "MPI_Isend (descriptor to rank " + std::to_string(peer) + ")");
    r.state = State::kAwaitDone;
    return id;
  }

  int irecv(const DeviceRegion& region, int peer, int tag) override {
    const int id = new_request(false, region, peer, tag);
    Request& r = requests_[static_cast<size_t>(id)];
    check_mpi(MPI_Irecv(&r.desc, sizeof(Descriptor), MPI_BYTE, peer, tag, desc_comm_, &r.mpi),
              "MPI_Irecv (descriptor from rank " + std::to_string(peer) + ")");
    r.state = State::kAwaitDescriptor;
    return id;
  }

  bool test(int request) override {
    progress();
    Request& r = requests_.at(static_cast<size_t>(request));
    if (r.state != State::kDone) return false;
    r.state = State::kFree;
    free_.push_back(request);
    return true;
  }

  void progress() override {
    receive_dones();
    for (size_t i = 0; i < requests_.size(); ++i) advance(requests_[i]);
    // Retire finished "done" messages.
    for (auto it = done_sends_.begin(); it != done_sends_.end();) {
      int flag = 0;
      check_mpi(MPI_Test(&it->request, &flag, MPI_STATUS_IGNORE), "MPI_Test (done message)");
      it = flag ? done_sends_.erase(it) : std::next(it);
    }
  }

  std::string describe(int request) const override {
    const Request& r = requests_.at(static_cast<size_t>(request));
    const char* stage = r.state == State::kAwaitDescriptor ? "waiting for the sender"
                        : r.state == State::kCopying       ? "copying"
                        : r.state == State::kAwaitDone     ? "waiting for the receiver's copy"
                                                           : "done";
    return std::string(r.send ? "local send of " : "local recv of ") +
           std::to_string(r.region.bytes) + " bytes " + (r.send ? "to" : "from") + " rank " +
           std::to_string(r.peer) + " (tag " + std::to_string(r.tag) + ", " + stage + ")";
  }

  void abort() override {
    for (Request& r : requests_)
      if (r.state == State::kAwaitDescriptor || r.state == State::kAwaitDone) {
        MPI_Cancel(&r.mpi);
        r.state = State::kFree;
      }
  }

 private:
  enum class State { kFree, kAwaitDescriptor, kCopying, kAwaitDone, kDone };
  struct Request {
    State state = State::kFree;
    bool send = false;
    DeviceRegion region;
    int peer = -1, tag = 0;
    Descriptor desc{};
    MPI_Request mpi = MPI_REQUEST_NULL;
    bool desc_sent = false;  // sender: the descriptor's MPI_Isend has completed
    cudaEvent_t event = nullptr;
  };
  struct DoneSend {
    uint64_t seq;
    MPI_Request request;
  };

  int new_request(bool send, const DeviceRegion& region, int peer, int tag) {
    int id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = static_cast<int>(requests_.size());
      requests_.emplace_back();
      RM_CUDA_CHECK(cudaEventCreateWithFlags(&requests_.back().event, cudaEventDisableTiming),
                    "cudaEventCreate (copy)");
    }
    Request& r = requests_[static_cast<size_t>(id)];
    r.send = send;
    r.region = region;
    r.peer = peer;
    r.tag = tag;
    r.desc_sent = false;
    r.mpi = MPI_REQUEST_NULL;
    return id;
  }

  cudaIpcMemHandle_t export_handle(void* base) {
    auto it = exported_.find(base);
    if (it != exported_.end()) return it->second;
    cudaIpcMemHandle_t h;
    RM_CUDA_CHECK(cudaIpcGetMemHandle(&h, base), "cudaIpcGetMemHandle (local transport)");
    exported_[base] = h;
    return h;
  }

  char* import_handle(const cudaIpcMemHandle_t& h) {
    const std::string key(reinterpret_cast<const char*>(&h), sizeof h);
    auto it = opened_.find(key);
    if (it != opened_.end()) return static_cast<char*>(it->second);
    void* p = nullptr;
    RM_CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
                  "cudaIpcOpenMemHandle (local transport)");
    opened_[key] = p;
    return static_cast<char*>(p);
  }

  void receive_dones() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, kDoneTag, done_comm_, &flag, &st), "MPI_Iprobe");
      if (!flag) return;
      uint64_t seq = 0;
      check_mpi(MPI_Recv(&seq, 1, MPI_UINT64_T, st.MPI_SOURCE, kDoneTag, done_comm_,
                         MPI_STATUS_IGNORE),
                "MPI_Recv (done message)");
      done_seqs_.insert(seq);
    }
  }

  void advance(Request& r) {
    switch (r.state) {
      case State::kAwaitDone: {
        if (!r.desc_sent) {
          int flag = 0;
          check_mpi(MPI_Test(&r.mpi, &flag, MPI_STATUS_IGNORE), "MPI_Test (descriptor send)");
          r.desc_sent = flag != 0;
        }
        auto it = done_seqs_.find(r.desc.seq);
        if (r.desc_sent && it != done_seqs_.end()) {
          done_seqs_.erase(it);
          r.state = State::kDone;
        }
        return;
      }
      case State::kAwaitDescriptor: {
        int flag = 0;
        check_mpi(MPI_Test(&r.mpi, &flag, MPI_STATUS_IGNORE), "MPI_Test (descriptor recv)");
        if (!flag) return;
        if (r.desc.bytes != r.region.bytes)
          throw CudaError("local transport on " + error_context() + ": rank " +
                          std::to_string(r.peer) + " sent " + std::to_string(r.desc.bytes) +
                          " bytes with tag " + std::to_string(r.tag) + " but the receive is for " +
                          std::to_string(r.region.bytes) + " bytes");
        const char* src = import_handle(r.desc.handle) + r.desc.offset;
        RM_CUDA_CHECK(cudaMemcpyAsync(r.region.ptr(), src, r.region.bytes,
                                      cudaMemcpyDeviceToDevice, copy_stream_),
                      "cudaMemcpyAsync (local transport)");
        RM_CUDA_CHECK(cudaEventRecord(r.event, copy_stream_), "cudaEventRecord (copy)");
        r.state = State::kCopying;
        return;
      }
      case State::kCopying: {
        const cudaError_t e = cudaEventQuery(r.event);
        if (e == cudaErrorNotReady) return;
        RM_CUDA_CHECK(e, "local transport copy");
        done_sends_.push_back({r.desc.seq, MPI_REQUEST_NULL});
        DoneSend& d = done_sends_.back();
        check_mpi(MPI_Isend(&d.seq, 1, MPI_UINT64_T, r.peer, kDoneTag, done_comm_, &d.request),
                  "MPI_Isend (done message to rank " + std::to_string(r.peer) + ")");
        r.state = State::kDone;
        return;
      }
      default:
        return;
    }
  }

  int rank_ = 0;
  MPI_Comm desc_comm_ = MPI_COMM_NULL, done_comm_ = MPI_COMM_NULL;
  cudaStream_t copy_stream_ = nullptr;
  std::deque<Request> requests_;  // a deque: MPI keeps pointers to each request's desc
  std::vector<int> free_;
  uint64_t next_seq_ = 0;
  std::multiset<uint64_t> done_seqs_;
  std::list<DoneSend> done_sends_;  // a list: MPI keeps pointers to each entry's seq
  std::map<void*, cudaIpcMemHandle_t> exported_;
  std::map<std::string, void*> opened_;
};

}  // namespace

std::unique_ptr<Transport> make_local_transport(MPI_Comm comm) {
  return std::make_unique<LocalTransport>(comm);
}

}  // namespace rm::gpu
