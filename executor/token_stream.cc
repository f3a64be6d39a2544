// The byte-level token stream (see token_stream.h).
#include "executor/token_stream.h"

#include <algorithm>
#include <filesystem>

#include "planner/input_error.h"
#include "planner/input_file.h"

namespace rm::exec {

namespace {

// Bytes read at a time and inspected for the binary check: large enough that reading is
// not syscall bound, small enough to hold for any file size.
constexpr int64_t kWindowBytes = 64 * 1024;
// Text (ASCII, UTF-8) has almost no control bytes besides tab, newline, carriage return
// and form feed; executables, archives and images have many. 10 % separates them with a
// wide margin (a chosen threshold, not a measured one).
constexpr double kMaxControlFraction = 0.10;

bool is_control(unsigned char b) {
  return b < 0x20 && b != '\t' && b != '\n' && b != '\r' && b != '\f';
}

}  // namespace

TokenStream::TokenStream(const std::string& path, int64_t seq_len)
    : path_(path), seq_len_(seq_len) {
  if (!std::filesystem::exists(path))
    fail_input(path, "data", "cannot open the training text (missing or unreadable)");
  check_regular_file(path, "expected a text file for --data");  // opening a FIFO would block
  in_.open(path, std::ios::binary);
  if (!in_) fail_input(path, "data", "cannot open the training text (missing or unreadable)");
  in_.seekg(0, std::ios::end);
  size_ = static_cast<int64_t>(in_.tellg());
  in_.seekg(0);
  if (size_ <= 0) fail_input(path, "data", "the training text is empty");
  std::vector<char> head(static_cast<size_t>(std::min(size_, kWindowBytes)));
  in_.read(head.data(), static_cast<std::streamsize>(head.size()));
  int64_t control = 0;
  for (char ch : head) {
    const auto b = static_cast<unsigned char>(ch);
    if (b == 0)
      fail_input(path, "data", "binary file (it holds NUL bytes); expected a text file");
    control += is_control(b) ? 1 : 0;
  }
  if (control > kMaxControlFraction * static_cast<double>(head.size()))
    fail_input(path, "data",
               "binary file (" + std::to_string(control) + " of its first " +
                   std::to_string(head.size()) + " bytes are control characters); expected a text file");
  // One pass over the file yields size_ bytes plus the closing end-of-document token.
  if (size_ + 1 < seq_len + 1)
    fail_input(path, "data",
               "holds " + std::to_string(size_ + 1) + " tokens (bytes + end of document), fewer "
               "than one sequence of the plan (" + std::to_string(seq_len) +
                   " + 1 target); give a longer text or re-plan with a shorter --seq");
  seek({});
}

void TokenStream::seek(const StreamPosition& p) {
  if (p.offset < 0 || p.offset > size_ || p.epoch < 0)
    fail_input(path_, "data", "position " + std::to_string(p.offset) +
                                  " (from a checkpoint) lies beyond the file's " +
                                  std::to_string(size_) + " bytes: is it the same file?");
  pos_ = p;
  window_.clear();
  window_start_ = p.offset;
  in_.clear();
  in_.seekg(p.offset);
}

int TokenStream::next_token() {
  if (pos_.offset == size_) {  // end of the file: close the document, start the next epoch
    seek({pos_.epoch + 1, 0});
    return kEndOfDocument;
  }
  const int64_t in_window = pos_.offset - window_start_;
  if (in_window >= static_cast<int64_t>(window_.size())) {
    window_start_ = pos_.offset;
    window_.resize(static_cast<size_t>(std::min(kWindowBytes, size_ - pos_.offset)));
    in_.read(window_.data(), static_cast<std::streamsize>(window_.size()));
    if (in_.gcount() != static_cast<std::streamsize>(window_.size()))
      fail_input(path_, "data", "the file shrank while it was being read");
  }
  const auto b = static_cast<unsigned char>(window_[static_cast<size_t>(pos_.offset - window_start_)]);
  ++pos_.offset;
  return b == '\f' ? kEndOfDocument : b;
}

std::vector<int32_t> TokenStream::next() {
  std::vector<int32_t> seq(static_cast<size_t>(seq_len_ + 1));
  for (auto& t : seq) t = next_token();
  return seq;
}

}  // namespace rm::exec
