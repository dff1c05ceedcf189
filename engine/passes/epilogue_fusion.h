// epilogue_fusion: a Convolution or FullyConnected and the elementwise ops right after it
// that oneDNN can apply as post-ops become one _fused_conv or _fused_fc node
// (ir/ops/nn_epilogue.cpp), computed by one oneDNN primitive: the add and the activation are
// applied to the accumulators in registers, so the op's output is never written to memory
// and read back by a fused kernel.
//
//   %c = Convolution(%x, %w, %b)           (or FullyConnected)
//   %s = elemwise_add(%c, %r)              (or broadcast_add of two equal shapes,
//   %y = LeakyReLU(%s) {slope=0.1}          either operand order)
//     ->  %y = _fused_conv(%x, %w, %b, %r) {with_residual=true, act_type="leaky", slope=0.1}
//
// and the shorter chains op -> add and op -> LeakyReLU. The activation is LeakyReLU's leaky
// form with a nonzero slope, which oneDNN computes bit for bit; relu only when asked
// (`relu`), since its post-op turns NaN into 0 (MXNet's own oneDNN fusion does; by default
// ampfuse keeps the graph's NaN and runs the relu in the fused kernel after the op); never
// clip (relu6), whose post-op does the same. A link joins only when nothing else reads the
// value before it (no other node, no graph output), the op is not Deconvolution, and every
// value of the chain, the residual included, has the op's output type (no broadcast, no
// cast). The fused node takes the last node's name and place (it computes that value), so
// every operand is defined before it.
//
// The fused node rounds once where the graph rounded the op's output first: in bf16/f16 the
// result differs by rounding (bit for bit the same in f32, where the graph's add is the same
// f32 add). The executor runs the pass for inference on the CPU only when asked
// (ExecutorOptions::fuse_epilogues) and only where oneDNN runs the fused node with a real
// (not reference) kernel: `runs_fused` decides, given the node and its input types.
#pragma once

#include "ir/graph.h"

#include <functional>
#include <span>

namespace ampfuse::engine {

using RunsFusedEpilogue = std::function<bool(const ir::Node& fused, std::span<const ir::TensorType> inputs)>;

// Fuses every chain that qualifies (above) and that `runs_fused` accepts; with `relu`, a relu
// (relu, Activation relu) joins too, as act_type "relu". Types must be inferred. Returns the
// number of fused nodes made.
int fuse_epilogues(ir::Graph& g, const RunsFusedEpilogue& runs_fused, bool relu = false);

}  // namespace ampfuse::engine
