// MPI point-to-point with the message contract (see mpi_transport.h).
#include "executor/mpi_transport.h"

#include <climits>
#include <stdexcept>
#include <string>

#include "planner/message_contract.h"

namespace rm::exec {

namespace {

// MPI tags of the two ordered streams on every link (the schedule's tags never appear).
constexpr int kHeaderTag = 1;
constexpr int kPayloadTag = 2;

}  // namespace

void check_mpi(int rc, const char* what, int peer) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(what) + (peer >= 0 ? " (peer " + std::to_string(peer) + ")" : "") +
                           ": " + std::string(msg, static_cast<size_t>(len)));
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int MpiTransport::slot() {
  if (!free_.empty()) {
    const int id = free_.back();
    free_.pop_back();
    return id;
  }
  requests_.emplace_back();
  mpi_.push_back(MPI_REQUEST_NULL);
  mpi_.push_back(MPI_REQUEST_NULL);
  return static_cast<int>(requests_.size()) - 1;
}

int MpiTransport::post(bool recv, void* data, std::size_t bytes, int peer, int tag) {
  if (bytes > static_cast<std::size_t>(INT_MAX))
    throw std::runtime_error("MPI transport: a message of " + std::to_string(bytes) +
                             " bytes exceeds MPI's int count");
  const int id = slot();
  Request& r = requests_[static_cast<size_t>(id)];
  r.in_use = true;
  r.recv = recv;
  r.peer = peer;
  long long& count = (recv ? received_ : sent_)[peer];
  r.mine = {tag, static_cast<long long>(bytes), count++};
  r.phase = phases_.posted();
  MPI_Request* m = &mpi_[2 * static_cast<size_t>(id)];
  const int n = static_cast<int>(bytes);
  if (recv) {
    check_mpi(MPI_Irecv(&r.theirs, sizeof(Header), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD, &m[0]),
              "MPI_Irecv", peer);
    check_mpi(MPI_Irecv(data, n, MPI_BYTE, peer, kPayloadTag, MPI_COMM_WORLD, &m[1]), "MPI_Irecv", peer);
  } else {
    check_mpi(MPI_Isend(&r.mine, sizeof(Header), MPI_BYTE, peer, kHeaderTag, MPI_COMM_WORLD, &m[0]),
              "MPI_Isend", peer);
    check_mpi(MPI_Isend(data, n, MPI_BYTE, peer, kPayloadTag, MPI_COMM_WORLD, &m[1]), "MPI_Isend", peer);
  }
  return id;
}

int MpiTransport::isend(const void* data, std::size_t bytes, int peer, int tag) {
  // MPI_Isend takes a const buffer; post() shares the code path with receives.
  return post(false, const_cast<void*>(data), bytes, peer, tag);
}

int MpiTransport::irecv(void* data, std::size_t bytes, int peer, int tag) {
  return post(true, data, bytes, peer, tag);
}

void MpiTransport::wait(int request) {
  if (request < 0 || request >= static_cast<int>(requests_.size()) ||
      !requests_[static_cast<size_t>(request)].in_use)
    throw std::logic_error("MPI transport: wait on request " + std::to_string(request) +
                           ", which is not in flight");
  Request& r = requests_[static_cast<size_t>(request)];
  phases_.check_wait(r.phase);
  MPI_Request* m = &mpi_[2 * static_cast<size_t>(request)];
  check_mpi(MPI_Wait(&m[0], MPI_STATUS_IGNORE), "MPI_Wait", r.peer);
  if (r.recv && (r.theirs.tag != r.mine.tag || r.theirs.bytes != r.mine.bytes)) {
    throw std::runtime_error(contract_mismatch(r.peer, world_rank(), r.mine.index, r.theirs.tag,
                                               r.theirs.bytes, r.mine.tag, r.mine.bytes));
  }
  check_mpi(MPI_Wait(&m[1], MPI_STATUS_IGNORE), "MPI_Wait", r.peer);
  r.in_use = false;
  free_.push_back(request);
}

void MpiTransport::progress() {
  if (free_.size() == requests_.size()) return;  // nothing in flight
  int done = 0;
  done_.resize(mpi_.size());
  check_mpi(MPI_Testsome(static_cast<int>(mpi_.size()), mpi_.data(), &done, done_.data(), MPI_STATUSES_IGNORE),
            "MPI_Testsome");
}

}  // namespace rm::exec
