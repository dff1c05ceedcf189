#include "tools/amp_args.h"

#include "ir/error.h"

#include <set>
#include <string_view>

namespace ampfuse::tools {

std::optional<engine::AmpOptions> AmpArgs::options() const {
  engine::AmpOptions o;
  if (!layout.empty() && layout != "nhwc" && layout != "keep" && layout != "auto")
    fail("--layout {}: expected auto, nhwc or keep", layout);
  if (amp == "off") {
    const bool overridden = !lp16_ops.empty() || !fp32_ops.empty() || !widest_ops.empty() || !neutral_ops.empty() ||
                            !exclude.empty() || cast_params_offline || cast_narrow;
    if (overridden) fail("--amp off: the AMP options (op lists, --exclude, --cast-params-offline) need --amp bf16 or fp16");
    return std::nullopt;  // --layout applies all the same (PlanArgs::executor_options)
  }
  if (amp == "bf16") o.target = ir::DType::bf16;
  else if (amp == "fp16") o.target = ir::DType::f16;
  else fail("--amp {}: expected off, bf16 or fp16", amp);
  o.lp16_ops = lp16_ops;
  o.fp32_ops = fp32_ops;
  o.widest_ops = widest_ops;
  o.neutral_ops = neutral_ops;
  o.excluded_nodes = exclude;
  o.cast_params_offline = cast_params_offline;
  o.cast_narrow = cast_narrow;
  o.layout = layout == "nhwc" ? layout : "";  // what `convert` writes; run's auto: PlanArgs
  return o;
}

engine::AmpOptions AmpArgs::convert_options() const {
  if (amp != "bf16" && amp != "fp16") fail("--amp {}: expected bf16 or fp16 (convert writes a low-precision model)", amp);
  if (layout == "auto")
    fail("--layout auto: convert writes the model's own layout (keep, the default) or channels-last (nhwc)");
  return *options();
}

void check_excluded_nodes(const std::optional<engine::AmpOptions>& amp, const ir::Graph& g) {
  if (!amp || amp->excluded_nodes.empty()) return;
  std::set<std::string_view> names;
  for (const ir::Node& n : g.nodes)
    if (!n.is_var()) names.insert(n.name);
  for (const std::string& name : amp->excluded_nodes)
    if (!names.count(name)) fail("--exclude {}: the model has no op node of that name", name);
}

}  // namespace ampfuse::tools
