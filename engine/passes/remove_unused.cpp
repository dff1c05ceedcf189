#include "engine/passes/remove_unused.h"

#include "engine/passes/graph_rebuilder.h"

#include <vector>

namespace ampfuse::engine {

int remove_unused(ir::Graph& g, const std::function<bool(int32_t node)>& removable) {
  std::vector<bool> live(g.nodes.size(), false);
  for (ir::ValueRef o : g.outputs) live[o.node] = true;
  int removed = 0;
  for (int32_t i = static_cast<int32_t>(g.nodes.size()) - 1; i >= 0; --i) {
    if (!removable(i)) live[i] = true;
    if (!live[i]) {
      ++removed;
      continue;
    }
    for (ir::ValueRef in : g.nodes[i].inputs) live[in.node] = true;
  }
  if (removed == 0) return 0;
  GraphRebuilder rb(g);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i)
    if (live[i]) rb.copy(i);
  g = rb.finish();
  return removed;
}

}  // namespace ampfuse::engine
