#include "tools/amp_args.h"

#include "ir/error.h"

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

}  // namespace ampfuse::tools
