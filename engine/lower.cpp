#include "engine/lower.h"

#include "engine/planning/row_fusion.h"

#include "engine/passes/amp_convert.h"
#include "engine/passes/cast_fold.h"
#include "engine/passes/compute_in_f32.h"
#include "engine/passes/dce.h"
#include "engine/passes/fold_batchnorm.h"
#include "engine/passes/layout_optimize.h"
#include "engine/passes/pipeline.h"
#include "engine/passes/typed_graph.h"
#include "ir/dump.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace ampfuse::engine {

namespace {

int count_casts(const ir::Graph& g) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), ir::is_cast));
}

int count_params_in(const ir::Graph& g, ir::DType t) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) {
    return n.is_var() && n.role == ir::VarRole::param && !n.outputs.empty() && n.outputs[0].dtype == t;
  }));
}

// Casts read by more than one op: converted once for all their readers.
int count_shared_casts(const ir::Graph& g) {
  const std::map<ir::ValueRef, int> uses = ir::use_counts(g);
  int shared = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i)
    if (ir::is_cast(g.nodes[i]) && uses.count({i, 0}) && uses.at({i, 0}) > 1) ++shared;
  return shared;
}

void count_precisions(const ir::Graph& g, ir::DType target, AmpStats& s) {
  for (const ir::Node& n : g.nodes) {
    if (n.is_var() || ir::is_cast(n)) continue;
    const auto any_output = [&](auto pred) { return std::any_of(n.outputs.begin(), n.outputs.end(), pred); };
    const bool low = any_output([&](const ir::TensorType& t) { return t.dtype == target; });
    const bool has_float = any_output([](const ir::TensorType& t) { return ir::is_float(t.dtype); });
    if (low)
      ++s.lp16_nodes;
    else if (has_float)
      ++s.fp32_nodes;
  }
}

// The graph steps: `until_dce` stops after dce (convert_for_amp). The AMP steps run as one
// pipeline and the inference rewrites as another, so that AMP's counts are of the converted
// graph alone.
// With LowerOptions::backward, `forward_nodes` receives the names of the nodes autodiff
// differentiated (the forward graph's).
ir::Graph run_graph_steps(ir::Graph g, const LowerOptions& opts, bool until_dce, LowerStats& stats,
                          std::set<std::string>* forward_nodes = nullptr) {
  std::optional<AmpPolicy> policy;
  if (opts.amp) policy.emplace(*opts.amp);  // bad options fail before any step runs
  // Asked for through LowerOptions or, as before there was an f32 one, the AMP options.
  const std::string layout = !opts.layout.empty() ? opts.layout : opts.amp ? opts.amp->layout : std::string();
  AmpStats amp;
  int casts_before_fold = 0, params_low_before = 0;

  // AMP decides from every value's type, so it infers them afresh; otherwise a typed graph
  // (an executable's usual input) keeps its types.
  std::vector<PassStep> steps = {
      {"infer-types", [&](ir::Graph& x) {
         opts.amp ? ir::infer_types(x) : infer_if_untyped(x);
         return true;
       }}};
  if (opts.amp) {
    steps.push_back({"amp-convert", [&](ir::Graph& x) {
                       for (const ir::Node& n : x.nodes)
                         if (!n.is_var()) ++amp.class_counts[std::string(ir::amp_class_name(policy->node_class(n)))];
                       params_low_before = count_params_in(x, opts.amp->target);
                       amp.casts_inserted = amp_convert(x, *opts.amp);
                       return true;
                     }});
    steps.push_back({"cast-fold", [&](ir::Graph& x) {
                       casts_before_fold = count_casts(x);
                       cast_fold(x);
                       return true;
                     }});
  }
  if (!layout.empty())
    steps.push_back({"layout-optimize", [&](ir::Graph& x) {
                       layout_optimize(x, layout);
                       return true;
                     }});
  steps.push_back({"dce", [](ir::Graph& x) { return dce(x); }});
  if (dump_enabled("ir")) fmt::print(stderr, "// ----- input -----\n{}", ir::print_graph(g));
  run_pipeline(g, steps);
  if (opts.amp) {
    amp.casts_final = count_casts(g);
    amp.casts_removed = casts_before_fold - amp.casts_final;
    amp.casts_shared = count_shared_casts(g);
    amp.params_offline = count_params_in(g, opts.amp->target) - params_low_before;
    count_precisions(g, opts.amp->target, amp);
    stats.amp = std::move(amp);
  }
  if (until_dce) return g;

  std::optional<size_t> model_outputs;
  if (opts.training) {
    if (opts.fold_batchnorm) fail("fold_batchnorm and training exclude each other: training BatchNorm uses batch statistics");
    if (opts.epilogues_run_fused) fail("fused epilogues and training exclude each other: _fused_conv and _fused_fc have no gradient");
    model_outputs = g.outputs.size();
    run_pipeline(g, {{"training-mode", [&](ir::Graph& x) {
                        to_training_mode(x, *opts.training);
                        return true;
                      }}});
  }
  if (opts.backward) {
    if (opts.fold_batchnorm) fail("fold_batchnorm and backward exclude each other: folding removes the BatchNorm params");
    if (opts.epilogues_run_fused) fail("fused epilogues and backward exclude each other: _fused_conv and _fused_fc have no gradient");
    run_pipeline(g, {{"autodiff", [&](ir::Graph& x) {
                        BackwardOptions bo = *opts.backward;
                        if (model_outputs && !bo.heads) bo.heads = model_outputs;  // not the moving statistics
                        if (forward_nodes)
                          for (const ir::Node& n : x.nodes) forward_nodes->insert(n.name);
                        BackwardGraph bg = build_backward(std::move(x), bo);
                        x = std::move(bg.graph);
                        stats.forward_outputs = bg.num_forward_outputs;
                        stats.gradient_of = std::move(bg.gradient_of);
                        stats.head_grads = std::move(bg.head_grads);
                        return true;
                      }}});
  }
  std::vector<PassStep> inference;
  if (opts.fold_batchnorm)
    inference.push_back({"fold-batchnorm", [&](ir::Graph& x) {
                           stats.folded_batchnorms = fold_batchnorm(x);
                           return true;
                         }});
  if (opts.epilogues_run_fused)
    inference.push_back({"epilogue-fusion", [&](ir::Graph& x) {
                           stats.fused_epilogues = fuse_epilogues(x, opts.epilogues_run_fused, opts.relu_post_ops);
                           return stats.fused_epilogues > 0;  // 0: the graph is untouched
                         }});
  if (opts.computes_in_f32)
    inference.push_back(
        {"compute-in-f32", [&](ir::Graph& x) {
          stats.widened_external = compute_in_f32(x, opts.computes_in_f32);
          return stats.widened_external > 0;  // 0: the graph is untouched
        }});
  run_pipeline(g, inference);
  return g;
}

