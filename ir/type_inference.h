// Graph-level dtype and shape inference.
#pragma once

#include "ir/graph.h"

namespace ampfuse::ir {

// Fills Node::outputs for every node (and the types of variables that consumers determine,
// such as weights), running each op's InferFn in topological order until nothing changes.
// Input variables must have types. Throws ampfuse::Error naming the node
// ("node 'conv0' (Convolution): ...") on any inconsistency or on a value that stays unknown.
void infer_types(Graph& g);

}  // namespace ampfuse::ir
