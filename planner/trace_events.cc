#include "planner/trace_events.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>

#include "planner/atomic_file.h"

namespace rm {

namespace {

constexpr int kLanesPerTrack = 100;  // tid = track * 100 + lane

const char* track_name(TraceTrack t) {
  switch (t) {
    case TraceTrack::kCompute: return "compute";
    case TraceTrack::kSend: return "send";
    case TraceTrack::kRecv: return "recv";
  }
  return "?";
}

void append_escaped(std::string& out, const std::string& s) {
  out += '"';
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

// printf's "%.<precision>f" (fixed) or "%.<precision>g" (general), as std::to_chars writes
// them: the same text, without printf's format parsing, a fifth of a 225 MB trace's time.
void append_number(std::string& out, double v, int precision = 3,
                   std::chars_format format = std::chars_format::fixed) {
  char buf[400];  // fixed notation of the largest double: 309 digits and the decimals
  out.append(buf, std::to_chars(buf, buf + sizeof buf, v, format, precision).ptr);
}

}  // namespace

void TraceWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_.emplace_back(key, value);
}

std::string TraceWriter::to_json() const {
  // Lanes: per (gpu, track), events sorted by start go to the first lane free by then.
  std::vector<size_t> order(events_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TraceEvent &x = events_[a], &y = events_[b];
    if (x.gpu != y.gpu) return x.gpu < y.gpu;
    if (x.track != y.track) return x.track < y.track;
    return x.start_s < y.start_s;
  });
  std::vector<int> lane(events_.size(), 0);
  std::map<std::pair<int, int>, int> lanes_used;  // (gpu, tid) -> 1
  {
    std::vector<double> lane_end;
    int cur_gpu = -1;
    int cur_track = -1;
    for (size_t i : order) {
      const TraceEvent& e = events_[i];
      if (e.gpu != cur_gpu || static_cast<int>(e.track) != cur_track) {
        lane_end.clear();
        cur_gpu = e.gpu;
        cur_track = static_cast<int>(e.track);
      }
      size_t l = 0;
      // A few ns of slack: touching events (one ends as the next starts) share a lane.
      while (l < lane_end.size() && lane_end[l] > e.start_s + 1e-9) ++l;
      if (l == lane_end.size()) lane_end.push_back(0);
      lane_end[l] = e.start_s + e.duration_s;
      lane[i] = static_cast<int>(std::min<size_t>(l, kLanesPerTrack - 1));
      lanes_used[{e.gpu, cur_track * kLanesPerTrack + lane[i]}] = 1;
    }
  }

  std::string out;
  out.reserve(events_.size() * 160 + 4096);
  out += "{\"displayTimeUnit\":\"ms\",\"metadata\":{\"title\":";
  append_escaped(out, title_);
  for (const auto& [k, v] : metadata_) {
    out += ',';
    append_escaped(out, k);
    out += ':';
    append_escaped(out, v);
  }
  out += "},\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  // Names of processes and threads, and their order in the viewer.
  int last_gpu = -1;
  for (const auto& [key, unused] : lanes_used) {
    const auto [gpu, tid] = key;
    if (gpu != last_gpu) {
      last_gpu = gpu;
      sep();
      out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(gpu) +
             ",\"args\":{\"name\":";
      append_escaped(out, "GPU " + std::to_string(gpu) + (title_.empty() ? "" : " (" + title_ + ")"));
      out += "}}";
      sep();
      out += "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + std::to_string(gpu) +
             ",\"args\":{\"sort_index\":" + std::to_string(gpu) + "}}";
    }
    const int l = tid % kLanesPerTrack;
    std::string name = track_name(static_cast<TraceTrack>(tid / kLanesPerTrack));
    if (l > 0) name += " " + std::to_string(l + 1);
    sep();
    out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(gpu) +
           ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":";
    append_escaped(out, name);
    out += "}}";
    sep();
    out += "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + std::to_string(gpu) +
           ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"sort_index\":" +
           std::to_string(tid) + "}}";
  }
  for (size_t i : order) {
    const TraceEvent& e = events_[i];
    sep();
    out += "{\"ph\":\"X\",\"name\":";
    append_escaped(out, e.name);
    out += ",\"cat\":\"";
    out += track_name(e.track);
    out += "\",\"pid\":" + std::to_string(e.gpu) +
           ",\"tid\":" + std::to_string(static_cast<int>(e.track) * kLanesPerTrack + lane[i]) +
           ",\"ts\":";
    append_number(out, e.start_s * 1e6);
    out += ",\"dur\":";
    append_number(out, std::max(0.0, e.duration_s) * 1e6);
    out += ",\"args\":{";
    bool first_arg = true;
    auto arg = [&](const char* k, double v, int precision, std::chars_format format) {
      if (v < 0) return;
      if (!first_arg) out += ',';
      first_arg = false;
      out += '"';
      out += k;
      out += "\":";
      append_number(out, v, precision, format);
    };
    const auto fixed = std::chars_format::fixed;
    arg("layer", e.layer, 0, fixed);
    arg("step", e.step, 0, fixed);
    arg("peer", e.peer, 0, fixed);
    arg("bytes", e.bytes, 0, fixed);
    arg("flops", e.flops, 6, std::chars_format::general);
    out += "}}";
  }
  out += "]}\n";
  return out;
}

void TraceWriter::write(const std::string& path) const { write_file_atomically(path, to_json()); }

}  // namespace rm
