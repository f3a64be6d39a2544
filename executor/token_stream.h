// Training data for `ringmaster train`: a text file read as a stream of bytes (it may be
// larger than memory; only a 64 KiB window is held), tokenized byte by byte and packed
// into sequences.
//
// Tokenizer: token = byte value (0..255); a form feed byte ('\f') separates documents and
// becomes the end-of-document token kEndOfDocument (256), which also closes the file. So
// a model needs a vocabulary of at least kMinVocab = 257 tokens.
// Packing: documents are concatenated (each closed by kEndOfDocument) and cut into
// sequences of N + 1 tokens, with no padding: inputs are the first N, targets the last N
// (token t predicts token t + 1). A sequence may span documents and the end of the file;
// after the end of the file the stream starts again at its beginning (the next epoch).
//
// Position: (epoch, byte offset of the next token); a checkpoint stores it and seek()
// restores it, so a resumed run reads exactly the sequences it would have read.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace rm::exec {

struct StreamPosition {
  int64_t epoch = 0;
  int64_t offset = 0;  // bytes of the file consumed in this epoch
};

class TokenStream {
 public:
  static constexpr int kEndOfDocument = 256;
  static constexpr int kMinVocab = 257;

  // Opens `path` and checks it; throws InputError naming the file when it is missing,
  // unreadable, empty, binary (a NUL byte or more than kMaxControlFraction control bytes
  // in its first 64 KiB) or shorter than one sequence of `seq_len` + 1 tokens.
  TokenStream(const std::string& path, int64_t seq_len);

  // The next sequence: seq_len + 1 tokens.
  std::vector<int32_t> next();

  StreamPosition position() const { return pos_; }
  // Continue from a position another stream over the same file reported; throws
  // InputError naming the file when the offset lies beyond its end.
  void seek(const StreamPosition& p);

 private:
  int next_token();
  std::string path_;
  int64_t seq_len_ = 0;
  int64_t size_ = 0;
  std::ifstream in_;
  std::vector<char> window_;  // bytes [window_start_, window_start_ + window_.size())
  int64_t window_start_ = 0;
  StreamPosition pos_;
};

}  // namespace rm::exec
