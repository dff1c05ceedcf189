// compute_in_f32: explicit casts around external ops the backend computes in f32 anyway.
//
// oneDNN 2.6 has no bf16 kernels on CPUs without AVX-512 and no f16 compute on any CPU, so
// it runs such nodes by widening the inputs, computing in f32 and rounding the outputs
// (runtime/onednn/onednn_ops.h): three passes over memory the planner cannot see. This pass
// makes them graph nodes:
//
//   y:bf16 = Convolution(x:bf16, w:bf16)
//     ->  y:bf16 = amp_cast(Convolution(amp_cast(x, f32), amp_cast(w, f32)), bf16)
//
// The values are the same bit for bit (widening is exact and the f32 result is rounded to
// nearest even once, as before), but now the widening fuses into the kernel that produces x,
// the rounding into the kernels that read y, and the cast of a constant weight runs once
// (ExecutorOptions::constant_params). The f32 node is named "<name>_f32" and the rounding
// cast takes the original name, so graph outputs keep their names.
#pragma once

#include "ir/graph.h"

#include <functional>

namespace ampfuse::engine {

// Rewrites every op node with a bf16/f16 input or output for which `computes_in_f32(g, n)`
// holds. Types must be inferred. Returns the number of nodes rewritten.
int compute_in_f32(ir::Graph& g, const std::function<bool(const ir::Graph&, int32_t)>& computes_in_f32);

}  // namespace ampfuse::engine
