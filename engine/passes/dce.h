// dce: dead-code elimination.
#pragma once

#include "ir/graph.h"

namespace ampfuse::engine {

// Removes op nodes whose outputs no graph output depends on. Variables stay (they are
// the graph's interface), even when nothing reads them. Returns whether anything changed.
bool dce(ir::Graph& g);

}  // namespace ampfuse::engine
