// Verification against the fp64 reference (see verify.h).
#include "executor/verify.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "executor/reference_attention.h"

namespace rm::exec {

bool VerifyResult::ok() const {
  return std::all_of(checks.begin(), checks.end(), [](const TensorCheck& c) { return c.ok; });
}

namespace {

// Assembles one head-major tensor [heads][N][width] from the ranks' [heads][c][width].
std::vector<double> assemble(const std::vector<HostTensors>& ranks,
                             std::vector<float> HostTensors::*member, int heads, int64_t n,
                             int width) {
  std::vector<double> g(static_cast<size_t>(heads) * n * width);
  for (const HostTensors& r : ranks) {
    const std::vector<float>& x = r.*member;
    const int64_t c = static_cast<int64_t>(r.tokens.size());
    for (int hh = 0; hh < heads; ++hh)
      for (int64_t i = 0; i < c; ++i)
        for (int j = 0; j < width; ++j)
          g[(hh * n + r.tokens[i]) * width + j] = x[(hh * c + i) * width + j];
  }
  return g;
}

// lse [h][N]: from every rank's [h][c], or, where the ring ran an all-to-all, from every
// rank's head-sharded [h/n][rows] of heads lse_first_head on, rows its lse_tokens (as many
// values, so the first pass reads within bounds; the second overwrites every row).
std::vector<double> assemble_lse(const std::vector<HostTensors>& ranks, int heads, int64_t n) {
  std::vector<double> g = assemble(ranks, &HostTensors::lse, heads, n, 1);
  for (const HostTensors& r : ranks) {
    if (r.lse_first_head < 0) continue;
    const int64_t rows = static_cast<int64_t>(r.lse_tokens.size());
    for (int64_t a = 0; a < static_cast<int64_t>(r.lse.size()) / rows; ++a)
      for (int64_t t = 0; t < rows; ++t) g[(r.lse_first_head + a) * n + r.lse_tokens[t]] = r.lse[a * rows + t];
  }
  return g;
}

// Tensor by tensor, the check with the larger error.
VerifyResult worse_of(const VerifyResult& a, const VerifyResult& b) {
  VerifyResult r = a;
  for (size_t i = 0; i < r.checks.size() && i < b.checks.size(); ++i) {
    const TensorCheck& x = r.checks[i];
    const TensorCheck& y = b.checks[i];
    if ((x.ok && !y.ok) || (x.ok == y.ok && y.rel_err > x.rel_err)) r.checks[i] = y;
  }
  return r;
}

}  // namespace

TensorCheck compare_tensor(const std::string& name, const std::vector<double>& got,
                    const std::vector<double>& ref, double tolerance) {
  TensorCheck c;
  c.tensor = name;
  for (size_t i = 0; i < ref.size(); ++i) {
    // NaN anywhere fails: max() would silently drop it.
    const double e = std::isnan(got[i]) ? INFINITY : std::abs(got[i] - ref[i]);
    c.max_abs_err = std::max(c.max_abs_err, e);
    c.max_abs_ref = std::max(c.max_abs_ref, std::abs(ref[i]));
  }
  c.rel_err = c.max_abs_ref > 0 ? c.max_abs_err / c.max_abs_ref : c.max_abs_err;
  c.ok = c.rel_err <= tolerance;
  return c;
}

VerifyResult verify_ring(const std::vector<std::vector<HostTensors>>& iterations, const AttentionShape& shape,
                         uint64_t seed, bool backward, double tolerance) {
  if (iterations.empty()) throw std::runtime_error("verify: no iteration to verify");
  int64_t n = 0;
  for (const HostTensors& r : iterations.front()) n += static_cast<int64_t>(r.tokens.size());
  for (const std::vector<HostTensors>& ranks : iterations) {
    std::vector<char> seen(static_cast<size_t>(n), 0);
    for (const HostTensors& r : ranks)
      for (int64_t t : r.tokens) {
        if (t < 0 || t >= n || seen[t])
          throw std::runtime_error("verify: the ranks' tokens do not tile the sequence (token " +
                                   std::to_string(t) + ")");
        seen[t] = 1;
      }
  }
  const int d = shape.d;
  auto expected_input = [&](InputTensor which, int heads) {
    std::vector<double> x(static_cast<size_t>(heads) * n * d);
    for (int hh = 0; hh < heads; ++hh)
      for (int64_t t = 0; t < n; ++t)
        for (int j = 0; j < d; ++j) x[(hh * n + t) * d + j] = input_value(seed, which, hh, t, j);
    return x;
  };
  const std::vector<double> want_q = expected_input(InputTensor::kQ, shape.h),
                            want_k = expected_input(InputTensor::kK, shape.h_kv),
                            want_v = expected_input(InputTensor::kV, shape.h_kv),
                            want_dout = backward ? expected_input(InputTensor::kDout, shape.h)
                                                 : std::vector<double>();
  std::optional<ReferenceResult> ref;
  VerifyResult worst;
  for (const std::vector<HostTensors>& ranks : iterations) {
    auto get = [&](std::vector<float> HostTensors::*m, int heads, int width) {
      return assemble(ranks, m, heads, n, width);
    };
    const auto q = get(&HostTensors::q, shape.h, d), k = get(&HostTensors::k, shape.h_kv, d),
               v = get(&HostTensors::v, shape.h_kv, d), dout = get(&HostTensors::dout, shape.h, d);
    VerifyResult res;
    res.checks.push_back(compare_tensor("q", q, want_q, tolerance));
    res.checks.push_back(compare_tensor("k", k, want_k, tolerance));
    res.checks.push_back(compare_tensor("v", v, want_v, tolerance));
    if (backward) res.checks.push_back(compare_tensor("dout", dout, want_dout, tolerance));
    // From the inputs as the backend held them (bf16-rounded on a GPU), which the checks
    // above bound.
    if (!ref)
      ref = reference_attention({n, d, shape.h, shape.h_kv, shape.causal, shape.window}, q, k, v, dout, backward);
    res.checks.push_back(compare_tensor("out", get(&HostTensors::out, shape.h, d), ref->out, tolerance));
    res.checks.push_back(compare_tensor("lse", assemble_lse(ranks, shape.h, n), ref->lse, tolerance));
    if (backward) {
      res.checks.push_back(compare_tensor("dq", get(&HostTensors::dq, shape.h, d), ref->dq, tolerance));
      res.checks.push_back(compare_tensor("dk", get(&HostTensors::dk, shape.h_kv, d), ref->dk, tolerance));
      res.checks.push_back(compare_tensor("dv", get(&HostTensors::dv, shape.h_kv, d), ref->dv, tolerance));
    }
    worst = worst.checks.empty() ? res : worse_of(worst, res);
  }
  return worst;
}

namespace {

// Every rank's `mine` (the same count on each) at rank 0, by rank; empty elsewhere.
template <class T>
std::vector<std::vector<T>> gather_per_rank(const std::vector<T>& mine, MPI_Datatype type, int rank, int size) {
  const int count = static_cast<int>(mine.size());
  std::vector<T> flat(rank == 0 ? mine.size() * static_cast<size_t>(size) : 0);
  MPI_Gather(mine.data(), count, type, flat.data(), count, type, 0, MPI_COMM_WORLD);
  std::vector<std::vector<T>> by_rank(rank == 0 ? size : 0);
  for (size_t r = 0; r < by_rank.size(); ++r)
    by_rank[r].assign(flat.begin() + static_cast<std::ptrdiff_t>(r * mine.size()),
                      flat.begin() + static_cast<std::ptrdiff_t>((r + 1) * mine.size()));
  return by_rank;
}

}  // namespace

std::vector<HostTensors> gather_host_tensors(const HostTensors& mine) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<HostTensors> all(rank == 0 ? size : 0);
  for (auto member : {&HostTensors::tokens, &HostTensors::lse_tokens}) {
    const auto by_rank = gather_per_rank(mine.*member, MPI_INT64_T, rank, size);
    for (size_t r = 0; r < all.size(); ++r) all[r].*member = by_rank[r];
  }
  const auto first_heads = gather_per_rank(std::vector<int>{mine.lse_first_head}, MPI_INT, rank, size);
  for (size_t r = 0; r < all.size(); ++r) all[r].lse_first_head = first_heads[r][0];
  for (auto member : {&HostTensors::q, &HostTensors::k, &HostTensors::v, &HostTensors::dout,
                      &HostTensors::out, &HostTensors::lse, &HostTensors::dq, &HostTensors::dk,
                      &HostTensors::dv}) {
    const auto by_rank = gather_per_rank(mine.*member, MPI_FLOAT, rank, size);
    for (size_t r = 0; r < all.size(); ++r) all[r].*member = by_rank[r];
  }
  return all;
}

std::string format_verify_table(const std::vector<VerifyResult>& results, double tolerance) {
  std::ostringstream o;
  char line[400];
  int width = 6;  // the tensor column fits the longest name (train's parameter tensors)
  for (const VerifyResult& r : results)
    for (const TensorCheck& c : r.checks) width = std::max(width, static_cast<int>(c.tensor.size()));
  std::snprintf(line, sizeof line, "#  ring  %-*s   max |err|   max |ref|     rel err   result", width,
                "tensor");
  o << line << "   (tolerance " << tolerance << ")\n";
  for (const VerifyResult& r : results)
    for (const TensorCheck& c : r.checks) {
      std::snprintf(line, sizeof line, "%7d  %-*s  %10.3e  %10.3e  %10.3e   %s\n", r.ring, width,
                    c.tensor.c_str(), c.max_abs_err, c.max_abs_ref, c.rel_err,
                    c.ok ? "OK" : "FAILED");
      o << line;
    }
  return o.str();
}

}  // namespace rm::exec
