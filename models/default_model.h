// The embedded default model that `ampfuse run` (and `make demo`) runs with no MODEL.
#pragma once

#include "ir/graph.h"

namespace ampfuse::models {

// A small real network built with ir::GraphBuilder: a convolution block (Convolution,
// BatchNorm, relu, Pooling) and a transformer-style MLP block (FullyConnected, GELU,
// FullyConnected, residual add, LayerNorm), types inferred. `batch` is the leading extent.
ir::Graph build_default_model(int64_t batch = 1);

}  // namespace ampfuse::models
