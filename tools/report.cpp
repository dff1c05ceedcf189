#include "tools/report.h"

#include "tools/model_input.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ampfuse::tools {

namespace {

nlohmann::json type_fields(const std::optional<ir::TensorType>& t) {
  if (!t) return {{"shape", nullptr}, {"dtype", nullptr}};
  return {{"shape", t->shape}, {"dtype", std::string(ir::dtype_name(t->dtype))}};
}

nlohmann::json named_type_json(const NamedType& v) {
  nlohmann::json j = {{"name", v.name}};
  j.update(type_fields(v.type));
  return j;
}

nlohmann::json optional_number(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

std::string type_text(const std::optional<ir::TensorType>& t) { return t ? ir::type_str(*t) : "unknown shape"; }

size_t name_width(const std::vector<NamedType>& vs) {
  size_t w = 0;
  for (const NamedType& v : vs) w = std::max(w, v.name.size());
  return w;
}

std::string ops_text(const ModelSummary& m) {
  std::vector<std::pair<std::string, int>> ops(m.ops.begin(), m.ops.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> items;
  for (const auto& [op, count] : ops) items.push_back(fmt::format("{} {}", op, count));
  return fmt::format("{}", fmt::join(items, ", "));
}

std::string model_header(const ModelSummary& m) {
  return fmt::format("model:   {}\nnodes:   {} ({} ops, {} variables)\nops:     {}\n", m.model, m.nodes, m.op_nodes,
                     m.nodes - m.op_nodes, ops_text(m));
}

nlohmann::json model_json(const ModelSummary& m) {
  return {{"model", m.model}, {"nodes", m.nodes}, {"op_nodes", m.op_nodes}, {"ops", m.ops}};
}

std::string number_text(const std::optional<double>& v) { return v ? fmt::format("{:.6g}", *v) : "-"; }

}  // namespace

ModelSummary summarize_model(const ir::Graph& g, std::string model) {
  ModelSummary m;
  m.model = std::move(model);
  m.nodes = g.nodes.size();
  m.ops = op_histogram(g);
  for (const auto& [op, count] : m.ops) m.op_nodes += static_cast<size_t>(count);
  return m;
}

InfoReport make_info_report(const ir::Graph& g, std::string model) {
  InfoReport r;
  r.model = summarize_model(g, std::move(model));
  for (const ir::Node* n : input_variables(g))
    r.inputs.push_back({n->name, n->outputs.empty() ? std::nullopt : std::optional(n->outputs[0])});
  int64_t elements = 0;
  bool all_known = true;
  for (const ir::Node& n : g.nodes) {
    if (!n.is_var() || n.role == ir::VarRole::input) continue;
    ++(n.role == ir::VarRole::param ? r.params : r.aux);
    if (n.outputs.empty())
      all_known = false;
    else
      elements += ir::num_elements(n.outputs[0].shape);
  }
  if (all_known) r.weight_elements = elements;
  std::vector<NamedType> outputs;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const ir::Node& n = g.node(g.outputs[k]);
    if (static_cast<size_t>(g.outputs[k].index) >= n.outputs.size()) return r;
    outputs.push_back({g.output_name(k), n.outputs[g.outputs[k].index]});
  }
  r.outputs = std::move(outputs);
  return r;
}

nlohmann::json to_json(const InfoReport& r) {
  nlohmann::json j = model_json(r.model);
  j["inputs"] = nlohmann::json::array();
  for (const NamedType& v : r.inputs) j["inputs"].push_back(named_type_json(v));
  j["params"] = {{"count", r.params}, {"aux", r.aux},
                 {"elements", r.weight_elements ? nlohmann::json(*r.weight_elements) : nlohmann::json()}};
  if (r.params_file)
    j["params_file"] = {{"path", r.params_file->path}, {"arrays", r.params_file->arrays}, {"unbound", r.params_file->unbound}};
  if (r.outputs) {
    j["outputs"] = nlohmann::json::array();
    for (const NamedType& v : *r.outputs) j["outputs"].push_back(named_type_json(v));
  } else {
    j["outputs"] = nullptr;
    j["missing_shapes"] = r.missing_shapes;
    j["error"] = r.inference_error;
  }
  return j;
}

std::string to_text(const InfoReport& r) {
  std::string out = model_header(r.model);
  out += "inputs:\n";
  const size_t w = name_width(r.inputs);
  for (const NamedType& v : r.inputs) out += fmt::format("  {:<{}}  {}\n", v.name, w, type_text(v.type));
  out += fmt::format("weights: {} params, {} aux states, {} elements\n", r.params, r.aux,
                     r.weight_elements ? fmt::format("{}", *r.weight_elements) : "unknown number of");
  if (const auto& p = r.params_file)
    out += fmt::format("params file: {}: {} arrays, {} weights without one{}{}\n", p->path, p->arrays, p->unbound.size(),
                       p->unbound.empty() ? "" : ": ", fmt::join(p->unbound, ", "));
  if (r.outputs) {
    out += "outputs:\n";
    const size_t ow = name_width(*r.outputs);
    for (const NamedType& v : *r.outputs) out += fmt::format("  {:<{}}  {}\n", v.name, ow, type_text(v.type));
    return out;
  }
  out += "outputs: unknown\n";
  if (!r.missing_shapes.empty()) {
    std::vector<std::string> flags;
    for (const std::string& name : r.missing_shapes) flags.push_back(fmt::format("--shape {}=D0,D1,...", name));
    out += fmt::format("  give the input shapes to infer them: {}\n", fmt::join(flags, " "));
  } else {
    out += fmt::format("  {}\n", r.inference_error);
  }
  return out;
}

TensorSummary summarize_tensor(std::string name, const runtime::Tensor& t) {
  TensorSummary s{std::move(name), t.type(), {}, {}, {}, 0};
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < t.size(); ++i) {
    const double v = t.get_f64(i);
    if (!std::isfinite(v)) {
      ++s.nonfinite;
      continue;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    s.l2_norm += v * v;
    ++finite;
  }
  s.l2_norm = std::sqrt(s.l2_norm);
  if (finite > 0) {
    s.min = lo;
    s.max = hi;
    s.mean = sum / static_cast<double>(finite);
  }
  return s;
}

nlohmann::json to_json(const RunReport& r) {
  nlohmann::json j = model_json(r.model);
  j["engine"] = r.engine;
  j["seed"] = r.seed;
  j["runs"] = r.runs;
  j["run_ms"] = r.run_ms;
  j["solo_runs"] = r.solo_runs;
  j["nonfinite_reference_runs"] = r.nonfinite_reference_runs;
  j["first_run_ms"] = r.first_run_ms ? nlohmann::json(*r.first_run_ms) : nlohmann::json(nullptr);
  j["baseline_f32_unfused_ms"] = optional_number(r.baseline_ms);
  j["max_abs_error"] = optional_number(r.max_abs_error);
  j["max_rel_error"] = optional_number(r.max_rel_error);
  if (r.amp) {
    const AmpSummary& a = *r.amp;
    j["amp"] = {{"target", a.target},           {"casts_inserted", a.casts_inserted}, {"casts_removed", a.casts_removed},
                {"casts_final", a.casts_final}, {"casts_reused", a.casts_reused},     {"params_offline", a.params_offline},
                {"lp16_nodes", a.lp16_nodes},   {"fp32_nodes", a.fp32_nodes}};
  } else {
    j["amp"] = nullptr;
  }
  if (r.plan) {
    const PlanSummary& p = *r.plan;
    nlohmann::json per_kernel = nlohmann::json::object();
    for (const auto& [ops, count] : p.ops_per_kernel) per_kernel[std::to_string(ops)] = count;
    j["plan"] = {{"fused", p.fused},
                 {"device", p.device},
                 {"kernels", p.kernels},
                 {"fused_ops", p.fused_nodes},
                 {"external_ops", p.external_ops},
                 {"views", p.views},
                 {"constant_steps", p.constant_steps},
                 {"widened_external", p.widened_external},
                 {"folded_batchnorms", p.folded_batchnorms},
                 {"fused_epilogues", p.fused_epilogues},
                 {"row_kernels", p.row_kernels},
                 {"ops_per_kernel", per_kernel},
                 {"compilations", p.compilations},
                 {"kernels_cold", p.kernels_cold},
                 {"kernels_disk", p.kernels_disk},
                 {"kernels_memory", p.kernels_memory},
                 {"compile_cold_ms", p.compile_cold_ms},
                 {"plan_from_disk", p.plan_from_disk},
                 {"plan_ms", p.plan_ms},
                 {"compile_cached_ms", p.compile_cached_ms},
                 {"arena_bytes", p.arena_bytes},
                 {"intermediate_bytes", p.intermediate_bytes},
                 {"in_place", p.in_place},
                 {"onednn_ops", p.onednn_ops},
                 {"guarded_steps", p.guarded_steps},
                 {"guards_by_scan", p.guards_by_scan},
                 {"host_round_trips", p.host_round_trips},
                 {"fallbacks", p.fallbacks},
                 {"slow_external", p.slow_external}};
  } else {
    j["plan"] = nullptr;
  }
  if (r.transfers) {
    const TransferSummary& t = *r.transfers;
    j["transfers"] = {{"uploads", t.uploads},
                      {"upload_bytes", t.upload_bytes},
                      {"downloads", t.downloads},
                      {"download_bytes", t.download_bytes}};
  } else {
    j["transfers"] = nullptr;
  }
  const auto tensors_json = [](const std::vector<TensorSummary>& list, bool norm) {
    nlohmann::json a = nlohmann::json::array();
    for (const TensorSummary& s : list) {
      nlohmann::json o = named_type_json({s.name, s.type});
      o["min"] = optional_number(s.min);
      o["max"] = optional_number(s.max);
      o["mean"] = optional_number(s.mean);
      if (norm) o["l2_norm"] = s.l2_norm;
      o["nonfinite"] = s.nonfinite;
      a.push_back(std::move(o));
    }
    return a;
  };
  j["outputs"] = tensors_json(r.outputs, false);
  if (r.backward) {
    const RunReport::Backward& b = *r.backward;
    j["backward"] = {{"gradients", tensors_json(b.gradients, true)},
                     {"head_grads", b.head_grads},
                     {"forward_ms", optional_number(b.forward_ms)},
                     {"forward_kernels", b.forward_kernels ? nlohmann::json(*b.forward_kernels) : nlohmann::json(nullptr)},
                     {"forward_external_ops",
                      b.forward_external_ops ? nlohmann::json(*b.forward_external_ops) : nlohmann::json(nullptr)},
                     {"saved_values", b.saved_values ? nlohmann::json(*b.saved_values) : nlohmann::json(nullptr)},
                     {"saved_bytes", b.saved_bytes ? nlohmann::json(*b.saved_bytes) : nlohmann::json(nullptr)},
                     {"recomputed_values",
                      b.recomputed_values ? nlohmann::json(*b.recomputed_values) : nlohmann::json(nullptr)},
                     {"recompute_bytes_not_moved", b.recompute_bytes_not_moved
                                                       ? nlohmann::json(*b.recompute_bytes_not_moved)
                                                       : nlohmann::json(nullptr)}};
  } else {
    j["backward"] = nullptr;
  }
  j["saved"] = r.saved_files;
  return j;
}

std::string plan_text(const PlanSummary& p) {
  std::string out;
  std::vector<std::string> sizes;
  for (auto it = p.ops_per_kernel.rbegin(); it != p.ops_per_kernel.rend(); ++it)
    sizes.push_back(fmt::format("{}x{}", it->second, it->first));
  out += fmt::format("plan:    {} on {}: {} kernels holding {} ops", p.fused ? "fused" : "unfused (--no-fuse)", p.device,
                     p.kernels, p.fused_nodes);
  if (!sizes.empty()) out += fmt::format(" (kernels x ops: {})", fmt::join(sizes, " "));
  out += fmt::format(", {} external ops ({} through oneDNN), {} views\n", p.external_ops, p.onednn_ops, p.views);
  if (p.constant_steps > 0)
    out += fmt::format("         {} more steps compute from the weights alone, on the first run only\n",
                       p.constant_steps);
  if (p.widened_external > 0)
    out += fmt::format("         {} external ops computed in f32 (no low-precision oneDNN kernel here), their casts "
                       "fused into the kernels around them\n",
                       p.widened_external);
  if (p.folded_batchnorms > 0)
    out += fmt::format("         BatchNorms folded into the weights and bias of the convolution before each: {}\n",
                       p.folded_batchnorms);
  if (p.fused_epilogues > 0)
    out += fmt::format("         convolutions and FullyConnected ops run with the add and activation after them as oneDNN post-ops: {}\n",
                       p.fused_epilogues);
  if (p.row_kernels > 0)
    out += fmt::format("         softmax, LayerNorm and last-axis reductions as generated row kernels with the kernels around them: {}\n",
                       p.row_kernels);
  if (p.guarded_steps > 0)
    out += fmt::format("         {} oneDNN ops (max pooling and its gradient, softmax) run the reference kernel when their data holds NaN or "
                       "Inf, known from the flags of the kernels writing it{}\n",
                       p.guarded_steps, p.guards_by_scan > 0 ? fmt::format(" ({} by a scan of it)", p.guards_by_scan) : "");
  if (p.host_round_trips > 0)
    out += fmt::format("         {} host steps wait for values computed on the device\n", p.host_round_trips);
  out += fmt::format("memory:  {:.2f} MB arena for {:.2f} MB of intermediates", p.arena_bytes / 1e6,
                     p.intermediate_bytes / 1e6);
  if (p.in_place > 0) out += fmt::format(", {} kernel outputs written over a dead input", p.in_place);
  out += "\n";
  out += fmt::format("kernels: {} compiled (cold {}, disk {}, memory {}) in {:.3f} s",
                     p.kernels_cold + p.kernels_disk + p.kernels_memory, p.kernels_cold, p.kernels_disk,
                     p.kernels_memory, p.compile_cold_ms / 1e3);
  out += p.compile_cached_ms < 0 ? "\n" : fmt::format("; again {:.2f} ms (memory)\n", p.compile_cached_ms);
  out += fmt::format("plan:    {} in {:.2f} ms\n", p.plan_from_disk ? "passes and fusion plan from disk" : "passes and fusion planned",
                     p.plan_ms);
  for (const std::string& f : p.fallbacks) out += fmt::format("WARNING: interpreter fallback: {}\n", f);
  for (const std::string& f : p.slow_external) out += fmt::format("WARNING: slow oneDNN implementation: {}\n", f);
  return out;
}

std::string to_text(const RunReport& r) {
  std::string out = model_header(r.model);
  if (r.amp) {
    const AmpSummary& a = *r.amp;
    out += fmt::format("amp:     {}: {} ops in {}, {} in f32; casts {} inserted, {} folded away, {} left ({} shared by "
                       "several readers), {} weights stored in {}\n",
                       a.target, a.lp16_nodes, a.target, a.fp32_nodes, a.casts_inserted, a.casts_removed, a.casts_final,
                       a.casts_reused, a.params_offline, a.target);
  } else {
    out += "amp:     off (f32)\n";
  }
  if (r.plan) out += plan_text(*r.plan);
  if (r.transfers && (r.transfers->uploads > 0 || r.transfers->downloads > 0))
    out += fmt::format("copies:  a run uploads {} tensors ({:.2f} MB) and downloads {} ({:.2f} MB)\n", r.transfers->uploads,
                       r.transfers->upload_bytes / 1e6, r.transfers->downloads, r.transfers->download_bytes / 1e6);
  out += fmt::format("seed:    {}\n", r.seed);
  out += fmt::format("latency: {:.3f} ms {} (median of {}", r.run_ms, r.engine, r.runs);
  if (r.first_run_ms) out += fmt::format(" after a first run of {:.3f} ms", *r.first_run_ms);
  if (r.solo_runs > 0)
    out += fmt::format("; {} of them solo, after teams of threads waited for cores", r.solo_runs);
  if (r.nonfinite_reference_runs > 0)
    out += fmt::format("; {} of them ran max pooling or softmax on the reference kernel, their data holding NaN or Inf",
                       r.nonfinite_reference_runs);
  out += ")";
  if (r.baseline_ms)
    out += fmt::format("; f32 unfused {:.3f} ms; speed-up {:.2f}x", *r.baseline_ms, *r.baseline_ms / std::max(r.run_ms, 1e-9));
  out += "\n";
  if (r.max_abs_error)
    out += fmt::format("error:   vs f32: largest |difference| {:.3g}, relative to the largest |value| {:.3g}\n",
                       *r.max_abs_error, *r.max_rel_error);
  out += "outputs:\n";
  size_t w = 0;
  for (const TensorSummary& s : r.outputs) w = std::max(w, s.name.size());
  for (const TensorSummary& s : r.outputs) {
    const int64_t n = ir::num_elements(s.type.shape);
    out += fmt::format("  {:<{}}  {}  min {}  max {}  mean {}  finite {}/{}\n", s.name, w, ir::type_str(s.type),
                       number_text(s.min), number_text(s.max), number_text(s.mean), n - s.nonfinite, n);
  }
  if (r.backward) {
    const RunReport::Backward& b = *r.backward;
    if (b.forward_ms) {
      out += fmt::format("backward: forward+backward {:.3f} ms, forward alone {:.3f} ms", r.run_ms, *b.forward_ms);
      if (r.plan && b.forward_kernels)
        out += fmt::format("; the backward adds {} kernels and {} external ops", r.plan->kernels - *b.forward_kernels,
                           r.plan->external_ops - *b.forward_external_ops);
      out += "\n";
    }
    if (b.saved_values)
      out += fmt::format("stored:  {} forward values ({:.2f} MB) kept for the backward pass; {} recomputed in "
                         "backward kernels instead ({:.2f} MB fewer moved per step)\n",
                         *b.saved_values, *b.saved_bytes / 1e6, *b.recomputed_values,
                         *b.recompute_bytes_not_moved / 1e6);
    out += fmt::format("gradients ({} variables; head gradients of ones: {}):\n", b.gradients.size(),
                       b.head_grads.empty() ? std::string("none, the loss gives its own") : fmt::format("{}", fmt::join(b.head_grads, ", ")));
    size_t gw = 0;
    for (const TensorSummary& s : b.gradients) gw = std::max(gw, s.name.size());
    for (const TensorSummary& s : b.gradients) {
      const int64_t n = ir::num_elements(s.type.shape);
      out += fmt::format("  {:<{}}  {}  l2 {}  min {}  max {}  mean {}  finite {}/{}\n", s.name, gw, ir::type_str(s.type),
                         number_text(s.l2_norm), number_text(s.min), number_text(s.max), number_text(s.mean),
                         n - s.nonfinite, n);
    }
  }
  for (const std::string& f : r.saved_files) out += fmt::format("saved:   {}\n", f);
  return out;
}

}  // namespace ampfuse::tools
