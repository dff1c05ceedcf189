// Reference kernel: _Dropout_train (Dropout in training) with `axes`, the semantic
// definition of the op described in ir/ops/nn_dropout_train.cpp where its mask is shared
// along axes. Without axes the op's scalar recipe defines it (the interpreter evaluates
// that); this kernel computes the same thing for any `axes`.
#include "ir/ops/nn_params.h"
#include "ir/philox.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

namespace ampfuse::runtime::ref {

namespace {

// For each element (row-major), the index of its mask element: its index in the data's
// shape with the `axes` extents set to 1, along which the mask is shared.
std::vector<uint64_t> mask_indices(const ir::Shape& shape, const std::vector<int64_t>& axes) {
  std::vector<bool> shared(shape.size(), false);
  for (int64_t a : axes) shared[static_cast<size_t>(ir::nn::normalize_axis(a, shape.size(), "axes"))] = true;
  // Strides of the mask's shape, 0 along the shared axes.
  std::vector<uint64_t> strides(shape.size(), 0);
  uint64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shared[d]) continue;
    strides[d] = stride;
    stride *= static_cast<uint64_t>(shape[d]);
  }
  std::vector<uint64_t> out(static_cast<size_t>(extent(shape, 0, shape.size())));
  std::vector<int64_t> coord(shape.size(), 0);
  for (uint64_t& m : out) {
    m = 0;
    for (size_t d = 0; d < shape.size(); ++d) m += static_cast<uint64_t>(coord[d]) * strides[d];
    for (size_t d = shape.size(); d-- > 0;) {
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
  return out;
}

void dropout_train(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const double p = node.attrs.get_float("p");
  const auto seed = static_cast<uint64_t>(node.attrs.get_int("seed"));
  uint64_t offset = static_cast<uint64_t>(node.attrs.get_int("offset"));
  // With a step input, the counter offset of this step (ir/philox.h), as the recipe reads it.
  if (in.size() > 1)
    offset = ir::philox_step_offset(offset, static_cast<uint64_t>(node.attrs.get_int("step_stride")), in[1].get_f64(0));
  const uint32_t threshold = ir::dropout_keep_threshold(p);
  // MXNet's mask value, 1.0f / pkeep in float (unused when p = 1: nothing is kept).
  const float scale = 1.0f / (1.0f - static_cast<float>(p));
  const std::vector<uint64_t> index = mask_indices(in[0].shape(), node.attrs.get_ints("axes"));
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]);
    for (size_t i = 0; i < x.size(); ++i) {
      const bool keep = ir::philox_bits24(seed, offset, index[i]) < threshold;
      x[i] *= keep ? static_cast<T>(scale) : T(0);
    }
    store(x, out[0]);
  });
}

}  // namespace

void register_dropout_train_kernels() { register_reference_kernel("_Dropout_train", dropout_train); }

}  // namespace ampfuse::runtime::ref
