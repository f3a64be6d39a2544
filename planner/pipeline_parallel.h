// Pipeline parallelism (Megatron-LM's --pipeline-model-parallel-size with its 1F1B and
// interleaved 1F1B schedules; torchtitan's pipeline_parallel_degree with
// pipeline_parallel_schedule "1F1B" / "Interleaved1F1B"), as the cost model, the memory
// model and the search price it. One definition for the three.
//
// The model's L layers are cut into pp·v chunks of consecutive layers, chunk k·pp + s on
// stage s (v = virtual_stages; v > 1 is Megatron's interleaving). The first chunk also
// holds the embedding, the last the output head and the loss. The split (PipelineLayout):
// U = L + a_e + a_l units, a_e and a_l 1 where the embedding and the head with the loss
// count as a layer (Megatron-Core's account_for_embedding_in_pipeline_split and
// account_for_loss_in_pipeline_split; torchtitan's pipeline_parallel_first_stage_less_layers
// and _last_stage_less_layers, whose default is 1 each). Chunk g of S = pp·v takes
// floor(U / S) units, one more for the first U mod S chunks, less a_e on the first and a_l
// on the last: torchtitan's generate_llm_fqn_per_model_part, and Megatron's split where
// S divides U, which Megatron requires and so does this planner for v > 1. Llama 3 405B
// (126 layers, pp 16) runs both counted: 7, 8 x 14, 7 layers at v = 1. Each stage is a tp x cp x dp block of GPUs: in Megatron's rank order
// tp-cp-ep-dp-pp PP is outermost, so stage s is GPUs [s·G/pp, (s+1)·G/pp) and GPU g of
// stage s hands its activations to g + G/pp (the same TP rank, ring position and replica
// of the next stage): with more than one node per stage, across the network.
//
// Schedule (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", Sec. 2.2): m micro-batches per pipeline per optimizer step
// (PlanChoice::grad_accum, micro_batch sequences each), stage s takes t_s per micro-batch
// for its forward and backward. With equal stages t the step is (m + p - 1)·t for 1F1B,
// a bubble of (p - 1)/(m + p - 1) of it (Sec. 2.2.1), and m·t + (p - 1)·t / v interleaved,
// a bubble of (p - 1)/(v·m + p - 1) (Sec. 2.2.2). Interleaving needs m to be a multiple of
// pp (Megatron asserts "number of microbatches ... is not divisible by pipeline-model-
// parallel-size when using interleaved schedule"). With unequal stages the slowest stage
// sets the pace and every other stage adds its time once to the fill and drain:
//   step = m·T_max + (Σ_s T_s - T_max) / v,        bubble = (Σ_s T_s - T_max) / v,
// which is the formulas above when all T_s are equal.
//
// Point-to-point transfers: per micro-batch and chunk boundary, the forward sends the
// chunk's output activation and the backward its input gradient, micro_batch·c·hidden·e
// bytes split over the TP group by sequence parallelism (Megatron sends the SP-scattered
// tensor: c/tp tokens per TP rank). Megatron's 1F1B waits for each exchange before the
// next compute (p2p_communication.send_forward_recv_backward and its twin: one
// batch_isend_irecv, then wait), so each stage pays one exchange after each chunk forward
// and one after each chunk backward: T_s = t_s + 2·v·x interleaved, x one transfer over the
// stages' links with every boundary sending at once. 1F1B exchanges with each neighbour
// once per micro-batch (the down exchange sends the activation and takes the gradient
// back): T_s = t_s + n_s·x, n_s the stage's neighbours (pipeline_schedule.h, whose op lists
// the simulator replays within 0.2 % of this; interleaved within 1 %).
//
// Memory (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models", Sec. 4.2.3): stage s holds the stored activations of the micro-batches in
// flight: 1F1B p - s of them (the first stage p, so p·L/p = L layers' worth, as without
// PP); interleaved p·v + p - 1 - 2s chunk micro-batches (Megatron's warmup count
// 2·(p - s - 1) + (v - 1)·p, plus the one in its forward), the first stage's
// L·(1 + (p - 1)/(p·v)) layers' worth, Korthikanti's factor; never more than the
// m·v there are, and all of them when m = p under Megatron's schedule, which then runs
// every forward first (pp_warmup_forwards). Model states: the stage's layers, plus the
// embedding on the first and the head on the last (once more when tied: each end holds
// its copy).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/model_spec.h"
#include "planner/pipeline_schedule.h"
#include "planner/plan.h"

