// recompute: a cheap value that one fused kernel would store only for later fused kernels
// to load is computed again inside those kernels instead, when that moves fewer bytes
// (rematerialization, as XLA and TorchInductor do for training graphs).
//
//   kernel 0  nodes: %s=broadcast_mul %b=broadcast_add %t=tanh   in: %x %scale %bias  out: %t %b
//   kernel 5  nodes: ... %dt=_backward_elementwise(%b, %dy) ...   in: %b %dy ...
//     ->
//   kernel 0  nodes: %s %b %t                                     in: %x %scale %bias  out: %t
//   kernel 5  nodes: %s %b ... %dt ...   in: %x %scale %bias %dy ...   recomputed: %s %b
//
// Backward graphs are where this pays: a forward kernel's inner values that a derivative
// reads (tanh's input above) would be written by the forward pass and read back by the
// backward one; recomputing them from values the backward kernel loads anyway, or from
// small ones (a per-channel scale), moves fewer bytes.
//
// A value V (stored by kernel P) is recomputed when
//  - no graph output is V, and every step that reads V is a fused kernel computing in P's
//    compute type, reading V whole through a permutation of its iteration index (so V's
//    producing nodes can run at each of its iteration points);
//  - V's chain (the nodes of P it depends on inside P) has no transcendental instruction
//    (cheap values only: a recomputed tanh would cost more time than its bytes), draws no
//    random bits (Dropout's mask follows the kernel's iteration order) and does not load
//    only graph variables (such a value may be a constant the executor computes
//    once: engine::ExecutorOptions::constant_params);
//  - each reader stays within the planner's caps (PlannerOptions) with the chain added;
//  - bytes: what the chain's loads add to the readers (values a reader does not load
//    already) is less than storing V and loading it in every reader.
// Then the readers compute the chain (FusedKernel::recomputed lists those nodes), P stops
// storing V and drops nodes whose values it no longer needs (a kernel left with nothing to
// store disappears). Values are visited in plan order, each decided once.
//
// Results do not change: the chain computes the same recipes in the same compute type, so
// the recomputed value is bit-identical to the stored one.
#pragma once

#include "engine/planning/fusion_plan.h"

#include <cstdint>

namespace ampfuse::engine {

struct RecomputeStats {
  int values = 0;                // values no longer stored
  int64_t bytes_not_moved = 0;   // bytes of stores and loads avoided, minus the loads added
};

// Rewrites `plan` (of typed graph `g`) as above; `caps` are the planner's kernel caps.
RecomputeStats recompute_in_readers(const ir::Graph& g, Plan& plan, const PlannerOptions& caps);

}  // namespace ampfuse::engine
