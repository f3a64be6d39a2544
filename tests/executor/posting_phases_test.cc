// The posting-phase rules every transport keeps (executor/posting_phases.h), as the nccl
// transport needs them: what each one refuses, and that a wait on an earlier phase's
// transfer stays allowed while a later phase is open.
#include "executor/posting_phases.h"

#include <doctest/doctest.h>

namespace rm::exec {
namespace {

TEST_CASE("posting phases: no phase inside a phase, no end without a begin, no wait inside its own phase") {
  PostingPhases p("MPI");
  CHECK(p.posted() == -1);  // outside a phase
  CHECK_NOTHROW(p.check_wait(-1));
  CHECK_THROWS_WITH_AS(p.end(), "MPI transport: end_phase() without begin_phase()", std::logic_error);
  p.begin();
  const long long first = p.posted();
  CHECK(first >= 0);
  CHECK_THROWS_WITH_AS(p.begin(), "MPI transport: begin_phase() inside a phase", std::logic_error);
  CHECK_THROWS_WITH_AS(p.check_wait(first), "MPI transport: wait on a transfer of a phase not yet ended",
                       std::logic_error);
  p.end();
  CHECK_NOTHROW(p.check_wait(first));  // its phase has ended
  p.begin();
  CHECK(p.posted() != first);
  CHECK_NOTHROW(p.check_wait(first));   // an earlier phase's transfer, waited inside a later one
  CHECK_NOTHROW(p.check_wait(-1));      // one posted outside any phase
  CHECK_THROWS_AS(p.check_wait(p.posted()), std::logic_error);
  p.reset();  // an abort
  CHECK_NOTHROW(p.begin());
}

}  // namespace
}  // namespace rm::exec
