// The backward ops of softmax and LayerNorm (ir/ops/nn_loss_backward.cpp) through oneDNN's
// backward primitives. Both read what the reference kernels read (runtime/reference/
// loss_backward_kernels.cpp) and compute the same formulas; results differ from them by
// summation order only.
#include "ir/ops/nn_params.h"
#include "runtime/onednn/onednn_builders.h"

namespace ampfuse::runtime::onednn_detail {

namespace {

// A softmax_backward or logsoftmax_backward primitive (`Backward`) with the forward one it
// takes as a hint for its layouts; dy, y and dx are all `md`.
template <class Forward, class Backward>
Prepared softmax_gradient(const memory::desc& md, int axis) {
  const typename Forward::primitive_desc hint(typename Forward::desc(dnnl::prop_kind::forward_training, md, axis),
                                              scratchpad_attr(), cpu_engine());
  const typename Backward::primitive_desc pd(typename Backward::desc(md, md, axis), scratchpad_attr(), cpu_engine(), hint);
  const Backward prim(pd);
  return Prepared{pd.impl_info_str(), [=](InPtrs ins, OutPtrs outs, WeightSlot) {
                    execute(prim, {{DNNL_ARG_DIFF_DST, wrap(md, ins[0])},
                                   {DNNL_ARG_DST, wrap(md, ins[1])},
                                   {DNNL_ARG_DIFF_SRC, wrap(md, outs[0])}});
                  }};
}

}  // namespace

// _backward_softmax(dy, y): oneDNN's softmax_backward computes y * (dy - sum(dy * y)) and
// logsoftmax_backward dy - exp(y) * sum(dy), the op's formulas for temperature 1 without
// negation. Any axis; oneDNN 2.6 has JIT kernels for the innermost on AVX-512 only, plain loops
// ("ref:any") otherwise.
Prepared prepare_backward_softmax(const Node& n, Types in, Types out) {
  require_inputs(n, in, 2, 2);
  const TensorType &dy = in[0], &y = in[1];
  if (n.attrs.get_float("temperature") != 1.0) refuse("oneDNN has no temperature");
  if (n.attrs.get_bool("negate")) refuse("oneDNN has no softmin (negate)");
  // One descriptor serves dy and dx (oneDNN's diff_data_desc); y must have their type too.
  if (dy.dtype != y.dtype || out[0].dtype != y.dtype)
    refuse("the gradients ({} in, {} out) and the output ({}) differ in dtype", ir::dtype_name(dy.dtype),
           ir::dtype_name(out[0].dtype), ir::dtype_name(y.dtype));
  if (y.shape.empty()) refuse("scalar data");
  const int axis = static_cast<int>(ir::nn::normalize_axis(n.attrs.get_int("axis"), y.shape.size()));
  const memory::desc md = dense_desc(y.shape, y.dtype);
  if (n.attrs.get_bool("log"))
    return softmax_gradient<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward>(md, axis);
  return softmax_gradient<dnnl::softmax_forward, dnnl::softmax_backward>(md, axis);
}

// _backward_LayerNorm(dy, x, gamma) -> dx, dgamma, dbeta over the last axis, which oneDNN
// sees as a matrix of rows. Its backward reads each row's mean and variance; a
// forward_training primitive computes them from x first, as the reference kernel does:
// biased variance, sd = sqrt(var + eps) (MXNet 1.9.1's LayerNorm). That forward's
// normalized output, which nothing reads, goes into dx's buffer, which the backward then
// overwrites.
Prepared prepare_backward_layer_norm(const Node& n, Types in, Types out) {
  require_inputs(n, in, 3, 3);
  const TensorType &dy = in[0], &x = in[1], &gamma = in[2];
  if (x.shape.empty()) refuse("scalar data");
  if (ir::nn::normalize_axis(n.attrs.get_int("axis"), x.shape.size()) != static_cast<int64_t>(x.shape.size()) - 1)
    refuse("oneDNN normalizes over the last axis only");
  // One descriptor serves dy and dx (oneDNN's diff_data_desc).
  if (dy.dtype != x.dtype || out[0].dtype != x.dtype)
    refuse("the gradients ({} in, {} out) and the data ({}) differ in dtype", ir::dtype_name(dy.dtype),
           ir::dtype_name(out[0].dtype), ir::dtype_name(x.dtype));
  // oneDNN 2.6 takes scale and shift, and gives their gradients, in f32 whatever the data.
  if (gamma.dtype != DType::f32 || out[1].dtype != DType::f32 || out[2].dtype != DType::f32)
    refuse("gamma and its gradients are not f32");
  const int64_t channels = x.shape.back();
  const Dims rows_by_channels = {ir::num_elements(x.shape) / channels, channels};
  const memory::desc md(rows_by_channels, dnnl_type(x.dtype), memory::format_tag::ab);
  const memory::desc stats({rows_by_channels[0]}, memory::data_type::f32, memory::format_tag::a);
  const memory::desc scale({channels}, memory::data_type::f32, memory::format_tag::a);
  const float eps = static_cast<float>(n.attrs.get_float("eps"));
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  const dnnl::layer_normalization_forward::primitive_desc fpd(
      dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, md, stats, eps, flags), scratchpad_attr(), cpu_engine());
  const dnnl::layer_normalization_backward::primitive_desc bpd(
      dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, md, md, stats, eps, flags), scratchpad_attr(), cpu_engine(),
      fpd);
  const dnnl::layer_normalization_forward forward(fpd);
  const dnnl::layer_normalization_backward backward(bpd);
  return Prepared{bpd.impl_info_str(), [=](InPtrs ins, OutPtrs outs, WeightSlot) {
                    const memory mean(stats, cpu_engine()), variance(stats, cpu_engine());
                    const memory x_mem = wrap(md, ins[1]), gamma_mem = wrap(scale, ins[2]),
                                 dx_mem = wrap(md, outs[0]);
                    // gamma doubles as the shift, which only the discarded normalized output
                    // reads (oneDNN 2.6's backward, too, wants one bound).
                    execute(forward, {{DNNL_ARG_SRC, x_mem},
                                      {DNNL_ARG_SCALE, gamma_mem},
                                      {DNNL_ARG_SHIFT, gamma_mem},
                                      {DNNL_ARG_MEAN, mean},
                                      {DNNL_ARG_VARIANCE, variance},
                                      {DNNL_ARG_DST, dx_mem}});
                    execute(backward, {{DNNL_ARG_SRC, x_mem},
                                       {DNNL_ARG_DIFF_DST, wrap(md, ins[0])},
                                       {DNNL_ARG_MEAN, mean},
                                       {DNNL_ARG_VARIANCE, variance},
                                       {DNNL_ARG_SCALE, gamma_mem},
                                       {DNNL_ARG_SHIFT, gamma_mem},
                                       {DNNL_ARG_DIFF_SRC, dx_mem},
                                       {DNNL_ARG_DIFF_SCALE, wrap(scale, outs[1])},
                                       {DNNL_ARG_DIFF_SHIFT, wrap(scale, outs[2])}});
                  }};
}

}  // namespace ampfuse::runtime::onednn_detail
