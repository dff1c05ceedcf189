#include "engine/passes/dce.h"

#include "engine/passes/remove_unused.h"

namespace ampfuse::engine {

bool dce(ir::Graph& g) {
  return remove_unused(g, [&](int32_t node) { return !g.nodes[node].is_var(); }) > 0;
}

}  // namespace ampfuse::engine
