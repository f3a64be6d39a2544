// Training checkpoints of `ringmaster train`: everything a run needs to continue exactly
// where it stopped, with any number of ranks (the model and optimizer are replicated on
// every rank, so a checkpoint does not depend on the rank count).
//
// Layout: DIR/step-NNNNNNNN/ (the step count after which it was taken) holding
//   model.bin      the parameters, fp32 little-endian, in transformer.h's flat order
//   optimizer.bin  AdamW's m then v, fp32, same order
//   manifest.json  written last: format, model (name, shape, parameter count), step,
//                  optimizer step, data file and position (token_stream.h), seed, and
//                  each data file's size and FNV-1a 64 checksum
// Atomic: all three are written (and flushed) into DIR/.step-NNNNNNNN.tmp, which is then
// renamed to DIR/step-NNNNNNNN; a reader only considers complete step-* folders, so a run
// killed while writing leaves the previous checkpoint as the latest. There is no other
// random state to save: the data order is the stream's, and initialisation happens only
// at step 0 (from the seed, recorded for reference).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "executor/adamw.h"
#include "executor/token_stream.h"
#include "executor/transformer.h"

namespace rm::exec {

struct TrainState {
  int64_t step = 0;  // optimizer steps done
  uint64_t seed = 0;
  StreamPosition data;
  std::vector<float> params;
  AdamWState optimizer;
};

// Writes DIR/step-<state.step> atomically (see above). `kill_before_manifest` is the
// fault injection of tests (watchdog.h, checkpoint-kill): the process kills itself after
// the data files, before the manifest. Throws InputError naming DIR when it cannot write.
void write_checkpoint(const std::string& dir, const Transformer& model,
                      const std::string& data_path, const TrainState& state,
                      bool kill_before_manifest = false);

// The latest complete checkpoint in `dir` (none: nullopt). Throws InputError naming the
// file when it is for another model or corrupted (bad manifest, size or checksum).
std::optional<TrainState> read_latest_checkpoint(const std::string& dir, const Transformer& model);

}  // namespace rm::exec