namespace rm {

// Pipeline degrees the search tries (powers of two, as Megatron and torchtitan configs
// use); a degree is kept when it divides the GPUs and leaves each stage a layer.
inline constexpr int kPipelineParallelDegrees[] = {1, 2, 4, 8, 16, 32};
// Virtual stages per pipeline rank the search tries when the layers split evenly into
// pp·v chunks (Megatron's interleaved configs use 2 to 4 chunks per rank).
inline constexpr int kVirtualStages[] = {1, 2, 3, 4};

// How a plan cuts a model of `layers` layers into pipeline chunks (see above).
struct PipelineLayout {
  int layers = 1;
  int pp = 1;
  int virtual_stages = 1;
  bool embedding_as_layer = false;  // account_for_embedding_in_pipeline_split
  bool loss_as_layer = false;       // account_for_loss_in_pipeline_split
};
PipelineLayout pp_layout(int layers, const PlanChoice& choice);

// Layers of chunk `chunk` (0 .. pp·v - 1 in model order), and the index of its first layer.
int pp_chunk_layer_count(const PipelineLayout& l, int chunk);
int pp_chunk_first_layer(const PipelineLayout& l, int chunk);
// Layers of each stage (size pp, summed over its v chunks), and of one stage (no
// allocation: the search prices many).
std::vector<int> pp_stage_layers(const PipelineLayout& l);
int pp_stage_layer_count(const PipelineLayout& l, int stage);

// Whether the pipeline gathers micro-batch 0's weights of each chunk ahead of its first
// forward: Megatron's interleaved schedule does (--overlap-param-gather: schedules.py's
// param_sync_func, chunks 0 and 1 before the first action, each later one during the
// forwards of the one before); FSDP2 gathers a chunk's in its forward pre-hook, when its
// activation has arrived, as Megatron does without interleaving. A plan for no framework
// runs as Megatron's. The op lists (schedule.cc) and CostModel::pipeline_step follow it.
inline bool pp_gathers_chunks_ahead(Framework framework, const PlanChoice& choice) {
  return framework != Framework::kPytorch && choice.pp > 1 && choice.virtual_stages > 1;
}

// Whose interleaved warm-up the framework runs (pipeline_schedule.h): torch's for PyTorch,
// Megatron's otherwise.
inline InterleavedWarmup pp_interleaved_warmup(Framework framework) {
  return framework == Framework::kPytorch ? InterleavedWarmup::kTorch : InterleavedWarmup::kMegatron;
}

// Why a layout cannot run with `microbatches` per pipeline per step, or "": pp >= 1 with
// a unit in every chunk (U >= pp·v; a counted embedding or head may be a chunk's only one); v >= 1, and v > 1 only with pp > 1, U a multiple of
// pp·v and microbatches a multiple of pp (Megatron's rules); the split's accounting only
// with pp > 1.
std::string pp_why_invalid(const PipelineLayout& l, int64_t microbatches);

// Why the schedule generator (schedule.h) emits no op lists for `pp` stages of
// `virtual_stages` chunks, or "": the interleaved schedule with pp 2 has one neighbour both
// ways, so a link would carry activations and gradients in one exchange (Megatron-LM
// refuses it too unless --overlap-p2p-communication). Priced, not simulated.
std::string pp_replay_why_not(int pp, int virtual_stages);

// Why `choice`'s order cannot be its pipeline's, or "" (always with pp 1): stage s is GPUs
// [s G/pp, (s + 1) G/pp), each a tp-cp-dp block in the planner's order (tp_order), as the
// cost model, the schedule generator and the executor lay the stages out.
std::string pp_order_why_invalid(const PlanChoice& choice);

// The bubble as a fraction of the step for equal stages: (p - 1) / (v·m + p - 1).
double pp_bubble_fraction(int pp, int virtual_stages, int64_t microbatches);

// Step time from the per-micro-batch times of each stage (`stage_s`, exchanges included),
// and the bubble part of it (see above).
struct PipelineTime {
  double step_s = 0;
  double bubble_s = 0;
};
PipelineTime pp_step_time(const std::vector<double>& stage_s, int virtual_stages, int64_t microbatches);
// The same from the stages' sum and the slowest's time.
PipelineTime pp_step_time(double sum_s, double slowest_s, int virtual_stages, int64_t microbatches);

// The step of `program` (pipeline_schedule.h; pp stages of v chunks, its m micro-batches)
// when chunk g = c·pp + s takes fwd[g] forward and bwd[g] backward per micro-batch: each
// stage runs its actions in order, each forward after the previous virtual stage's of the
// same micro-batch, each backward after the next's (the last chunk's after its forward),
// each blocking exchange once every peer of its messages has reached the matching one
// (their transfer time is folded into the chunks' times, as the cost model charges it).
// With unequal stages the closed form above overcharges: Megatron's 1F1B hides part of the
// faster stages' fill and drain behind the slowest (stages of 8, 9, 8, 7 layers over 8
// micro-batches run 3 % shorter than it says).
// `fwd_first`, where given: micro-batch 0's forward times (its gathers), the others' `fwd`;
// `bwd_last`, where given: the last micro-batch's backward times (its gradients' reduction),
// the others' `bwd`.
//
// The program is walked once into its actions in an order that every dependency respects,
// each naming the actions it waits for; pricing it for given times is then one pass. The
// search prices each pipeline shape for many candidates (about 250,000 times for
// llama3-405b on 256 GPUs, where walking the programs every time took 85 % of a 30 s
// search), so the cost model keeps the compiled form (CostModel::pp_makespan).
class PipelineMakespan {
 public:
  PipelineMakespan(const PipelineProgram& program, int virtual_stages);
  double operator()(const std::vector<double>& fwd, const std::vector<double>& bwd,
                    const std::vector<double>* fwd_first = nullptr,
                    const std::vector<double>* bwd_last = nullptr) const;

