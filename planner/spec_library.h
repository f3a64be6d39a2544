// Shipped specs (topologies/*.yaml, models/*.yaml compiled into the binary) and loading a
// spec by shipped name or by path. A user's own file is taken by path: anything with a
// '/' or ending in .yaml/.yml/.json is a path; anything else must be a shipped name. A model
// path ending in .json is a Hugging Face config.json (hf_config.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/model_spec.h"
#include "planner/plan.h"
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

// The study's defaults (`ringmaster sweep` with no options): Llama-2 7B, the 7B-class
// MHA model the Ring Attention paper trains on A100s, on the DGX A100 cluster; 6 lengths
// x 4 GPU counts = 24 plans.
inline constexpr const char* kStudyTopology = "dgx-a100-ib";
inline constexpr const char* kDefaultModel = "llama2-7b";
inline const std::vector<int64_t> kStudySeqs = {8192, 32768, 131072, 262144, 524288, 1048576};
inline const std::vector<int> kStudyGpus = {16, 32, 64, 128};

// A job of the study: the default model on the study's cluster, default batch, causal.
inline Job study_job(int gpus, int64_t seq_len) {
  Job j;
  j.model = kDefaultModel;
  j.topology = kStudyTopology;
  j.gpus = gpus;
  j.seq_len = seq_len;
  return j;
}

}  // namespace rm
