#include "engine/passes/dce.h"

#include "engine/passes/graph_rebuilder.h"

#include <algorithm>
#include <vector>

namespace ampfuse::engine {

bool dce(ir::Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (ir::ValueRef o : g.outputs) live[o.node] = true;
  for (int32_t i = static_cast<int32_t>(g.nodes.size()) - 1; i >= 0; --i) {
    if (g.nodes[i].is_var()) live[i] = true;
    if (!live[i]) continue;
    for (ir::ValueRef in : g.nodes[i].inputs) live[in.node] = true;
  }
  if (std::find(live.begin(), live.end(), false) == live.end()) return false;
  GraphRebuilder rb(g);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i)
    if (live[i]) rb.copy(i);
  g = rb.finish();
  return true;
}

}  // namespace ampfuse::engine
