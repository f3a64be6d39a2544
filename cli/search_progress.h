// A long plan search's progress on stderr (Planner::set_progress): what it prices next, at
// most once a second once it has run a second, so quick searches print nothing. A search
// takes seconds at a few thousand GPUs and about half a minute at 16,384.
#pragma once

#include <functional>
#include <string>

namespace rm::cli {

// Lines "<command>: 7 s, 2048 GPUs: searching p2p plans at ..." for a search on `gpus` GPUs.
std::function<void(const std::string&)> search_progress(const char* command, int gpus);

}  // namespace rm::cli
