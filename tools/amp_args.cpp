#include "tools/amp_args.h"

#include "ir/error.h"

#include <set>
#include <string_view>

namespace ampfuse::tools {

std::optional<engine::AmpOptions> AmpArgs::options() const {
  engine::AmpOptions o;
  if (amp == "off") {
    const bool overridden = !lp16_ops.empty() || !fp32_ops.empty() || !widest_ops.empty() || !neutral_ops.empty() ||
                            !exclude.empty() || cast_params_offline || cast_narrow || !layout.empty();
    if (overridden) fail("--amp off: the AMP options (op lists, --exclude, --cast-params-offline, --layout) need --amp bf16 or fp16");
    return std::nullopt;
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
  if (!layout.empty() && layout != "nhwc") fail("--layout {}: the only layout is nhwc", layout);
  o.layout = layout;
  return o;
}

void check_excluded_nodes(const std::optional<engine::AmpOptions>& amp, const ir::Graph& g) {
  if (!amp || amp->excluded_nodes.empty()) return;
  std::set<std::string_view> names;
  for (const ir::Node& n : g.nodes)
    if (!n.is_var()) names.insert(n.name);
  for (const std::string& name : amp->excluded_nodes)
    if (!names.count(name)) fail("--exclude {}: the model has no op node of that name", name);
}

CLI::Option* add_amp_args(CLI::App& cmd, AmpArgs& a, const std::string& amp_help, bool overrides,
                          const std::string& amp_values) {
  CLI::Option* amp = cmd.add_option("--amp", a.amp, amp_help)->type_name(amp_values);
  if (!overrides) return amp;
  cmd.add_option("--lp16-ops", a.lp16_ops, "Ops that run in the low-precision type (comma-separated)")
      ->delimiter(',')
      ->type_name("OP,...");
  cmd.add_option("--fp32-ops", a.fp32_ops, "Ops that stay in f32")->delimiter(',')->type_name("OP,...");
  cmd.add_option("--widest-ops", a.widest_ops, "Ops that run in the widest type of their inputs (amp_multicast)")
      ->delimiter(',')
      ->type_name("OP,...");
  cmd.add_option("--neutral-ops", a.neutral_ops, "Ops that run in whatever type their inputs have")
      ->delimiter(',')
      ->type_name("OP,...");
  cmd.add_option("--exclude", a.exclude, "Node names that stay in f32")->delimiter(',')->type_name("NAME,...");
  cmd.add_flag("--cast-params-offline", a.cast_params_offline,
               "Store a weight in the low-precision type when every reader casts it");
  cmd.add_flag("--cast-narrow", a.cast_narrow, "Widest-type ops with mixed inputs run in low precision");
  cmd.add_option("--layout", a.layout, "Put convolution regions in channels-last (nhwc)")->type_name("nhwc");
  return amp;
}

}  // namespace ampfuse::tools
