#include "tools/model_steps.h"

#include "engine/lower.h"
#include "ir/error.h"
#include "ir/mxnet_json.h"
#include "ir/mxnet_type_flags.h"
#include "tools/amp_args.h"
#include "tools/model_input.h"

namespace ampfuse::tools {

namespace {

// What the model file itself says of each input's type: the type its __shape__/__dtype__
// hints gave it, or nothing (the hints left untyped stay in Node::hints).
std::map<std::string, std::optional<ir::TensorType>> input_types_of_file(const ir::Graph& g) {
  std::map<std::string, std::optional<ir::TensorType>> types;
  for (const ir::Node* n : input_variables(g))
    types[n->name] = n->outputs.empty() ? std::nullopt : std::optional<ir::TensorType>(n->outputs[0]);
  return types;
}

// The converted graph as it is written: an input carries the __shape__ hint the model file
// had, never the --shape the conversion ran with (the result takes any batch, as the input
// did), and its dtype as __dtype__ (MXNet cannot infer an input's dtype backwards through
// the amp_cast that reads it). Weights keep their types: shapes that do not depend on the
// batch, and the dtype a weight is stored in (as MXNet's convert_model marks the weights it
// casts).
// An input typed with a placeholder for its hint's open extents gets that hint back.
ir::Graph with_file_input_hints(ir::Graph g, const std::map<std::string, std::optional<ir::TensorType>>& file_types,
                                const std::map<std::string, std::string>& open_hints) {
  for (ir::Node& n : g.nodes) {
    if (!n.is_var() || n.role != ir::VarRole::input) continue;
    const auto it = file_types.find(n.name);
    if (const auto open = open_hints.find(n.name); open != open_hints.end() && !n.outputs.empty()) {
      n.hints["__shape__"] = open->second;
      n.hints["__dtype__"] = std::to_string(ir::mxnet_flag_of(n.outputs[0].dtype));
      n.outputs.clear();
    } else if (it != file_types.end() && it->second) {
      n.outputs = {*it->second};
    } else if (!n.outputs.empty()) {
      n.hints["__dtype__"] = std::to_string(ir::mxnet_flag_of(n.outputs[0].dtype));
      n.outputs.clear();
    }
  }
  return g;
}

}  // namespace

// The CPU (null) or the device --device names.
std::unique_ptr<runtime::DeviceApi> open_device(const std::string& name) {
  if (name == "cpu") return nullptr;
  if (name == "cuda-emulated") return std::make_unique<runtime::EmulatedDevice>();
  if (name != "cuda") fail("--device {}: expected cpu or cuda (or cuda-emulated, the device path on the CPU)", name);
  return with_context("--device cuda", [] { return runtime::cuda_device_api(); });
}

// Bindings for the converted graph: a weight stored in low precision offline
// (--cast-params-offline) is the f32 value rounded once.
runtime::Bindings bindings_for(const ir::Graph& g, const runtime::Bindings& f32_vars) {
  runtime::Bindings vars;
  for (const ir::Node& n : g.nodes) {
    if (!n.is_var()) continue;
    const auto it = f32_vars.find(n.name);
    if (it == f32_vars.end()) continue;
    vars[n.name] = it->second.dtype() == n.outputs[0].dtype ? it->second : runtime::cast(it->second, n.outputs[0].dtype);
  }
  return vars;
}

PlanSummary summarize_plan(const engine::Executable& exe, bool fused, double cold_ms, double cached_ms) {
  const engine::CompileStats& cs = exe.compile_stats();
  PlanSummary p;
  p.fused = fused;
  p.device = cs.device;
  const std::vector<bool>& once = exe.constant_steps();
  for (size_t s = 0; s < exe.plan().steps.size(); ++s) {
    const engine::PlanStep& step = exe.plan().steps[s];
    if (once[s]) continue;
    if (const auto* k = std::get_if<engine::FusedKernel>(&step)) {
      ++p.kernels;
      p.fused_nodes += static_cast<int>(k->nodes.size());
      ++p.ops_per_kernel[static_cast<int>(k->nodes.size())];
    } else if (std::holds_alternative<engine::ExternalStep>(step)) {
      ++p.external_ops;
    } else {
      ++p.views;
    }
  }
  p.constant_steps = cs.constant_steps;
  p.widened_external = cs.widened_external;
  p.folded_batchnorms = cs.folded_batchnorms;
  p.compilations = cs.compilations;
  p.kernels_cold = cs.compilations - cs.disk_loads;
  p.kernels_disk = cs.disk_loads;
  p.kernels_memory = cs.cache_hits;
  p.compile_cold_ms = cold_ms;
  p.plan_from_disk = cs.plan_from_disk;
  p.plan_ms = cs.plan_seconds * 1e3;
  p.compile_cached_ms = cached_ms;
  p.arena_bytes = cs.arena_bytes;
  p.intermediate_bytes = cs.intermediate_bytes;
  p.in_place = cs.in_place;
  p.onednn_ops = cs.onednn_ops;
  p.host_round_trips = cs.host_round_trips;
  p.fallbacks = cs.fallbacks;
  p.slow_external = cs.slow_external;
  return p;
}

ConvertedModel convert_model(ir::Graph g, const std::set<std::string>& unreached,
                             const std::map<std::string, ir::Shape>& shapes, const engine::AmpOptions& amp,
                             const ParamsFile* params, const std::map<std::string, std::string>& open_hints) {
  check_excluded_nodes(std::optional<engine::AmpOptions>(amp), g);
  const auto file_types = input_types_of_file(g);
  with_context("--shape", [&] { set_variable_shapes(g, shapes, unreached); });
  infer_types_naming_missing_shapes(g);
  if (params) check_params_against_model(*params, g);
  ConvertedModel c;
  c.nodes_before = g.nodes.size();
  c.graph = engine::convert_for_amp(std::move(g), amp, &c.stats);
  c.json = ir::export_mxnet_json(with_file_input_hints(c.graph, file_types, open_hints));
  return c;
}

}  // namespace ampfuse::tools
