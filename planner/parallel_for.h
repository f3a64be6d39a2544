// Independent work items on every core: the sweep's GPU counts, the fp64 reference's heads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace rm {

// Calls fn(item) once for every item of `order`, taken in that order by
// min(items, cores) threads (this one among them). An item that throws does not stop the
// others; afterwards the exception of the smallest item is rethrown, as a loop over the
// items in increasing order would have stopped at it. Results that fn writes per item are
// the same whatever the thread count.
template <class Fn>
void parallel_for(const std::vector<size_t>& order, Fn&& fn) {
  if (order.empty()) return;
  const size_t n = *std::max_element(order.begin(), order.end()) + 1;
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k; (k = next.fetch_add(1)) < order.size();) {
      try {
        fn(order[k]);
      } catch (...) {
        errors[order[k]] = std::current_exception();
      }
    }
  };
  const size_t threads = std::min<size_t>(order.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace rm
