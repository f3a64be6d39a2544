// The bounded reading layer (planner/input_file.h, planner/yaml_reader.h) and the atomic
// writer (planner/atomic_file.h) on hostile paths and documents: each is refused at once with
// the path and the reason, never blocks, never reads without bound.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cstdio>
#include <fstream>
#include <string>

#include "planner/atomic_file.h"
#include "planner/input_error.h"
#include "planner/input_file.h"
#include "planner/yaml_reader.h"

namespace {

std::string error_of(const std::string& path, rm::InputKind kind) {
  try {
    rm::read_input_file(path, kind);
  } catch (const rm::InputError& e) {
    return e.what();
  }
  return "";
}

std::string yaml_error(const std::string& text) {
  try {
    rm::load_yaml(text, "t.yaml");
  } catch (const rm::InputError& e) {
    return e.what();
  }
  return "";
}

// A fresh scratch folder per test case.
struct Scratch {
  std::string dir;
  Scratch() {
    char tmpl[] = "/tmp/rm-input-file-XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  ~Scratch() { std::system(("rm -rf '" + dir + "'").c_str()); }
  std::string path(const std::string& name) const { return dir + "/" + name; }
};

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("only regular files are read: FIFOs, devices and folders are refused by name") {
  Scratch s;
  const std::string fifo = s.path("t.yaml");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Would block forever if opened for reading with no writer.
  CHECK(error_of(fifo, rm::InputKind::kTopology) == fifo + ": is a FIFO (named pipe), expected a topology file");
  CHECK(error_of("/dev/zero", rm::InputKind::kMeasurements) == "/dev/zero: is a device, expected a measurements file");
  CHECK(error_of(s.dir, rm::InputKind::kPlan) == s.dir + ": is a directory, expected a plan file");
  CHECK(error_of(s.path("missing.yaml"), rm::InputKind::kModel).find("cannot read file (No such file") !=
        std::string::npos);
  CHECK(error_of("", rm::InputKind::kModel) == "(empty path): expected a model file");
}

TEST_CASE("each kind of file has a size limit") {
  Scratch s;
  const std::string big = s.path("big.yaml");
  write(big, std::string(rm::max_input_bytes(rm::InputKind::kProfile) + 1, '#'));
  CHECK(error_of(big, rm::InputKind::kProfile) == big + ": larger than the 1 MiB limit for a profile file");
  CHECK(error_of(big, rm::InputKind::kPlan).empty());  // 16 MiB for plans
  write(big, "a: 1\n");
  CHECK(rm::read_input_file(big, rm::InputKind::kProfile) == "a: 1\n");
}

TEST_CASE("one YAML document, no key twice, a bounded number of nodes and depth") {
  CHECK(yaml_error("a: 1\nb: {c: 2, c: 3}\n") == "t.yaml:2: b.c: key given twice (first at line 2)");
  CHECK(yaml_error("a: 1\nb: 2\na: 3\n") == "t.yaml:3: a: key given twice (first at line 1)");
  CHECK(yaml_error("a: 1\n---\nb: 2\n") == "t.yaml:2: a second YAML document (after '---'); expected one document");
  CHECK(yaml_error("# only a comment\n") == "t.yaml: file is empty (expected a mapping)");
  CHECK(yaml_error("list: [1, 2]\n").empty());
  // yaml-cpp 0.7's LoadAll loops forever on this text (found by the fuzzer): refused at once.
  CHECK(!yaml_error(", 33, 34f").empty());
  // A billion laughs: ten levels of ten aliases would be 10^10 nodes once expanded.
  std::string bomb = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    const std::string prev = "*l" + std::to_string(i - 1);
    bomb += 'l';
    bomb += std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) {
      if (k) bomb += ", ";
      bomb += prev;
    }
    bomb += "]\n";
  }
  CHECK(yaml_error(bomb).find("t.yaml: more than 1048576 YAML nodes") == 0);
  // An alias inside the node its anchor names: an endless tree, whose walk overflowed the
  // stack (found by the topology fuzzer). And a chain of anchors, each holding the last.
  CHECK(yaml_error("a: &x\n  b: *x\n").find("t.yaml:1: a.b.b.b.b") == 0);
  CHECK(yaml_error("a: &x\n  b: *x\n").find(": nested more than 64 levels deep (an alias inside the node its anchor "
                                            "names repeats forever)") != std::string::npos);
  std::string chain = "c0: &c0 [x]\n";
  for (int i = 1; i < 100; ++i)
    chain += "c" + std::to_string(i) + ": &c" + std::to_string(i) + " [*c" + std::to_string(i - 1) + "]\n";
  CHECK(yaml_error(chain).find("nested more than 64 levels deep") != std::string::npos);
  CHECK(yaml_error(chain.substr(0, chain.find("c40:"))).empty());  // 40 levels: read
}

