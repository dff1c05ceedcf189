#include "engine/passes/amp_pipeline.h"

#include "engine/passes/amp_convert.h"
#include "engine/passes/cast_fold.h"
#include "engine/passes/dce.h"
#include "engine/passes/layout_optimize.h"
#include "engine/passes/pipeline.h"
#include "ir/op_registry.h"
#include "ir/type_inference.h"

#include <algorithm>

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

}  // namespace

ir::Graph convert_for_amp(ir::Graph g, const AmpOptions& opts, AmpStats* stats) {
  const AmpPolicy policy(opts);  // bad options fail before any pass runs
  AmpStats s;
  int casts_before_fold = 0;
  int params_low_before = 0;
  std::vector<PassStep> steps = {
      {"infer-types",
       [&](ir::Graph& x) {
         ir::infer_types(x);
         for (const ir::Node& n : x.nodes)
           if (!n.is_var()) ++s.class_counts[std::string(ir::amp_class_name(policy.node_class(n)))];
         params_low_before = count_params_in(x, opts.target);
       }},
      {"amp-convert", [&](ir::Graph& x) { s.casts_inserted = amp_convert(x, opts); }},
      {"cast-fold",
       [&](ir::Graph& x) {
         casts_before_fold = count_casts(x);
         cast_fold(x);
       }},
  };
  if (!opts.layout.empty())
    steps.push_back({"layout-optimize", [&](ir::Graph& x) { layout_optimize(x, opts.layout); }});
  steps.push_back({"dce", [](ir::Graph& x) { dce(x); }});
  run_pipeline(g, steps);

  s.casts_final = count_casts(g);
  s.casts_removed = casts_before_fold - s.casts_final;
  s.params_offline = count_params_in(g, opts.target) - params_low_before;
  count_precisions(g, opts.target, s);
  if (stats) *stats = std::move(s);
  return g;
}

}  // namespace ampfuse::engine
