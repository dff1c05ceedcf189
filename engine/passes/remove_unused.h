// Deleting the nodes a pass made unused, and only those.
#pragma once

#include "ir/graph.h"

#include <functional>

namespace ampfuse::engine {

// Removes the nodes for which `removable(index)` is true and whose outputs nothing kept reads
// (nodes, graph outputs); every other node stays, used or not (unlike dce, which a pass
// must not run on the user's dead code behind the pipeline's back). Returns the count.
int remove_unused(ir::Graph& g, const std::function<bool(int32_t node)>& removable);

}  // namespace ampfuse::engine
