#include "planner/export_slurm.h"

#include <cctype>

#include "planner/export_target.h"

namespace rm {

namespace {

// `s` as one shell word: unchanged when it holds only characters the shell leaves alone,
// else in single quotes (a quote inside written '\'').
std::string shell_word(const std::string& s) {
  bool plain = !s.empty();
  for (const char ch : s)
    if (!(isalnum(static_cast<unsigned char>(ch)) || std::string("_./-+=,:@%").find(ch) != std::string::npos))
      plain = false;
  if (plain) return s;
  std::string q = "'";
  for (const char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// `NAME=${NAME:-value}` and, for a required variable (`option` names the export option
// that gives its default), the check that stops the script with exit 2 when it is still
// empty: no default at export and none given at submission.
std::string variable(const std::string& name, const std::string& value, const std::string& what = "",
                     const std::string& option = "") {
  std::string out = name + "=${" + name + ":-" + (value.empty() ? "" : shell_word(value)) + "}\n";
  if (!what.empty())
    out += "test -n \"$" + name + "\" || { echo \"" + name + ": " + what + " is not set (export " + option +
           ", or " + name + "=... sbatch ...)\" >&2; exit 2; }\n";
  return out;
}

}  // namespace

std::string slurm_export(const Plan& plan, const Topology& topology, const std::string& plan_path,
                         const SlurmLaunch& launch) {
  auto str = [](int64_t v) { return std::to_string(v); };
  const PlanChoice& c = plan.choice;
  const int G = plan.job.gpus;
  const RankPlacement pl = rank_placement(plan, topology.gpus_per_node);
  const std::string backend = launch.train ? "cpu" : launch.backend;
  std::string out = "#!/bin/bash\n";
  out += "#SBATCH --job-name=ringmaster-" + plan.job.model.substr(plan.job.model.find_last_of('/') + 1) + "\n";
  out += "#SBATCH --nodes=" + str(pl.nodes) + "\n";
  out += "#SBATCH --ntasks=" + str(G) + "\n";
  out += "#SBATCH --ntasks-per-node=" + str(pl.ranks_per_node) + "\n";
  // Every GPU of a node, even for fewer ranks: an exclusive job's step otherwise gets GPUs
  // Slurm picks (srun --exclusive, --gres), not 0..ranks-1, whose links the plan priced.
  if (backend == "cuda") out += "#SBATCH --gpus-per-node=" + str(topology.gpus_per_node) + "\n";
  out += "#SBATCH --exclusive\n";
  // The cpu backend's ranks are a node's cores as devices, and a CPU topology may run more
  // ranks than a node has cores (cpu-local oversubscribes up to 64): without --overcommit
  // Slurm refuses more tasks than CPUs, in the allocation and in the step (sbatch(1), srun(1)).
  const bool overcommit = backend == "cpu";
  if (overcommit) out += "#SBATCH --overcommit\n";
  std::string header = export_header(plan, ExportTarget::kSlurm, plan_path);
  if (launch.train) {  // the export command line in the header, with the options that shaped the script
    std::string opts = " --launch train";
    if (!launch.data.empty()) opts += " --data " + shell_word(launch.data);
    if (launch.steps > 0) opts += " --steps " + str(launch.steps);
    if (launch.checkpoint_dir != SlurmLaunch{}.checkpoint_dir) opts += " --checkpoint-dir " + shell_word(launch.checkpoint_dir);
    if (launch.checkpoint_every > 0) opts += " --checkpoint-every " + str(launch.checkpoint_every);
    header.insert(header.find('\n'), opts);
  }
  out += header;
  out += "# Rank placement: srun --distribution=block starts rank g on node g / " + str(topology.gpus_per_node) +
         " as local rank g % " + str(topology.gpus_per_node) + ", i.e. on GPU g of the plan; `ringmaster " +
         (launch.train ? "train" : "run") + "`\n"
         "# gives GPU order[k*cp + i] position i of ring k (the plan's " + c.order_name + " order):\n";
  for (int k = 0; k < c.dp; ++k) {
    std::string ring;
    for (int i = 0; i < c.cp; ++i) {
      const int g = c.order[static_cast<size_t>(k * c.cp + i)];
      ring += " n" + str(g / topology.gpus_per_node) + ".g" + str(g % topology.gpus_per_node);
    }
    out += "#   ring " + str(k) + ":" + ring + "\n";
  }
  if (launch.train)
    out += "# Trains on DATA up to STEPS optimizer steps, a checkpoint in CHECKPOINT_DIR every CHECKPOINT_EVERY\n"
           "# steps (0: after the last one); set any of them at submission (DATA=... sbatch ...). Submitting\n"
           "# again resumes from the latest checkpoint (--resume; STEPS counts the resumed steps).\n";
  out += "set -euo pipefail\n";
  out += "PLAN=${PLAN:-" + shell_word(plan_path) + "}\n";
  out += "RINGMASTER=${RINGMASTER:-ringmaster}\n";
  out += "test -f \"$PLAN\" || { echo \"$PLAN: plan file not found (set PLAN=...)\" >&2; exit 2; }\n";
  if (launch.train) {
    out += variable("DATA", launch.data, "the training text", "--data FILE");
    out += "test -f \"$DATA\" || { echo \"$DATA: training text not found (set DATA=...)\" >&2; exit 2; }\n";
    out += variable("STEPS", launch.steps > 0 ? str(launch.steps) : "", "the number of optimizer steps", "--steps N");
    out += variable("CHECKPOINT_DIR", launch.checkpoint_dir);
    out += variable("CHECKPOINT_EVERY", str(launch.checkpoint_every));
  }
  // A site whose Slurm lacks PMIx submits with SRUN_MPI=pmi2, the script unedited.
  out += "SRUN_MPI=${SRUN_MPI:-pmix}  # srun --mpi=list shows the site's plugins (pmi2 where Slurm lacks PMIx)\n";
  out += "export OMP_NUM_THREADS=1\n";
  if (backend == "cuda")  // CUDA's default is FASTEST_FIRST (CUDA_DEVICE_ORDER): not the plan's GPU numbers
    out += "export CUDA_DEVICE_ORDER=PCI_BUS_ID  # local rank k on the node's k-th GPU by PCI bus id\n";
  out += std::string("srun --mpi=\"$SRUN_MPI\" --distribution=block:block --cpu-bind=none") +
         (overcommit ? " --overcommit" : "") + " \\\n";
  if (launch.train)
    out += "  \"$RINGMASTER\" train --plan \"$PLAN\" --data \"$DATA\" --steps \"$STEPS\" \\\n"
           "  --checkpoint-dir \"$CHECKPOINT_DIR\" --checkpoint-every \"$CHECKPOINT_EVERY\" --resume \\\n"
           "  --measurements \"measurements-${SLURM_JOB_ID}.jsonl\"\n";
  else
    out += "  \"$RINGMASTER\" run --plan \"$PLAN\" --backend " + backend + " \\\n"
           "  --measurements \"measurements-${SLURM_JOB_ID}.jsonl\" --trace \"trace-${SLURM_JOB_ID}.json\"\n";
  return out;
}

}  // namespace rm
