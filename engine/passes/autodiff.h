// autodiff: the backward graph of a graph, built from the ops' gradient rules.
//
// Reverse-mode differentiation at graph level (MXNet's nnvm Gradient pass, JAX's
// transpose): walking the forward nodes from last to first, each node that lies between a
// differentiated variable and an output gets its output gradients (summed over the
// readers) and its op's gradient rule (ir/gradient.h) appends the nodes that compute its
// input gradients. The result is one graph: the forward nodes, then the backward ones,
// with outputs = the forward outputs followed by one gradient per differentiated variable.
// It is planned and run like any graph, so backward elementwise chains fuse with each
// other and with the forward values they read (recomputing cheap ones in the kernel).
//
// Head gradients: a graph output produced by a loss head (OpDef::loss_head: SoftmaxOutput,
// the *RegressionOutput ops, MakeLoss) supplies its own gradient, as in MXNet; every other
// output gets an input variable "<output name>_head_grad" of the output's type.
// A variable read several times receives the sum of its gradients, accumulated in f32
// (f64 stays f64) and cast once to the variable's dtype. AMP conversion runs before this
// pass: the gradient of an amp_cast is a cast back to its input's dtype, so f32 master
// weights get f32 gradients while lp16 ops compute lp16 gradients.
#pragma once

#include "ir/graph.h"

#include <optional>
#include <string>
#include <vector>

namespace ampfuse::engine {

struct BackwardOptions {
  // The variables to differentiate, by name. Empty: every float param variable (MXNet's
  // default, aux states excluded), plus every float input variable with with_inputs.
  std::vector<std::string> wrt{};
  bool with_inputs{false};
  // Only the first `heads` graph outputs get head gradients; the rest are passed through
  // (the moving statistics engine/passes/training_mode.h appends). Unset: every output.
  std::optional<size_t> heads{};
  // Loss scaling (engine/api/loss_scaler.h): when set, a scalar f32 input variable of this
  // name (shape ()) multiplies every head gradient, a loss head's own as well as a bound
  // one, before it flows backward. Being an input, the scale changes between steps
  // without a recompile; the multiply fuses into the kernel that computes the head's
  // gradient (lp16 gradients are scaled in f32 and rounded once).
  std::string loss_scale{};
};

struct BackwardGraph {
  ir::Graph graph;  // typed; outputs: the forward outputs, then the gradients
  size_t num_forward_outputs = 0;
  std::vector<std::string> gradient_of;  // variable names, one per gradient output
  std::vector<std::string> head_grads;   // the head-gradient input variables added
};

// Builds the backward graph of `forward` (types inferred or inferable). Throws
// ampfuse::Error naming the node whose op has no gradient rule, a `wrt` name that is no
// float variable, or a graph with nothing to differentiate.
BackwardGraph build_backward(ir::Graph forward, const BackwardOptions& opts = {});

}  // namespace ampfuse::engine