// Which nodes compute the backward pass: those autodiff added (not in `forward_nodes`) that
// read a backward value or a head gradient. Nodes later steps added (casts of
// compute-in-f32) are forward when all they read is.
std::vector<bool> backward_nodes(const ir::Graph& g, const std::set<std::string>& forward_nodes) {
  std::vector<bool> backward(g.nodes.size(), false);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const ir::Node& node = g.nodes[n];
    if (forward_nodes.count(node.name)) continue;
    backward[n] = node.is_var() || std::any_of(node.inputs.begin(), node.inputs.end(),
                                               [&](ir::ValueRef in) { return backward[in.node]; });
  }
  return backward;
}

// The forward values (variables aside) that steps with backward nodes load.
void count_saved_for_backward(const ir::Graph& g, const Plan& plan, const std::set<std::string>& forward_nodes,
                              LowerStats& stats) {
  const std::vector<bool> backward = backward_nodes(g, forward_nodes);
  std::set<ir::ValueRef> saved;
  for (const PlanStep& step : plan.steps) {
    std::vector<int32_t> nodes;
    if (std::holds_alternative<ViewStep>(step)) continue;  // an alias: its readers load
    if (const auto* k = std::get_if<FusedKernel>(&step)) nodes = k->nodes;
    else nodes = {step_node(step)};
    if (std::none_of(nodes.begin(), nodes.end(), [&](int32_t n) { return backward[n]; })) continue;
    for (ir::ValueRef v : step_reads(g, step))
      if (!g.nodes[v.node].is_var() && !backward[v.node]) saved.insert(v);
  }
  stats.saved_values = static_cast<int>(saved.size());
  for (ir::ValueRef v : saved)
    stats.saved_bytes += ir::num_elements(g.type(v).shape) * static_cast<int64_t>(ir::dtype_size(g.type(v).dtype));
}

}  // namespace

Lowered lower(ir::Graph g, const LowerOptions& opts) {
  Lowered out;
  std::set<std::string> forward_nodes;
  out.graph = run_graph_steps(std::move(g), opts, false, out.stats, &forward_nodes);
  PlannerOptions planner = opts.planner;
  if (opts.backward) planner.backward_nodes = backward_nodes(out.graph, forward_nodes);
  out.plan = with_context("plan-fusion", [&] { return plan_fusion(out.graph, planner); });
  if (planner.row_kernels)
    out.stats.row_kernels = with_context("row-kernels", [&] { return fuse_row_kernels(out.graph, out.plan); });
  if (opts.planner.recompute)
    out.stats.recomputed =
        with_context("recompute", [&] { return recompute_in_readers(out.graph, out.plan, planner); });
  if (opts.backward) count_saved_for_backward(out.graph, out.plan, forward_nodes, out.stats);
  if (dump_enabled("plan")) fmt::print(stderr, "// ----- plan -----\n{}", print_plan(out.graph, out.plan));
  return out;
}

ir::Graph convert_for_amp(ir::Graph g, const AmpOptions& opts, AmpStats* stats) {
  LowerOptions lo;
  lo.amp = opts;
  LowerStats ls;
  ir::Graph out = run_graph_steps(std::move(g), lo, true, ls);
  if (stats) *stats = std::move(*ls.amp);
  return out;
}

}  // namespace ampfuse::engine