 private:
  struct Node {
    int deps_begin = 0, deps_end = 0;  // into deps_: the actions it waits for
    int time = -1;  // into [fwd, bwd, micro-batch 0's fwd, the last's bwd] (4·chunks); -1: an exchange
  };
  std::vector<Node> nodes_;
  std::vector<int> deps_;
  int chunks_ = 0;
};
double pp_program_makespan(const PipelineProgram& program, int virtual_stages, const std::vector<double>& fwd,
                           const std::vector<double>& bwd, const std::vector<double>* fwd_first = nullptr,
                           const std::vector<double>* bwd_last = nullptr);
// Micro-batches enough to price a longer run of the same program: past its warm-up and
// cool-down each micro-batch adds the slowest stage's time (pipeline_parallel_test.cc
// checks the extrapolation against the whole run).
int64_t pp_makespan_microbatches(int pp, int virtual_stages, int64_t microbatches);

// Interleaved 1F1B: the exchanges stage `stage` waits for in a training step, each with both
// neighbours at once (pipeline_schedule.h): one after each compute of the warm-up and the
// cool-down (sending one way: activations down, or gradients up), one per forward-backward
// pair in the steady state (sending both ways), m·v + W in all (W pp_warmup_forwards, the
// framework's). Forwards only: one per forward, m·v.
// The programs have up to two more or one fewer (a stage's first receive, the first
// stage's last backward; pipeline_parallel_test.cc counts them).
int64_t pp_interleaved_exchanges(int pp, int virtual_stages, int64_t microbatches, int stage, bool backward,
                                 InterleavedWarmup warmup);

// Micro-batches whose activations stage `stage` holds at its peak, in chunk micro-batches
// (each L / (pp·v) layers): the warm-up's forwards (pp_warmup_forwards) and the one in
// its forward, capped at the m·v there are.
int64_t pp_in_flight(int pp, int virtual_stages, int64_t microbatches, int stage, InterleavedWarmup warmup);
// The stored activations stage `stage` holds at its peak, `chunk_bytes[c]` a micro-batch of
// its chunk c holds: pp_in_flight times that where its chunks hold alike; else the most
// that the order (pipeline_schedule.h: forward k on chunk (k mod pp·v) / pp, backward k on
// chunk v - 1 - that) holds at once, which depends on which chunks are in flight (a Llama
// 3 stage's embedding-only chunk holds none). `at_head`: the most held right after a
// forward of the stage's last chunk, where the last stage runs the head (the peak itself
// where its chunks hold alike: its warm-up, (v - 1)·pp forwards or all, ends on one).
double pp_held_in_flight(const PipelineLayout& l, int64_t microbatches, int stage, InterleavedWarmup warmup,
                         const std::vector<double>& chunk_bytes, bool at_head = false);

// Bytes one GPU sends across a stage boundary per micro-batch, each way (activation
// forward, its gradient backward): micro_batch·c·hidden·e / tp.
double pp_p2p_bytes(const ModelSpec& m, int64_t c, int micro_batch, int element_bytes, int tp);

// What stage `stage` holds at its chunks' boundaries beside their layers' activations, in
// messages of `message_bytes` (pp_p2p_bytes); the memory model counts it, the op lists
// allocate it. torch.distributed.pipelining's PipelineStage (a PyTorch pipeline,
// torchtitan's) allocates once, for the whole run, a receive buffer per micro-batch for the
// input of each chunk but the model's first and, training, for the output gradient of each
// but the last (stage.py _prepare_forward_infra, _prepare_backward_infra); it keeps each
// micro-batch's output until that backward (fwd_cache), and a chunk's first layer saves
// its received buffer as its input, no copy. Megatron's stages (and a plan for no
// framework) hold one boundary activation while they exchange it. The last stage holds the
// final hidden state instead (`final_hidden_bytes`, whole where the framework's TP saves it
// gathered), whatever the framework.
struct PipelineStageBuffers {
  double persistent = 0;             // the receive buffers, held all step
  double boundary = 0;               // the last stage's final hidden state; before it, a
                                     // Megatron stage's one message
  std::vector<double> held_output;   // per chunk, each micro-batch in flight: its output
  std::vector<double> shared_input;  // per chunk, each micro-batch in flight: its first layer's
                                     // stored input that is the receive buffer
};
PipelineStageBuffers pipeline_stage_buffers(const PipelineLayout& l, int stage, Framework framework, bool backward,
                                            int64_t microbatches, double message_bytes, double final_hidden_bytes);

// Parameters stage `stage` holds (one TP member's share when `m` is tp_shard's): its
// layers, the embedding on the first stage, the head on the last (and both on a single
// stage, counted once when tied).
double pp_stage_params(const ModelSpec& m, const PipelineLayout& l, int stage);
// The stages that can hold the most of something per layer: the first (the embedding, the
// most micro-batches in flight), the second (the most layers of the middle stages, where
// the split counts the embedding as one) and the last (the head). Middle stages hold no
// more layers, micro-batches or tables than the second.
std::vector<int> pp_peak_stage_candidates(int pp);

// The data-parallel (FSDP) groups with pipeline stages: one per (stage, TP rank), the
// cp·dp GPUs of a stage that hold the same weight shard, in the tp-cp-dp-pp rank order.
std::vector<std::vector<int>> pp_fsdp_groups(int gpus, int tp, int pp);

// The stages of a choice seen as one block of GPUs: dp·pp replicas, pp = v = 1. Every
// stage runs the same rings, TP groups and all-to-alls at once (the order is
// tp_order(tp, cp, dp·pp)), so their patterns are this choice's.
PlanChoice pp_flattened(const PlanChoice& choice);

// The schedule's name as torchtitan spells it: "1F1B" (v = 1) or "Interleaved1F1B".
const char* pp_schedule_name(int virtual_stages);

}  // namespace rm
