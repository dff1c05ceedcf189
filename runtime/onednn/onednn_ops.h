// External ops through oneDNN 2.6 (the v2 API): convolution, matmul-like ops, pooling,
// softmax and LayerNorm, in f32 and bf16, channels-first and channels-last.
//
// oneDNN computes bf16 ops with f32 accumulation, so results differ from the reference
// interpreter by rounding order only (tested with a tolerance, not bit for bit). Primitives
// are created once per (op, attributes, shapes, dtypes) and cached.
#pragma once

#include "ir/graph.h"
#include "runtime/tensor.h"

#include <span>
#include <string>
#include <vector>

namespace ampfuse::runtime {

// Whether oneDNN runs `node` with these input types here (op, dtype and attribute
// combinations it has; e.g. no f16 compute on this CPU, LayerNorm only over the last axis).
bool onednn_supports(const ir::Node& node, std::span<const TensorType> inputs);

// Runs `node` with oneDNN; `outputs` arrive allocated with the node's types. Throws
// ampfuse::Error if !onednn_supports.
void onednn_run(const ir::Node& node, std::span<const Tensor> inputs, std::span<Tensor> outputs);

// The implementation oneDNN picked for `node` ("brgconv:avx512_core_bf16", "ref:any"...),
// creating the primitive if needed. A name starting with "ref:" or "simple:" is oneDNN's slow
// reference path; run reports flag those.
std::string onednn_impl_name(const ir::Node& node, std::span<const TensorType> inputs);

// How many primitives were created (cache misses) in this process.
size_t onednn_primitives_created();

}  // namespace ampfuse::runtime