TEST_CASE("whole numbers are range-checked before they are narrowed") {
  const rm::YamlMap m(rm::load_yaml("n: 4294967298\nsmall: 7\n", "t.yaml"), "t.yaml");
  CHECK_THROWS_WITH_AS(m.count("n", 1, 1024), "t.yaml:1: n: expected a whole number in [1, 1024] (got 4294967298)",
                       rm::InputError);
  CHECK(m.count("small", 1, 1024) == 7);
  const rm::YamlMap x(rm::load_yaml("bw: 1e308\nnan: .nan\n", "t.yaml"), "t.yaml");
  CHECK_THROWS_WITH_AS(x.number("bw", rm::Range::above_up_to(0, 1e6)),
                       "t.yaml:1: bw: expected a number in (0, 1e+06] (got 1e308)", rm::InputError);
  CHECK_THROWS_AS(x.number("nan", rm::Range{}), rm::InputError);
}

TEST_CASE("the writer goes through symlinks, keeps the mode, refuses non-regular targets") {
  Scratch s;
  const std::string target = s.path("target.yaml"), link = s.path("link.yaml");
  write(target, "old\n");
  REQUIRE(::chmod(target.c_str(), 0640) == 0);
  REQUIRE(::symlink("target.yaml", link.c_str()) == 0);
  // A temporary file of a writer that no longer runs (pid beyond any pid_max).
  const std::string stale = target + ".2147483646.tmp";
  write(stale, "half");
  rm::write_file_atomically(link, "new\n");
  struct stat st {};
  REQUIRE(::lstat(link.c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  std::ifstream in(target);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "new\n");
  REQUIRE(::stat(target.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  CHECK(::access(stale.c_str(), F_OK) != 0);
  CHECK_THROWS_WITH_AS(rm::write_file_atomically(s.dir, "x"), (s.dir + ": cannot write file (it exists and is not a regular file)").c_str(),
                       rm::InputError);
  CHECK_THROWS_WITH_AS(rm::write_file_atomically("/dev/null", "x"),
                       "/dev/null: cannot write file (it exists and is not a regular file)", rm::InputError);
}

TEST_CASE("a writer stopped by SIGTERM leaves no temporary file") {
  Scratch s;
  const std::string out = s.path("big.yaml");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // 256 MiB: the write and fsync last long enough for the parent to see the temporary file.
    rm::write_file_atomically(out, std::string(size_t{256} << 20, 'x'));
    ::_exit(0);
  }
  const std::string tmp = out + "." + std::to_string(child) + ".tmp";
  bool seen = false;
  for (int i = 0; i < 20000 && !seen; ++i) {  // up to 20 s
    seen = ::access(tmp.c_str(), F_OK) == 0;
    if (!seen) ::usleep(1000);
  }
  ::kill(child, SIGTERM);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  if (seen && WIFSIGNALED(status)) {
    CHECK(WTERMSIG(status) == SIGTERM);  // the signal is handed on after the clean-up
    CHECK(::access(tmp.c_str(), F_OK) != 0);
    CHECK(::access(out.c_str(), F_OK) != 0);
  } else {
    MESSAGE("the write finished before SIGTERM arrived; nothing to check");
  }
}
