// The byte-level token stream of `ringmaster train` (token_stream.h): packing, document
// ends, epochs, seeking, and the bad inputs it refuses naming the file.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "executor/token_stream.h"
#include "planner/input_error.h"

namespace rm::exec {
namespace {

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = std::string(P_tmpdir) + "/rm_token_stream_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST_CASE("token stream: bytes, form feeds as document ends, one end per epoch, seek") {
  const std::string path = write_temp("ok.txt", "ab\fcd");
  TokenStream s(path, 3);  // sequences of 4 tokens
  CHECK(s.next() == std::vector<int32_t>{'a', 'b', TokenStream::kEndOfDocument, 'c'});
  const StreamPosition mid = s.position();
  CHECK(mid.epoch == 0);
  CHECK(mid.offset == 4);
  // 'd', end of the file (document end), then the next epoch from the start.
  CHECK(s.next() == std::vector<int32_t>{'d', TokenStream::kEndOfDocument, 'a', 'b'});
  CHECK(s.position().epoch == 1);
  TokenStream again(path, 3);
  again.seek(mid);
  CHECK(again.next() == std::vector<int32_t>{'d', TokenStream::kEndOfDocument, 'a', 'b'});
  CHECK_THROWS_AS(again.seek({0, 99}), InputError);
  std::remove(path.c_str());
}

TEST_CASE("token stream: missing, empty, binary and too short files are refused naming the file") {
  CHECK_THROWS_WITH_AS(TokenStream("/nonexistent/x.txt", 8),
                       doctest::Contains("/nonexistent/x.txt: data: cannot open"), InputError);
  const std::string empty = write_temp("empty.txt", "");
  CHECK_THROWS_WITH_AS(TokenStream(empty, 8), doctest::Contains("is empty"), InputError);
  const std::string binary = write_temp("bin.dat", std::string("ELF\0\1\2", 6) + "text");
  CHECK_THROWS_WITH_AS(TokenStream(binary, 2), doctest::Contains("binary file"), InputError);
  const std::string control = write_temp("ctl.dat", std::string(50, '\x01') + std::string(50, 'a'));
  CHECK_THROWS_WITH_AS(TokenStream(control, 2), doctest::Contains("control characters"), InputError);
  const std::string short_file = write_temp("short.txt", "hello");
  CHECK_THROWS_WITH_AS(TokenStream(short_file, 8),
                       doctest::Contains("fewer than one sequence of the plan (8 + 1 target)"),
                       InputError);
  CHECK_NOTHROW(TokenStream(short_file, 5));  // 5 bytes + end of document = 6 tokens
  for (const auto& p : {empty, binary, control, short_file}) std::remove(p.c_str());
}

}  // namespace
}  // namespace rm::exec
