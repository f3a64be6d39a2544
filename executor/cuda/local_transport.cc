// The local transport (see local_transport.h).
#include "executor/cuda/local_transport.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "executor/cuda/attention_kernels.cuh"
#include "executor/posting_phases.h"
#include "planner/message_contract.h"

namespace rm::gpu {

namespace {

// MPI tags, each on its own duplicate of the world communicator. Every descriptor travels
// on the one descriptor tag: pairing by posting order (see the header).
constexpr int kDescriptorTag = 1;
constexpr int kDoneTag = 1;

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CopyEngine::Handle),
              "CopyEngine::Handle must hold a cudaIpcMemHandle_t");

class CudaCopyEngine final : public CopyEngine {
 public:
  CudaCopyEngine() {
    RM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                  "cudaStreamCreate (copy stream)");
  }
  ~CudaCopyEngine() override {
    // Destructors do not throw: failures here only leak until the process exits.
    cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (auto& [key, ptr] : opened_) cudaIpcCloseMemHandle(ptr);
    cudaStreamDestroy(stream_);
  }

  Handle export_allocation(void* base) override {
    auto it = exported_.find(base);
    if (it != exported_.end()) return it->second;
    cudaIpcMemHandle_t h;
    RM_CUDA_CHECK(cudaIpcGetMemHandle(&h, base), "cudaIpcGetMemHandle (local transport)");
    Handle out;
    std::memcpy(out.bytes, &h, sizeof h);
    exported_[base] = out;
    return out;
  }

  char* open_allocation(const Handle& handle) override {
    const std::string key(handle.bytes, sizeof handle.bytes);
    auto it = opened_.find(key);
    if (it != opened_.end()) return static_cast<char*>(it->second);
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.bytes, sizeof h);
    void* p = nullptr;
    RM_CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
                  "cudaIpcOpenMemHandle (local transport)");
    opened_[key] = p;
    return static_cast<char*>(p);
  }

  int start_copy(void* dst, const void* src, std::size_t bytes) override {
    const int ticket = take_slot(events_, free_);
    cudaEvent_t& event = events_[static_cast<size_t>(ticket)];
    if (event == nullptr)
      RM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                    "cudaEventCreate (copy)");
    RM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
                  "cudaMemcpyAsync (local transport)");
    RM_CUDA_CHECK(cudaEventRecord(event, stream_), "cudaEventRecord (copy)");
    return ticket;
  }

  bool copy_done(int ticket) override {
    const cudaError_t e = cudaEventQuery(events_.at(static_cast<size_t>(ticket)));
    if (e == cudaErrorNotReady) return false;
    RM_CUDA_CHECK(e, "local transport copy");
    free_.push_back(ticket);
    return true;
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;  // by ticket
  std::vector<int> free_;
  std::map<void*, Handle> exported_;
  std::map<std::string, void*> opened_;
};

