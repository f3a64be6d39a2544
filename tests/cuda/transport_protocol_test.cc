// The transports' host-side logic, without a device (its own binary and ctest entry, run
// wherever the cuda backend is built): the local transport's protocol on a host copy
// engine over a one-rank MPI world (every message on the link 0 -> 0), the nccl
// transport's checks that come before any NCCL call, and the posting-phase rules the MPI
// and local transports keep for it.
//   - pairing by posting order, not by tag (repeated tags, sizes, offsets);
//   - a receive whose descriptor states another tag or size is an error with the message
//     contract's words (planner/message_contract.h), before any byte is copied;
//   - describe() names the link and the message's index on it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/cuda/local_transport.h"
#include "executor/cuda/nccl_transport.h"
#include "executor/mpi_transport.h"
#include "planner/message_contract.h"

namespace rm::gpu {
namespace {

// Handles are the host pointers themselves; a copy finishes on its second poll (so the
// receive passes through "copying", as on a device) and only then moves the bytes.
class HostCopyEngine final : public CopyEngine {
 public:
  Handle export_allocation(void* base) override {
    Handle h{};
    std::memcpy(h.bytes, &base, sizeof base);
    return h;
  }
  char* open_allocation(const Handle& h) override {
    void* p = nullptr;
    std::memcpy(&p, h.bytes, sizeof p);
    return static_cast<char*>(p);
  }
  int start_copy(void* dst, const void* src, std::size_t bytes) override {
    copies_.push_back({dst, src, bytes, 0});
    ++*started_;
    return static_cast<int>(copies_.size()) - 1;
  }
  bool copy_done(int ticket) override {
    Copy& c = copies_.at(static_cast<size_t>(ticket));
    if (c.polls++ == 0) return false;
    std::memcpy(c.dst, c.src, c.bytes);
    return true;
  }
  explicit HostCopyEngine(int* started) : started_(started) {}

