// What `ampfuse info` and `ampfuse run` report, and its two renderings (text for people,
// one JSON object for scripts). Commands fill these structs; every field a report shows
// is rendered here, so a new field (an AMP comparison, fused-kernel counts) is added in
// one place for both formats.
#pragma once

#include "ir/graph.h"
#include "runtime/tensor.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ampfuse::tools {

// A named value whose type may not be known (an input without --shape).
struct NamedType {
  std::string name;
  std::optional<ir::TensorType> type;
};

struct ModelSummary {
  std::string model;  // file path, or "<default>"
  size_t nodes = 0;     // all nodes, variables included
  size_t op_nodes = 0;  // nodes that are not variables
  std::map<std::string, int> ops;
};
ModelSummary summarize_model(const ir::Graph& g, std::string model);

struct InfoReport {
  ModelSummary model;
  std::vector<NamedType> inputs;
  int params = 0, aux = 0;        // weight and auxiliary-state variables
  std::optional<int64_t> weight_elements;  // all params and aux, once every one has a type
  std::optional<std::vector<NamedType>> outputs;  // nullopt: types could not be inferred
  std::vector<std::string> missing_shapes;  // inputs that need --shape
  std::string inference_error;              // why the outputs are unknown
  // With --params: the file, its array count and the weights it gives no value.
  struct ParamsFile {
    std::string path;
    size_t arrays = 0;
    std::vector<std::string> unbound;
  };
  std::optional<ParamsFile> params_file;
};
// `g` after (attempted) type inference.
InfoReport make_info_report(const ir::Graph& g, std::string model);
nlohmann::json to_json(const InfoReport& r);
std::string to_text(const InfoReport& r);

// Summary numbers of one output; min, max and mean are over its finite elements.
struct TensorSummary {
  std::string name;
  ir::TensorType type;
  std::optional<double> min, max, mean;  // nullopt when no element is finite
  int64_t nonfinite = 0;
  double l2_norm = 0;  // over the finite elements
};
TensorSummary summarize_tensor(std::string name, const runtime::Tensor& t);

// What the AMP passes did (run --amp bf16|fp16).
struct AmpSummary {
  std::string target;
  int casts_inserted = 0, casts_removed = 0, casts_final = 0;
  int casts_reused = 0;  // casts in the result read by more than one op
  int params_offline = 0, lp16_nodes = 0, fp32_nodes = 0;
};

// How the graph was planned, compiled and laid out in memory (not for --interpreter).
struct PlanSummary {
  bool fused = true;
  std::string device;  // DeviceApi::name()
  // Steps that run on every run; constant_steps (computed from the weights alone, on the
  // first run only: widened or folded weights) are not among them.
  int kernels = 0, fused_nodes = 0, external_ops = 0, views = 0;
  int constant_steps = 0;
  int widened_external = 0;  // external ops computed in f32 with casts fused around them
  int folded_batchnorms = 0; // BatchNorms folded into the Convolution before them
  int fused_epilogues = 0;    // Convolutions / FullyConnecteds run with their add/relu as oneDNN post-ops
  int row_kernels = 0;        // softmax, LayerNorm, last-axis reductions generated with their neighbours
  std::map<int, int> ops_per_kernel;  // ops in a kernel -> how many kernels (of `kernels`)
  // The first compile's kernels: compiled now ("cold"), loaded from the disk cache
  // (AMPFUSE_CACHE_DIR), found in memory (this process had compiled them already).
  int compilations = 0;                // compiled + loaded from disk (CompileStats' sense)
  int kernels_cold = 0, kernels_disk = 0, kernels_memory = 0;
  double compile_cold_ms = 0;          // first compile
  // The first compile's passes and fusion plan: loaded from the disk cache (the plan cache,
  // engine/plan_cache.h) or computed now, and the milliseconds either took.
  bool plan_from_disk = false;
  double plan_ms = 0;
  double compile_cached_ms = 0;        // the same graph again: every kernel from the cache (< 0: not timed)
  int64_t arena_bytes = 0;             // the memory a run's intermediates live in
  int64_t intermediate_bytes = 0;      // every intermediate's bytes added up (no reuse)
  int in_place = 0;                    // kernels writing over a dead input
  int onednn_ops = 0;                  // external ops through oneDNN (the rest: interpreter)
  int guarded_steps = 0;               // of those, checked for NaN/Inf data first (CompileStats)
  int guards_by_scan = 0;              // of those, by reading the data once more
  int host_round_trips = 0;            // on a GPU: host steps waiting for device values
  std::vector<std::string> fallbacks, slow_external;
};
// The "plan:", "memory:" and "compile:" lines of `ampfuse run` (and the warnings after them).
std::string plan_text(const PlanSummary& p);

// Copies between the host and a GPU during one run (all 0 on the CPU).
struct TransferSummary {
  int uploads = 0, downloads = 0;
  int64_t upload_bytes = 0, download_bytes = 0;
};

struct RunReport {
  ModelSummary model;
  std::string engine;  // "fused", "unfused" or "interpreter"
  uint64_t seed = 0;
  int runs = 1;
  double run_ms = 0;  // median over `runs`, after a first run
  // Of the timed runs, those that went solo because their teams of threads waited for cores
  // (runtime/team_policy.h).
  int solo_runs = 0;
  // Of the timed runs, those in which a guarded oneDNN step (max pooling, softmax) ran its
  // reference kernel, its data holding NaN or +-Inf (RunStats::reference_on_nonfinite).
  int nonfinite_reference_runs = 0;
  // The first run of the compiled graph (it also computes what depends on the weights
  // alone); nullopt for --interpreter.
  std::optional<double> first_run_ms;
  // The f32 graph run unfused (one kernel per op), median over `runs`; nullopt without it.
  std::optional<double> baseline_ms;
  std::optional<AmpSummary> amp;
  std::optional<PlanSummary> plan;
  std::optional<TransferSummary> transfers;  // the last timed run's (not for --interpreter)
  // Largest difference of any output element to the f32 baseline run: absolute, and
  // relative to the largest |value| of that output.
  std::optional<double> max_abs_error, max_rel_error;
  std::vector<TensorSummary> outputs;
  std::vector<std::string> saved_files;
  // run --backward: the gradients (named by their variable), the head gradients bound to
  // ones, and the forward graph alone, compiled the same way, for the backward's share.
  struct Backward {
    std::vector<TensorSummary> gradients;
    std::vector<std::string> head_grads;
    std::optional<double> forward_ms;   // median, forward plan alone (not for --interpreter)
    std::optional<int> forward_kernels, forward_external_ops;
    // Compiled runs: forward values the backward steps load, and values the backward
    // kernels recompute instead (engine/planning/recompute.h).
    std::optional<int> saved_values, recomputed_values;
    std::optional<int64_t> saved_bytes, recompute_bytes_not_moved;
  };
  std::optional<Backward> backward;
};
nlohmann::json to_json(const RunReport& r);
std::string to_text(const RunReport& r);

}  // namespace ampfuse::tools
