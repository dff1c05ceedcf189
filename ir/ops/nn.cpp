#include "ir/custom_ops.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/ops/nn_ops.h"

namespace ampfuse::ir {

namespace nn {

AttrSpec layout_attr() { return one_of("layout", "None", {"None", "NCW", "NCHW", "NCDHW", "NWC", "NHWC", "NDHWC"}); }

const TensorType* known_input(const InferContext& ctx, size_t i) {
  if (i >= ctx.inputs.size() || !ctx.inputs[i]) return nullptr;
  return &*ctx.inputs[i];
}

void fill_input(InferContext& ctx, size_t i, std::string_view slot, const TensorType& want, std::string_view detail) {
  if (i >= ctx.inputs.size()) fail("input {} ({}) is missing", i, slot);
  auto& in = ctx.inputs[i];
  if (!in) {
    in = want;
    return;
  }
  if (*in == want) return;
  const std::string tail = detail.empty() ? std::string() : fmt::format(" ({})", detail);
  if (in->shape != want.shape)
    fail("input {} ({}) has shape {} but {} is needed{}", i, slot, shape_str(in->shape), shape_str(want.shape), tail);
  fail("input {} ({}) is {} but {} is needed{}", i, slot, dtype_name(in->dtype), dtype_name(want.dtype), tail);
}

void fill_float_input(InferContext& ctx, size_t i, std::string_view slot, const TensorType& want) {
  if (const TensorType* t = known_input(ctx, i)) {
    if (!is_float(t->dtype)) require_float(*t, fmt::format("input {} ({})", i, slot));  // formats only to fail
    fill_input(ctx, i, slot, TensorType{t->dtype, want.shape});
    return;
  }
  fill_input(ctx, i, slot, want);
}

void require_float(const TensorType& t, std::string_view what) {
  if (!is_float(t.dtype)) fail("{} must be a float tensor, not {}", what, type_str(t));
}

}  // namespace nn

void register_nn_ops(OpRegistry& r) {
  nn::register_conv_ops(r);
  nn::register_dense_ops(r);
  nn::register_norm_ops(r);
  nn::register_norm_train_ops(r);
  nn::register_dropout_train_ops(r);
  nn::register_softmax_ops(r);
  nn::register_rnn_ops(r);
  nn::register_zoo_norm_ops(r);
  nn::register_ordering_ops(r);
  nn::register_loss_linalg_ops(r);
  nn::register_adaptive_pool_ops(r);
  nn::register_deformable_conv_ops(r);
  nn::register_loss_backward_ops(r);
  nn::register_nn_backward_ops(r);
  r.add(make_custom_op_def());
  // The op_type table is process-wide; a second OpRegistry (a test's) shares it.
  CustomOpRegistry& customs = CustomOpRegistry::global();
  if (customs.empty()) register_sockeye_custom_ops(customs);
}

}  // namespace ampfuse::ir
