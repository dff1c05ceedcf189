#include "tools/model_steps.h"

#include "engine/lower.h"
#include "ir/error.h"
#include "ir/mxnet_json.h"
#include "ir/mxnet_type_flags.h"
#include "ir/op_registry.h"
#include "tools/amp_args.h"
#include "tools/model_input.h"

#include <algorithm>

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
                                const std::map<std::string, std::string>& open_hints,
                                const std::map<std::string, std::string>& open_weight_hints) {
  const bool unhinted_input =
      std::any_of(open_hints.begin(), open_hints.end(), [](const auto& hint) { return hint.second.empty(); });
  for (ir::Node& n : g.nodes) {
    if (!n.is_var()) continue;
    if (n.role != ir::VarRole::input) {
      if (const auto open = open_weight_hints.find(n.name);
          unhinted_input && open != open_weight_hints.end() && !n.outputs.empty()) {
        n.hints["__shape__"] = open->second;
        n.hints["__dtype__"] = std::to_string(ir::mxnet_flag_of(n.outputs[0].dtype));
        n.outputs.clear();
      }
      continue;
    }
    const auto it = file_types.find(n.name);
    if (const auto open = open_hints.find(n.name); open != open_hints.end() && !n.outputs.empty()) {
      if (!open->second.empty()) n.hints["__shape__"] = open->second;
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
  p.fused_epilogues = cs.fused_epilogues;
  p.row_kernels = cs.row_kernels;
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
  p.guarded_steps = cs.guarded_steps;
  p.guards_by_scan = cs.guards_by_scan;
  p.host_round_trips = cs.host_round_trips;
  p.fallbacks = cs.fallbacks;
  p.slow_external = cs.slow_external;
  return p;
}

std::optional<ir::Shape> implied_input_shape(const ir::Graph& g, int32_t var, const ParamsFile* params,
                                             int64_t open_batch, int64_t open_extent) {
  // The shape of input `slot` of node `n` where the file or `params` gives it.
  auto known_shape = [&](const ir::Node& n, size_t slot) -> std::optional<ir::Shape> {
    if (slot >= n.inputs.size()) return std::nullopt;
    const ir::Node& w = g.nodes[n.inputs[slot].node];
    if (!w.outputs.empty()) return w.outputs[n.inputs[slot].index].shape;
    if (params && w.is_var())
      if (const auto p = params->by_variable.find(w.name); p != params->by_variable.end()) return p->second.shape();
    return std::nullopt;
  };
  // Operands broadcast with the value on the way (ssd's data * per-channel scale): their
  // extents other than 1 are the value's too, where the ranks agree.
  std::vector<ir::Shape> broadcast_with;
  auto with_operands = [&](ir::Shape shape) {
    for (const ir::Shape& other : broadcast_with)
      if (other.size() == shape.size())
        for (size_t d = 0; d < shape.size(); ++d)
          if (other[d] != 1) shape[d] = other[d];
    return shape;
  };
  const ir::OpRegistry& registry = ir::OpRegistry::global();
  ir::ValueRef value{var, 0};
  for (int32_t i = var + 1; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.is_var() || std::find(n.inputs.begin(), n.inputs.end(), value) == n.inputs.end()) continue;
    const bool elementwise = [&] {
      const ir::OpDef* def = registry.find(n.op);
      return def && def->kind == ir::OpKind::elementwise && def->output_count(n.attrs) == 1;
    }();
    if (n.inputs[0] != value && !elementwise) return std::nullopt;  // read as a weight, a label, an index
    if (n.op == "Convolution" || n.op == "Deconvolution" || n.op == "Pooling") {
      if (!n.attrs.has("kernel") || n.attrs.get_ints("kernel").empty()) return std::nullopt;
      ir::Shape shape(2 + n.attrs.get_ints("kernel").size(), open_extent);
      shape[0] = open_batch;
      const std::optional<ir::Shape> weight = n.op == "Pooling" ? std::nullopt : known_shape(n, 1);
      if (weight && weight->size() == shape.size()) {
        const int64_t groups = n.attrs.has("num_group") ? n.attrs.get_int("num_group") : 1;
        const bool channels_last = n.attrs.has("layout") && !n.attrs.is_none("layout") &&
                                   n.attrs.get_string("layout").back() == 'C';
        // Convolution's weight is (O, C/g, k...), Deconvolution's (C, O/g, k...).
        shape[channels_last ? shape.size() - 1 : 1] = n.op == "Convolution" ? (*weight)[1] * groups : (*weight)[0];
      }
      return with_operands(shape);
    }
    if (n.op == "FullyConnected") {
      const std::optional<ir::Shape> weight = known_shape(n, 1);
      return with_operands(ir::Shape{open_batch, weight && weight->size() == 2 ? (*weight)[1] : open_extent});
    }
    if (n.op == "Embedding") return ir::Shape{open_batch, open_extent};
    if (n.op == "RNN") return with_operands(ir::Shape{open_extent, open_batch, open_extent});  // TNC
    // Ops whose output 0 has their data's shape: the reader after them speaks for it too.
    static const std::set<std::string> same_shape = {"BatchNorm", "InstanceNorm", "LayerNorm", "Dropout"};
    if (!elementwise && !same_shape.count(n.op)) return std::nullopt;
    if (elementwise)
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (n.inputs[k] != value)
          if (const std::optional<ir::Shape> other = known_shape(n, k)) broadcast_with.push_back(*other);
    value = ir::ValueRef{i, 0};
  }
  return std::nullopt;
}

ConvertedModel convert_model(ir::Graph g, const std::set<std::string>& unreached,
                             const std::map<std::string, ir::Shape>& shapes, const engine::AmpOptions& amp,
                             const ParamsFile* params, const std::map<std::string, std::string>& open_hints) {
  check_excluded_nodes(std::optional<engine::AmpOptions>(amp), g);
  const auto file_types = input_types_of_file(g);
  std::map<std::string, std::string> open_weight_hints;  // what import left untyped
  for (const ir::Node& n : g.nodes)
    if (n.is_var() && n.role != ir::VarRole::input && n.hints.count("__shape__"))
      open_weight_hints[n.name] = n.hints.at("__shape__");
  with_context("--shape", [&] { set_variable_shapes(g, shapes, unreached); });
  infer_types_naming_missing_shapes(g);
  if (params) check_params_against_model(*params, g);
  ConvertedModel c;
  c.nodes_before = g.nodes.size();
  c.graph = engine::convert_for_amp(std::move(g), amp, &c.stats);
  c.json = ir::export_mxnet_json(with_file_input_hints(c.graph, file_types, open_hints, open_weight_hints));
  return c;
}

}  // namespace ampfuse::tools