struct Descriptor {
  CopyEngine::Handle handle;
  uint64_t offset;
  uint64_t bytes;
  int64_t tag;    // the schedule's
  int64_t index;  // message number on the link
  uint64_t seq;   // the sender's number for its "done"
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(MPI_Comm comm, std::unique_ptr<CopyEngine> engine) : engine_(std::move(engine)) {
    check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_dup(comm, &desc_comm_), "MPI_Comm_dup (local transport)");
    check_mpi(MPI_Comm_dup(comm, &done_comm_), "MPI_Comm_dup (local transport)");
  }

  ~LocalTransport() override {
    engine_.reset();  // waits for the copies in flight
    for (auto& d : done_sends_) MPI_Wait(&d.request, MPI_STATUS_IGNORE);
    MPI_Comm_free(&desc_comm_);
    MPI_Comm_free(&done_comm_);
  }

  std::string name() const override { return "local"; }
  // Nothing to set up per ring: the control messages use duplicates of the world.
  void connect(const std::vector<int>& group) override { position_in_group(group, rank_); }
  // Posting is immediate here; the phases are checked as the nccl transport needs them.
  void begin_phase() override { phases_.begin(); }
  void end_phase() override { phases_.end(); }

  int isend(const DeviceRegion& region, int peer, int tag) override {
    const int id = new_request(true, region, peer, tag);
    Request& r = requests_[static_cast<size_t>(id)];
    r.desc.handle = engine_->export_allocation(region.base);
    r.desc.offset = region.offset;
    r.desc.bytes = region.bytes;
    r.desc.tag = tag;
    r.desc.index = r.index;
    r.desc.seq = next_seq_++;
    check_mpi(MPI_Isend(&r.desc, sizeof(Descriptor), MPI_BYTE, peer, kDescriptorTag, desc_comm_,
                        &r.mpi),
              "MPI_Isend (descriptor to rank " + std::to_string(peer) + ")");
    r.state = State::kAwaitDone;
    return id;
  }

  int irecv(const DeviceRegion& region, int peer, int tag) override {
    const int id = new_request(false, region, peer, tag);
    Request& r = requests_[static_cast<size_t>(id)];
    check_mpi(MPI_Irecv(&r.desc, sizeof(Descriptor), MPI_BYTE, peer, kDescriptorTag, desc_comm_,
                        &r.mpi),
              "MPI_Irecv (descriptor from rank " + std::to_string(peer) + ")");
    r.state = State::kAwaitDescriptor;
    return id;
  }

  bool test(int request) override {
    phases_.check_wait(requests_.at(static_cast<size_t>(request)).phase);
    progress();
    Request& r = requests_.at(static_cast<size_t>(request));
    if (r.state != State::kDone) return false;
    r.state = State::kFree;
    free_.push_back(request);
    return true;
  }

  void progress() override {
    receive_dones();
    for (Request& r : requests_) advance(r);
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
    const int src = r.send ? rank_ : r.peer, dst = r.send ? r.peer : rank_;
    return std::string(r.send ? "local send of " : "local recv of ") +
           std::to_string(r.region.bytes) + " bytes " + (r.send ? "to" : "from") + " rank " +
           std::to_string(r.peer) + " (tag " + std::to_string(r.tag) + "): message " +
           std::to_string(r.index) + " on link " + std::to_string(src) + " -> " +
           std::to_string(dst) + ", " + stage;
  }

  void abort() override {
    phases_.reset();
    for (Request& r : requests_)
      if (r.state == State::kAwaitDescriptor || r.state == State::kAwaitDone) {
        if (r.mpi != MPI_REQUEST_NULL) {
          MPI_Cancel(&r.mpi);
          MPI_Request_free(&r.mpi);
        }
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
    long long index = 0;  // message number on its link
    Descriptor desc{};
    MPI_Request mpi = MPI_REQUEST_NULL;
    bool desc_sent = false;  // sender: the descriptor's MPI_Isend has completed
    int ticket = -1;         // receiver: the copy's
    long long phase = -1;    // PostingPhases::posted() when it was posted
  };
  struct DoneSend {
    uint64_t seq;
    MPI_Request request;
  };

  int new_request(bool send, const DeviceRegion& region, int peer, int tag) {
    const int id = take_slot(requests_, free_);
    Request& r = requests_[static_cast<size_t>(id)];
    r = Request{};
    r.send = send;
    r.region = region;
    r.peer = peer;
    r.tag = tag;
    r.index = counters_.next(!send, peer);
    r.phase = phases_.posted();
    return id;
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

  // The contract: the descriptor that arrived is the message this receive expects.
  void check_contract(const Request& r) const {
    if (r.desc.index != r.index)  // MPI's ordering makes them equal: a transport bug
      throw std::logic_error("local transport: descriptor " + std::to_string(r.desc.index) +
                             " from rank " + std::to_string(r.peer) + " arrived as message " +
                             std::to_string(r.index));
    if (r.desc.tag != r.tag || r.desc.bytes != r.region.bytes)
      throw std::runtime_error(contract_mismatch(r.peer, rank_, r.index, r.desc.tag,
                                                 static_cast<long long>(r.desc.bytes), r.tag,
                                                 static_cast<long long>(r.region.bytes)));
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
        check_contract(r);
        const char* src = engine_->open_allocation(r.desc.handle) + r.desc.offset;
        r.ticket = engine_->start_copy(r.region.ptr(), src, r.region.bytes);
        r.state = State::kCopying;
        return;
      }
      case State::kCopying: {
        if (!engine_->copy_done(r.ticket)) return;
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

  std::unique_ptr<CopyEngine> engine_;
  int rank_ = 0;
  MPI_Comm desc_comm_ = MPI_COMM_NULL, done_comm_ = MPI_COMM_NULL;
  std::deque<Request> requests_;  // a deque: MPI keeps pointers to each request's desc
  std::vector<int> free_;
  LinkCounters counters_;
  exec::PostingPhases phases_{"local"};
  uint64_t next_seq_ = 0;
  std::multiset<uint64_t> done_seqs_;
  std::list<DoneSend> done_sends_;  // a list: MPI keeps pointers to each entry's seq
};

}  // namespace

std::unique_ptr<CopyEngine> make_cuda_copy_engine() { return std::make_unique<CudaCopyEngine>(); }

std::unique_ptr<Transport> make_local_transport(MPI_Comm comm, std::unique_ptr<CopyEngine> engine) {
  if (!engine) engine = make_cuda_copy_engine();
  return std::make_unique<LocalTransport>(comm, std::move(engine));
}

}  // namespace rm::gpu
