// The test binaries' main: doctest's own, plus a refusal to pass when the filters reach no
// test case. ctest runs each case as `<engine>_tests -tc=<name>` (doctest_discover_tests),
// and a name CMake cannot carry (a ';' splits it into two list items) would otherwise
// "pass" by running nothing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

int g_cases_run = 0;

// Counts the test cases that start; reports nothing itself.
struct CaseCounter : doctest::IReporter {
  explicit CaseCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++g_cases_run; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("case_counter", 1, CaseCounter);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;  // a query (--list-test-cases, --help, --count)
  if (g_cases_run == 0) {
    std::fprintf(stderr, "no test case matches the filters: nothing was tested\n");
    return 1;
  }
  return result;
}
