// Structural and type checks of a graph; names the node and the problem.
#pragma once

#include "ir/graph.h"

namespace ampfuse::ir {

// Throws ampfuse::Error on the first problem: an unknown op, a wrong input or output count,
// an input that refers to a later node (a cycle) or a missing output, attributes that do
// not fit the op's schema, two variables with one name, a graph output out of range, or
// (once types are present) output types that differ from what the op's inference gives.
void verify(const Graph& g);

}  // namespace ampfuse::ir
