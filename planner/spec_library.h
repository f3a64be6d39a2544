// Shipped specs (topologies/*.yaml, models/*.yaml compiled into the binary) and loading a
// spec by shipped name or by path. A user's own file is taken by path: anything with a
// '/' or ending in .yaml/.yml is a path; anything else must be a shipped name.
#pragma once

#include <string>
#include <vector>

#include "planner/model_spec.h"
#include "planner/topology.h"

namespace rm {

// Throw InputError naming the file, line and field on any missing, negative, unknown or
// inconsistent field; an unknown name lists the shipped ones.
Topology load_topology(const std::string& name_or_path);
ModelSpec load_model(const std::string& name_or_path);

// Parse YAML text; `source` is used in messages ("topologies/dgx-a100.yaml").
Topology parse_topology(const std::string& yaml_text, const std::string& source);
ModelSpec parse_model(const std::string& yaml_text, const std::string& source);

std::vector<std::string> shipped_topologies();  // sorted names
std::vector<std::string> shipped_models();

// The study's defaults (`ringmaster sweep` with no options).
inline constexpr const char* kStudyTopology = "dgx-a100-ib";
inline constexpr const char* kDefaultModel = "llama2-7b";

}  // namespace rm
