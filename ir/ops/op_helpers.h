// Type-inference helpers shared by the op definitions in ir/ops/*.cpp.
//
// Messages name inputs by their slot ("input 1 (rhs)") so that, with the node prefix the
// caller adds, a user can find the offending tensor. Every helper throws ampfuse::Error.
#pragma once

#include "ir/op_registry.h"

#include <initializer_list>
#include <string>
#include <vector>

namespace ampfuse::ir {

// "input 1 (rhs)". Slots past the declared ones repeat the last name (variadic ops).
std::string input_label(const std::vector<InputSlot>& slots, size_t i);

// NumPy broadcasting of two shapes: right-aligned, missing leading extents count as 1,
// and each pair of extents must be equal or contain a 1 (the other wins, so 1 against 0
// gives 0). Throws "shapes [2,3] and [4] do not broadcast".
Shape broadcast_shape(const Shape& a, const Shape& b);
// Whether `from` broadcasts to exactly `to` (numpy rules, without growing `to`).
bool broadcasts_to(const Shape& from, const Shape& to);

// The common dtype of inputs `which` (all known). Throws naming the first two inputs that
// differ and both dtypes: ops do not promote; AMP inserts the casts.
DType require_same_dtype(const InferContext& ctx, const std::vector<InputSlot>& slots,
                         const std::vector<size_t>& which);

// For ops whose inputs all share one type (elemwise_add, add_n): an unknown input takes
// the type of the known ones, then all must agree in dtype and shape. Returns that type.
TensorType unify_same_type(InferContext& ctx, const std::vector<InputSlot>& slots);

// For numpy-broadcasting ops: inputs `which` (all known) share a dtype; returns that dtype
// with the broadcast shape of all of them.
TensorType broadcast_inputs(const InferContext& ctx, const std::vector<InputSlot>& slots,
                            const std::vector<size_t>& which);

// 0, 1, ..., n-1: all the inputs of an n-input op.
std::vector<size_t> all_inputs(const InferContext& ctx);

// Inputs that MXNet does not broadcast numpy-style (OpDef::broadcast_view uses these):
// The shape PReLU's gamma takes against `data` (MXNet's expand_shape): gamma's extents fill
// data axes 1 and 0 from the innermost, where they equal data's or are 1; other axes are 1.
// (C,) -> [1,C,1,1] for NCHW data. Throws when gamma does not fit.
Shape prelu_gamma_view(const Shape& gamma, const Shape& data);
// Legacy `where`: a 1-D condition whose length is out's first extent selects rows, (N,) ->
// [N,1,...]; any other condition broadcasts numpy-style and is returned unchanged.
Shape where_condition_view(const Shape& cond, const Shape& out);
// The shape input `i` of `def` is viewed as before numpy broadcasting to `out`: the op's
// broadcast_view when it has one, else `in`.
Shape broadcast_view_of(const OpDef& def, const Attrs& attrs, size_t i, const Shape& in, const Shape& out);

// An elementwise op's skeleton, shared by ir/ops/elementwise.cpp and elementwise_math.cpp:
// fusable, AMP classes per target, and free to move through layouts (same-shape operands
// give the same elements in any layout; layout_optimize checks the shapes).
struct ElementwiseAmp {
  AmpClass fp16, bf16;
};
OpDef elementwise_op(std::string name, std::vector<InputSlot> inputs, ElementwiseAmp amp);
void infer_like_input(InferContext& c);  // output 0 = input 0's type

// Gradient rules several ops share (ir/gradient.h).
// Output k's gradient cast to input k's dtype: Cast, amp_cast, amp_multicast (MXNet's
// amp_cast gradient is the cast back). Integer inputs get none.
InputGrads cast_back_gradient(GradContext& c);
// Output 0's gradient reshaped to input 0's shape: Reshape, Flatten, expand_dims, squeeze.
InputGrads reshape_back_gradient(GradContext& c);
// No input gets a gradient: BlockGrad/stop_gradient, shape-only ops.
InputGrads no_gradient(GradContext& c);

}  // namespace ampfuse::ir
