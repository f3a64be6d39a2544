// Chrome trace-event JSON (opens in Perfetto and chrome://tracing): the one timeline format
// of ringmaster, written by the simulator for a predicted run and by the executor for a
// measured one, so the two sit side by side.
//
// Layout: one process (pid) per GPU, named "GPU <id>" (plus the title, e.g. "simulated");
// inside it one track (tid) per stream: compute, send, recv. Transfers of one stream that
// overlap in time (K,V and dK,dV sent at once, sub-blocks) go to extra lanes of that
// stream ("send 2", ...), so every track holds properly nested complete ("X") events.
// Times in the file are microseconds, as the format wants; the API takes seconds.
//
// Not thread safe: collect events from one thread (or merge writers) and write once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rm {

enum class TraceTrack { kCompute, kSend, kRecv };

struct TraceEvent {
  int gpu = 0;
  TraceTrack track = TraceTrack::kCompute;
  std::string name;       // short: "attention_forward", "send", "all-gather"
  double start_s = 0;     // from the start of the run
  double duration_s = 0;
  // Shown in the event's args when set (>= 0).
  int layer = -1;
  int step = -1;
  int peer = -1;          // the other GPU of a transfer
  double bytes = -1;
  double flops = -1;
};

class TraceWriter {
 public:
  // `title` goes into every process name ("GPU 3 (simulated)") and the metadata.
  explicit TraceWriter(std::string title) : title_(std::move(title)) {}

  void add(TraceEvent event) { events_.push_back(std::move(event)); }
  size_t size() const { return events_.size(); }
  // Extra key/value pairs for the file's "metadata" object (plan, model, note...).
  void set_metadata(const std::string& key, const std::string& value);

  // Writes the JSON (temp file + rename). Throws InputError when the path is not writable.
  void write(const std::string& path) const;
  // The same document as a string (tests).
  std::string to_json() const;

 private:
  std::string title_;
  std::vector<TraceEvent> events_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace rm
