// A rank's posts across communicators, and the check across ranks (see post_log.h).
#include "executor/post_log.h"

#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "executor/mpi_transport.h"
#include "planner/post_order.h"

namespace rm::exec {

namespace {

// Every rank's logged steps (`logs`, by rank) as one graph; "" or the cycle in words.
std::string order_violation(const std::vector<std::string>& logs) {
  PostOrder order;
  std::unordered_map<std::string, int> node_of;  // key -> node
  std::vector<std::string> words;                 // node -> words
  auto node = [&](const std::string& key, std::string text) {
    const auto [it, added] = node_of.emplace(key, order.nodes());
    if (added) {
      order.add_node();
      words.push_back(std::move(text));
    }
    return it->second;
  };
  for (size_t r = 0; r < logs.size(); ++r) {
    const int rank = static_cast<int>(r);
    order.start_rank(rank);
    std::map<std::string, int> collectives;                    // communicator -> posted on it
    std::map<std::tuple<std::string, int, int>, int> messages;  // (channel, src, dst) -> posted
    std::istringstream lines(logs[r]);
    std::string line;
    std::vector<int> step;
    while (std::getline(lines, line)) {
      step.clear();
      if (line.rfind("c ", 0) == 0) {
        const std::string comm = line.substr(2);
        const int n = collectives[comm]++;
        const std::string what = std::to_string(n) + " of " + comm;
        step.push_back(node("c" + what, "collective " + what));
      } else {
        std::istringstream words_in(line.substr(2));
        std::string channel, m;
        words_in >> channel;
        while (words_in >> m) {
          const int peer = std::stoi(m.substr(1));
          const int src = m[0] == 's' ? rank : peer, dst = m[0] == 's' ? peer : rank;
          const int n = messages[{channel, src, dst}]++;
          const std::string what = std::to_string(n) + " of " + channel + " link " + std::to_string(src) + " -> " +
                                   std::to_string(dst);
          step.push_back(node("m" + what, "message " + what));
        }
      }
      order.post(step);
    }
  }
  return order.violation([&](int v) { return words[static_cast<size_t>(v)]; });
}

}  // namespace

void PostLog::collective(const std::string& comm) {
  end_step();
  steps_ += "c " + comm + "\n";
}

void PostLog::message(const char* channel, bool send, int peer) {
  if (open_.empty()) open_ = std::string("m ") + channel;
  open_ += (send ? " s" : " r") + std::to_string(peer);
}

void PostLog::end_step() {
  if (open_.empty()) return;
  steps_ += open_ + "\n";
  open_.clear();
}

void PostLog::check(MPI_Comm world) {
  end_step();
  int size = 1, rank = 0;
  MPI_Comm_size(world, &size);
  MPI_Comm_rank(world, &rank);
  const int mine = static_cast<int>(steps_.size());
  std::vector<int> lengths(static_cast<size_t>(size)), starts(static_cast<size_t>(size));
  check_mpi(MPI_Gather(&mine, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, world), "MPI_Gather (post log)");
  std::string all;
  if (rank == 0) {
    long long total = 0;
    for (int r = 0; r < size; ++r) {
      starts[static_cast<size_t>(r)] = static_cast<int>(total);
      total += lengths[static_cast<size_t>(r)];
    }
    all.resize(static_cast<size_t>(total));
  }
  check_mpi(MPI_Gatherv(steps_.data(), mine, MPI_CHAR, all.data(), lengths.data(), starts.data(), MPI_CHAR, 0, world),
            "MPI_Gatherv (post log)");
  steps_.clear();
  std::string verdict;
  if (rank == 0) {
    std::vector<std::string> logs;
    for (int r = 0; r < size; ++r)
      logs.push_back(all.substr(static_cast<size_t>(starts[static_cast<size_t>(r)]),
                                static_cast<size_t>(lengths[static_cast<size_t>(r)])));
    verdict = order_violation(logs);
  }
  int length = static_cast<int>(verdict.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_INT, 0, world), "MPI_Bcast (post log)");
  verdict.resize(static_cast<size_t>(length));
  check_mpi(MPI_Bcast(verdict.data(), length, MPI_CHAR, 0, world), "MPI_Bcast (post log)");
  if (!verdict.empty()) throw std::runtime_error(verdict);
}

std::string comm_name(MPI_Comm comm, const std::string& owner, const std::string& group) {
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &mine);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int size = 0;
  MPI_Group_size(mine, &size);
  std::vector<int> local(static_cast<size_t>(size)), global(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) local[static_cast<size_t>(i)] = i;
  MPI_Group_translate_ranks(mine, size, local.data(), world, global.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  std::string name = owner + " " + group + " group of ranks ";
  for (int i = 0; i < size; ++i) {
    if (i > 0) name += ',';
    name += std::to_string(global[static_cast<size_t>(i)]);
  }
  return name;
}

}  // namespace rm::exec
