#include "engine/passes/typed_graph.h"

#include "ir/type_inference.h"

#include <algorithm>

namespace ampfuse::engine {

void infer_if_untyped(ir::Graph& g) {
  const bool typed = std::all_of(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) { return !n.outputs.empty(); });
  if (!typed) ir::infer_types(g);
}

}  // namespace ampfuse::engine
