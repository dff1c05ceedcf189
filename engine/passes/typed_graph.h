// Passes that read types run type inference first when a graph arrives without them.
#pragma once

#include "ir/graph.h"

namespace ampfuse::engine {

// Runs ir::infer_types unless every node already has its output types (a graph parsed
// from untyped text, or built without inference, has none). Throws what inference throws.
void infer_if_untyped(ir::Graph& g);

}  // namespace ampfuse::engine
