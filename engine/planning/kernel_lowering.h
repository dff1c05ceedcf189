// Lowering a planned FusedKernel to the KernelSpec the code generators compile.
//
//   FusedKernel (graph nodes, access maps)  ->  KernelSpec (operands with strides, one body)
//
// The body is every node's scalar recipe spliced into one program, in graph order. A value
// computed inside the kernel is rounded to its node's output dtype right where the node
// produces it (round_to), exactly as the interpreter stores and reloads it between nodes,
// and the kernel computes in the type the interpreter uses for each of its nodes
// (FusedKernel::compute). So a fused kernel equals op-by-op interpretation bit for bit,
// except where a backend's transcendental functions differ (their ULP bounds are stated
// in codegen/vector_math.h).
//
// A kernel whose nodes include a row op (engine/planning/row_fusion.h) lowers to a row kernel
// (KernelSpec::row): the nodes before it become the row's data program, those after it the
// body, which reads the row op's result (rounded to its dtype) after the operands.
#pragma once

#include "codegen/kernel_spec.h"
#include "engine/planning/fusion_plan.h"
#include "ir/graph.h"

#include <cstdint>
#include <vector>

namespace ampfuse::engine {

struct LoweredKernel {
  codegen::KernelSpec spec;
  // Per input operand, the element offset of its first read element within its buffer
  // (slices start inside their input); the executor adds it to the base pointer.
  std::vector<int64_t> input_offsets;
};

// Lowers kernel `k` of a plan of `g`. `name` names it in dumps and errors. With
// `flag_nonfinite`, the spec carries one flag over every input and output: "some value the
// kernel read or wrote is NaN or +-Inf". With `guarded_outputs` (indices into k.outputs),
// one more flag after it, over those outputs alone: the executor reads it before a oneDNN
// primitive that differs from the reference on non-finite data reads them
// (runtime::onednn_differs_on_nonfinite). Row kernels take neither flag. Throws
// ampfuse::Error when the kernel cannot be expressed (rank above codegen::kMaxRank).
LoweredKernel lower_kernel(const ir::Graph& g, const FusedKernel& k, const std::string& name,
                           bool flag_nonfinite = false, const std::vector<int>& guarded_outputs = {});

}  // namespace ampfuse::engine
