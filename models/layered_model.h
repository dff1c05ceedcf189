// A synthetic network of any size, for planner benchmarks and scale tests.
#pragma once

#include "ir/graph.h"

#include <cstdint>

namespace ampfuse::models {

// At least `min_nodes` nodes (variables included) of small [1,8,4,4] activations, types
// inferred: a repeating cycle of four block kinds that between them have what the fusion
// planner meets in real networks:
//   - residual convolution blocks (Convolution, BatchNorm, relu, add; ResNet);
//   - feed-forward blocks (Flatten, FullyConnected, GELU, FullyConnected, Reshape, add;
//     a transformer's MLP);
//   - gates (sigmoid, multiply, a bf16 round trip, tanh) whose product feeds two readers
//     and, every fourth time, is a graph output;
//   - two convolutions of one value added to that value (inception; the planner must not
//     fuse the add with its input across the convolutions);
// and every eighth block adds the output of the block eight back (a long skip). The
// structure depends only on `min_nodes`.
ir::Graph build_layered_model(int64_t min_nodes);

}  // namespace ampfuse::models
