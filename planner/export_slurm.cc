#include "planner/export_slurm.h"

#include "planner/export_target.h"

namespace rm {

std::string slurm_export(const Plan& plan, const Topology& topology, const std::string& plan_path,
                         const std::string& backend) {
  auto str = [](int64_t v) { return std::to_string(v); };
  const PlanChoice& c = plan.choice;
  const int G = plan.job.gpus;
  const RankPlacement pl = rank_placement(plan, topology.gpus_per_node);
  std::string out = "#!/bin/bash\n";
  out += "#SBATCH --job-name=ringmaster-" + plan.job.model.substr(plan.job.model.find_last_of('/') + 1) + "\n";
  out += "#SBATCH --nodes=" + str(pl.nodes) + "\n";
  out += "#SBATCH --ntasks=" + str(G) + "\n";
  out += "#SBATCH --ntasks-per-node=" + str(pl.ranks_per_node) + "\n";
  if (backend == "cuda") out += "#SBATCH --gpus-per-node=" + str(pl.ranks_per_node) + "\n";
  out += "#SBATCH --exclusive\n";
  out += export_header(plan, ExportTarget::kSlurm, plan_path);
  out += "# Rank placement: srun --distribution=block starts rank g on node g / " + str(topology.gpus_per_node) +
         " as local rank g % " + str(topology.gpus_per_node) + ", i.e. on GPU g of the plan; `ringmaster run`\n"
         "# gives GPU order[k*cp + i] position i of ring k (the plan's " + c.order_name + " order):\n";
  for (int k = 0; k < c.dp; ++k) {
    std::string ring;
    for (int i = 0; i < c.cp; ++i) {
      const int g = c.order[static_cast<size_t>(k * c.cp + i)];
      ring += " n" + str(g / topology.gpus_per_node) + ".g" + str(g % topology.gpus_per_node);
    }
    out += "#   ring " + str(k) + ":" + ring + "\n";
  }
  out += "set -euo pipefail\n";
  out += "PLAN=${PLAN:-" + plan_path + "}\n";
  out += "RINGMASTER=${RINGMASTER:-ringmaster}\n";
  out += "test -f \"$PLAN\" || { echo \"$PLAN: plan file not found (set PLAN=...)\" >&2; exit 2; }\n";
  out += "export OMP_NUM_THREADS=1\n";
  out += "srun --mpi=pmix --distribution=block:block --cpu-bind=none \\\n"
         "  \"$RINGMASTER\" run --plan \"$PLAN\" --backend " + backend + " \\\n"
         "  --measurements \"measurements-${SLURM_JOB_ID}.jsonl\" --trace \"trace-${SLURM_JOB_ID}.json\"\n";
  return out;
}

}  // namespace rm
