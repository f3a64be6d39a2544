// One order of posts across communicators (planner/post_order.h), on hand-built graphs:
// the schedule check and the executor's run-time check both read their verdict from it.
#include "planner/post_order.h"

#include <string>
#include <vector>

#include <doctest/doctest.h>

using rm::PostOrder;

namespace {

std::string named(const PostOrder& order, const std::vector<std::string>& names) {
  return order.violation([&](int v) { return names[static_cast<size_t>(v)]; });
}

}  // namespace

TEST_CASE("post order: a ring's exchanges posted as steps need no order inside a step") {
  // Ring of 3: at each of two steps rank r sends to r + 1 and receives from r - 1, both in one
  // step. Posted one by one, sends first, the three ranks' posts would form a cycle; as
  // steps they do not.
  PostOrder order;
  std::vector<std::string> names;
  int msg[2][3];  // [step][src]: the message src -> src + 1
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < 3; ++r) {
      msg[s][r] = order.add_node();
      names.push_back("message " + std::to_string(s) + " of " + std::to_string(r));
    }
  for (int r = 0; r < 3; ++r) {
    order.start_rank(r);
    for (int s = 0; s < 2; ++s) order.post({msg[s][r], msg[s][(r + 2) % 3]});
  }
  CHECK(named(order, names).empty());

  PostOrder one_by_one;
  for (int i = 0; i < 3; ++i) one_by_one.add_node();
  for (int r = 0; r < 3; ++r) {
    one_by_one.start_rank(r);
    one_by_one.post({r});            // its send
    one_by_one.post({(r + 2) % 3});  // then its receive
  }
  const std::string cycle = named(one_by_one, {"send 0", "send 1", "send 2"});
  CHECK(cycle.find("no one order of posts across communicators serves every rank (NCCL may hang): ") == 0);
}

TEST_CASE("post order: three ranks each taking two of three communicators in turn form one cycle") {
  // Rank 0 posts x then y, rank 1 y then z, rank 2 z then x: each pair agrees, all three do not.
  PostOrder order;
  const int x = order.add_node(), y = order.add_node(), z = order.add_node();
  const std::vector<std::vector<int>> posts = {{x, y}, {y, z}, {z, x}};
  for (int r = 0; r < 3; ++r) {
    order.start_rank(r);
    for (int v : posts[static_cast<size_t>(r)]) order.post({v});
  }
  const std::string cycle = named(order, {"x", "y", "z"});
  CHECK(cycle.find("rank 0 posts x before y") != std::string::npos);
  CHECK(cycle.find("rank 1 posts y before z") != std::string::npos);
  CHECK(cycle.find("rank 2 posts z before x") != std::string::npos);

  // Rank 2 taking x first: one order (x, y, z) serves all three.
  PostOrder agreed;
  for (int i = 0; i < 3; ++i) agreed.add_node();
  const std::vector<std::vector<int>> in_turn = {{x, y}, {y, z}, {x, z}};
  for (int r = 0; r < 3; ++r) {
    agreed.start_rank(r);
    for (int v : in_turn[static_cast<size_t>(r)]) agreed.post({v});
  }
  CHECK(named(agreed, {"x", "y", "z"}).empty());
}
