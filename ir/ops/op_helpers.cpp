#include "ir/ops/op_helpers.h"

#include "ir/error.h"

#include <algorithm>

namespace ampfuse::ir {

std::string input_label(const std::vector<InputSlot>& slots, size_t i) {
  if (slots.empty()) return fmt::format("input {}", i);
  return fmt::format("input {} ({})", i, slots[std::min(i, slots.size() - 1)].name);
}

Shape broadcast_shape(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t k = 0; k < rank; ++k) {
    // Walk from the innermost extent outwards; a missing leading extent is 1.
    const int64_t x = k < a.size() ? a[a.size() - 1 - k] : 1;
    const int64_t y = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (x != y && x != 1 && y != 1) fail("shapes {} and {} do not broadcast", shape_str(a), shape_str(b));
    out[rank - 1 - k] = x == 1 ? y : x;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t k = 0; k < from.size(); ++k) {
    const int64_t x = from[from.size() - 1 - k];
    if (x != 1 && x != to[to.size() - 1 - k]) return false;
  }
  return true;
}

DType require_same_dtype(const InferContext& ctx, const std::vector<InputSlot>& slots,
                         const std::vector<size_t>& which) {
  if (which.empty()) fail("no inputs to take a dtype from");
  const DType first = ctx.in(which[0]).dtype;
  for (size_t i : which) {
    const DType d = ctx.in(i).dtype;
    if (d != first)
      fail("{} is {} but {} is {} (ops do not mix dtypes; insert a Cast)", input_label(slots, which[0]),
           dtype_name(first), input_label(slots, i), dtype_name(d));
  }
  return first;
}

TensorType unify_same_type(InferContext& ctx, const std::vector<InputSlot>& slots) {
  const TensorType* known = nullptr;
  size_t known_index = 0;
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.inputs[i]) {
      known = &*ctx.inputs[i];
      known_index = i;
      break;
    }
  if (!known) fail("the types of all {} inputs are unknown", ctx.inputs.size());
  const TensorType type = *known;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!ctx.inputs[i]) {
      ctx.inputs[i] = type;
      continue;
    }
    const TensorType& t = *ctx.inputs[i];
    if (t.dtype != type.dtype)
      fail("{} is {} but {} is {} (ops do not mix dtypes; insert a Cast)", input_label(slots, known_index),
           dtype_name(type.dtype), input_label(slots, i), dtype_name(t.dtype));
    if (t.shape != type.shape)
      fail("{} has shape {} but {} has shape {} (they must be equal; broadcast_* ops broadcast)",
           input_label(slots, known_index), shape_str(type.shape), input_label(slots, i), shape_str(t.shape));
  }
  return type;
}

TensorType broadcast_inputs(const InferContext& ctx, const std::vector<InputSlot>& slots,
                            const std::vector<size_t>& which) {
  TensorType out{require_same_dtype(ctx, slots, which), ctx.in(which[0]).shape};
  for (size_t k = 1; k < which.size(); ++k) {
    try {
      out.shape = broadcast_shape(out.shape, ctx.in(which[k]).shape);
    } catch (const Error&) {
      // Name the inputs, not just the shapes: the accumulated shape may be a mix of several.
      std::vector<std::string> parts;
      for (size_t j = 0; j <= k; ++j)
        parts.push_back(fmt::format("{} {}", input_label(slots, which[j]), shape_str(ctx.in(which[j]).shape)));
      fail("shapes do not broadcast: {}", fmt::join(parts, ", "));
    }
  }
  return out;
}

Shape broadcast_view_of(const OpDef& def, const Attrs& attrs, size_t i, const Shape& in, const Shape& out) {
  return def.broadcast_view ? def.broadcast_view(attrs, i, in, out) : in;
}

std::vector<size_t> all_inputs(const InferContext& ctx) {
  std::vector<size_t> v(ctx.inputs.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

OpDef elementwise_op(std::string name, std::vector<InputSlot> inputs, ElementwiseAmp amp) {
  OpDef d;
  d.name = std::move(name);
  d.kind = OpKind::elementwise;
  d.fusable = true;
  d.inputs = std::move(inputs);
  d.amp_fp16 = amp.fp16;
  d.amp_bf16 = amp.bf16;
  d.channels_last = ChannelsLastRule{ChannelsLastRule::Channels::anywhere, "", /*every_input=*/true};
  return d;
}

void infer_like_input(InferContext& c) { c.outputs[0] = c.in(0); }

InputGrads cast_back_gradient(GradContext& c) {
  InputGrads grads(c.num_inputs());
  for (size_t k = 0; k < c.num_outputs() && k < c.num_inputs(); ++k) {
    const TensorType in = c.input_type(k);
    if (c.out_grad_opt(k) && is_float(in.dtype)) grads[k] = c.cast(*c.out_grad_opt(k), in.dtype);
  }
  return grads;
}

InputGrads reshape_back_gradient(GradContext& c) {
  InputGrads grads(c.num_inputs());
  if (c.out_grad_opt(0)) grads[0] = c.reshape(*c.out_grad_opt(0), c.input_type(0).shape);
  return grads;
}

InputGrads no_gradient(GradContext& c) { return InputGrads(c.num_inputs()); }

}  // namespace ampfuse::ir
