// The AMP pipeline: one straight line of passes from an f32 graph to a mixed-precision one.
#pragma once

#include "engine/passes/amp_options.h"
#include "ir/graph.h"

#include <map>
#include <string>

namespace ampfuse::engine {

// What a conversion did, for `ampfuse convert --json` and the logs.
struct AmpStats {
  int casts_inserted = 0;  // by amp-convert
  int casts_removed = 0;   // by cast-fold and dce, counting casts of the input graph too
  int casts_final = 0;     // Cast / amp_cast nodes in the result
  int params_offline = 0;  // params now stored in the target type
  int lp16_nodes = 0;      // op nodes (casts aside) with an output in the target type
  int fp32_nodes = 0;      // op nodes (casts aside) with float outputs, none in the target type
  // Op nodes of the input graph by the class they run as ("lowp", "fp32", "widest",
  // "neutral"; conditional ones resolved, excluded ones counted as "fp32").
  std::map<std::string, int> class_counts;
};

// Runs, through run_pipeline (verified after each pass, dumped with AMPFUSE_DUMP=ir):
//   infer-types -> amp-convert -> cast-fold -> layout-optimize (when opts.layout is set)
//   -> dce
// and returns the converted graph; fills `stats` when given. Throws ampfuse::Error for bad
// options (see AmpPolicy) or a graph that does not infer.
ir::Graph convert_for_amp(ir::Graph g, const AmpOptions& opts, AmpStats* stats = nullptr);

}  // namespace ampfuse::engine