 private:
  struct Copy {
    void* dst;
    const void* src;
    std::size_t bytes;
    int polls;
  };
  std::vector<Copy> copies_;
  int* started_;
};

struct Fixture {
  int copies = 0;
  std::unique_ptr<Transport> t =
      make_local_transport(MPI_COMM_WORLD, std::make_unique<HostCopyEngine>(&copies));
  Fixture() { t->connect({0}); }
};

DeviceRegion region(std::vector<char>& buffer, std::size_t offset, std::size_t bytes) {
  return {buffer.data(), offset, bytes};
}

// Tests every request until all have completed (a bounded number of rounds).
void drive(Transport& t, std::vector<int> ids) {
  for (int round = 0; !ids.empty(); ++round) {
    REQUIRE(round < 1000);
    for (auto it = ids.begin(); it != ids.end();) it = t.test(*it) ? ids.erase(it) : it + 1;
  }
}

TEST_CASE("local transport pairs messages by posting order on a link, whatever their tags") {
  Fixture f;
  std::vector<char> src(64), dst(64, '.');
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>('a' + i % 26);
  // Three messages on link 0 -> 0, two with the same tag, at different offsets and sizes.
  std::vector<int> ids;
  f.t->begin_phase();
  ids.push_back(f.t->isend(region(src, 0, 16), 0, 3));
  ids.push_back(f.t->isend(region(src, 16, 32), 0, 9));
  ids.push_back(f.t->isend(region(src, 48, 16), 0, 3));
  ids.push_back(f.t->irecv(region(dst, 48, 16), 0, 3));  // pairs with the first send
  ids.push_back(f.t->irecv(region(dst, 0, 32), 0, 9));
  ids.push_back(f.t->irecv(region(dst, 32, 16), 0, 3));
  f.t->end_phase();
  CHECK(f.t->describe(ids[4]) == "local recv of 32 bytes from rank 0 (tag 9): message 1 on link "
                                 "0 -> 0, waiting for the sender");
  drive(*f.t, ids);
  CHECK(std::string(dst.begin() + 48, dst.end()) == std::string(src.begin(), src.begin() + 16));
  CHECK(std::string(dst.begin(), dst.begin() + 32) ==
        std::string(src.begin() + 16, src.begin() + 48));
  CHECK(std::string(dst.begin() + 32, dst.begin() + 48) ==
        std::string(src.begin() + 48, src.end()));
  CHECK(f.copies == 3);
}

TEST_CASE("local transport: a message that breaks the contract is an error, never a pairing") {
  std::vector<char> src(64, 's'), dst(64, '.');
  SUBCASE("the receiver expects another tag (two posts swapped)") {
    Fixture f;
    f.t->isend(region(src, 0, 16), 0, 1);
    f.t->isend(region(src, 16, 32), 0, 2);
    const int r = f.t->irecv(region(dst, 0, 32), 0, 2);
    f.t->irecv(region(dst, 32, 16), 0, 1);
    CHECK_THROWS_WITH_AS(drive(*f.t, {r}), contract_mismatch(0, 0, 0, 1, 16, 2, 32).c_str(),
                         std::runtime_error);
    CHECK(f.copies == 0);
  }
  SUBCASE("the same tag, another size") {
    Fixture f;
    f.t->isend(region(src, 0, 32), 0, 4);
    const int r = f.t->irecv(region(dst, 0, 16), 0, 4);
    CHECK_THROWS_WITH_AS(
        drive(*f.t, {r}),
        "message contract broken on link 0 -> 0, message 0: the sender posted tag 4 (32 bytes), "
        "the receiver expects tag 4 (16 bytes)",
        std::runtime_error);
    CHECK(f.copies == 0);
  }
  SUBCASE("a later message: the index counts the link's messages") {
    Fixture f;
    std::vector<int> ok{f.t->isend(region(src, 0, 8), 0, 7), f.t->irecv(region(dst, 0, 8), 0, 7)};
    drive(*f.t, ok);
    f.t->isend(region(src, 8, 8), 0, 8);
    const int r = f.t->irecv(region(dst, 8, 8), 0, 9);
    CHECK_THROWS_WITH_AS(drive(*f.t, {r}), contract_mismatch(0, 0, 1, 8, 8, 9, 8).c_str(),
                         std::runtime_error);
  }
  CHECK(std::string(dst.begin() + 16, dst.end()) == std::string(48, '.'));
}

TEST_CASE("the MPI and local transports refuse a wait inside the phase that posted it, as NCCL would hang there") {
  // Both post at once, so both could complete it: the rule is the nccl transport's
  // (executor/posting_phases.h), checked where CI runs.
  std::vector<char> src(16, 's'), dst(16, '.');
  const char* inside = "transport: wait on a transfer of a phase not yet ended";
  {
    exec::MpiTransport mpi;
    mpi.begin_phase();
    const int s = mpi.isend(src.data(), 16, 0, 3);
    const int r = mpi.irecv(dst.data(), 16, 0, 3);
    CHECK_THROWS_WITH_AS(mpi.wait(r), (std::string("MPI ") + inside).c_str(), std::logic_error);
    CHECK_THROWS_WITH_AS(mpi.begin_phase(), "MPI transport: begin_phase() inside a phase", std::logic_error);
    mpi.end_phase();
    mpi.wait(r);
    mpi.wait(s);
    CHECK(dst == src);
    CHECK_THROWS_WITH_AS(mpi.end_phase(), "MPI transport: end_phase() without begin_phase()", std::logic_error);
  }
  Fixture f;
  std::fill(dst.begin(), dst.end(), '.');
  f.t->begin_phase();
  const int s = f.t->isend(region(src, 0, 16), 0, 3);
  const int r = f.t->irecv(region(dst, 0, 16), 0, 3);
  CHECK_THROWS_WITH_AS(f.t->test(r), (std::string("local ") + inside).c_str(), std::logic_error);
  CHECK_THROWS_WITH_AS(f.t->begin_phase(), "local transport: begin_phase() inside a phase", std::logic_error);
  f.t->end_phase();
  drive(*f.t, {s, r});
  CHECK(dst == src);
  CHECK_THROWS_WITH_AS(f.t->end_phase(), "local transport: end_phase() without begin_phase()", std::logic_error);
}

TEST_CASE("transports refuse a ring without this rank, and the nccl transport a peer outside it") {
  int copies = 0;
  auto local = make_local_transport(MPI_COMM_WORLD, std::make_unique<HostCopyEngine>(&copies));
  CHECK_THROWS_WITH_AS(local->connect({1, 2}), "transport: rank 0 is not in its ring [1 2]",
                       std::logic_error);
  CHECK_THROWS_WITH_AS(local->connect({0, 1, 0}),
                       "transport: rank 0 appears twice in the ring [0 1 0]", std::logic_error);
  // A ring of one has no communicator, so nothing here reaches NCCL or the device.
  auto nccl = make_nccl_transport(MPI_COMM_WORLD);
  nccl->connect({0});
  std::vector<char> buffer(16);
  CHECK_THROWS_AS(nccl->isend(region(buffer, 0, 16), 1, 0), std::logic_error);
  CHECK_THROWS_AS(nccl->end_phase(), std::logic_error);
  nccl->begin_phase();
  CHECK_THROWS_AS(nccl->begin_phase(), std::logic_error);
  nccl->end_phase();
}

}  // namespace
}  // namespace rm::gpu

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  doctest::Context context(argc, argv);
  const int code = context.run();
  MPI_Finalize();
  return code;
}
