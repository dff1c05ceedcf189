// Reference kernels: FullyConnected, dot, batch_dot, Embedding.
#include "ir/error.h"
#include "runtime/reference/gemm.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

#include <cmath>
#include <cstring>

namespace ampfuse::runtime::ref {

namespace {

// y (rows, hidden) = x (rows, features) * weight (hidden, features)^T + bias; for
// _fused_fc, then its epilogue (+ residual, relu) before the one rounding.
void fully_connected(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const bool fused = node.op == "_fused_fc";
  const bool has_bias = fused ? !node.attrs.get_bool("no_bias") : in.size() > 2;
  const int64_t hidden = node.attrs.get_int("num_hidden");
  const int64_t features = in[1].shape()[1];
  const int64_t rows =
      node.attrs.get_bool("flatten") ? in[0].shape()[0] : extent(in[0].shape(), 0, in[0].shape().size() - 1);
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> x = load<T>(in[0]), w = load<T>(in[1]);
    std::vector<T> y(static_cast<size_t>(rows * hidden));
    gemm<T>(rows, hidden, features, x.data(), features, false, w.data(), features, true, y.data(), hidden);
    if (has_bias) {
      const std::vector<T> b = load<T>(in[2]);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < hidden; ++h) y[r * hidden + h] += b[h];
    }
    if (fused) apply_epilogue(node, in, y, out[0].shape());
    store(y, out[0]);
  });
}

// MXNet's dot as one matrix product: see dot_shape in ir/ops/nn_dense.cpp for how each
// operand is read as a matrix.
void dot(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const bool ta = node.attrs.get_bool("transpose_a"), tb = node.attrs.get_bool("transpose_b");
  const ir::Shape& l = in[0].shape();
  const ir::Shape& r = in[1].shape();
  const int64_t k = ta ? l.front() : l.back();
  const int64_t m = ta ? extent(l, 1, l.size()) : extent(l, 0, l.size() - 1);
  const int64_t n = tb ? extent(r, 0, r.size() - 1) : extent(r, 1, r.size());
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> a = load<T>(in[0]), b = load<T>(in[1]);
    std::vector<T> y(static_cast<size_t>(m * n));
    gemm<T>(m, n, k, a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, y.data(), n);
    store(y, out[0]);
  });
}

// One matrix product per batch entry of (..., M, K) x (..., K, N).
void batch_dot(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const bool ta = node.attrs.get_bool("transpose_a"), tb = node.attrs.get_bool("transpose_b");
  const ir::Shape& l = in[0].shape();
  const ir::Shape& o = out[0].shape();
  const size_t rank = l.size();
  const int64_t m = o[rank - 2], n = o[rank - 1], k = ta ? l[rank - 2] : l[rank - 1];
  const int64_t batches = extent(l, 0, rank - 2);
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> a = load<T>(in[0]), b = load<T>(in[1]);
    std::vector<T> y(static_cast<size_t>(batches * m * n));
    for (int64_t i = 0; i < batches; ++i)
      gemm<T>(m, n, k, a.data() + i * m * k, ta ? m : k, ta, b.data() + i * k * n, tb ? k : n, tb, y.data() + i * m * n,
              n);
    store(y, out[0]);
  });
}

// out[..., :] = weight[embedding_row(index), :]. The weight and the output share a dtype,
// so rows are copied bit for bit.
void embedding(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& indices = in[0];
  const Tensor& weight = in[1];
  const int64_t rows = weight.shape()[0], cols = weight.shape()[1];
  if (weight.dtype() != out[0].dtype())
    fail("Embedding weight is {} but its output is {}", ir::dtype_name(weight.dtype()), ir::dtype_name(out[0].dtype()));
  const size_t row_bytes = static_cast<size_t>(cols) * ir::dtype_size(weight.dtype());
  const auto* src = static_cast<const std::byte*>(weight.raw());
  auto* dst = static_cast<std::byte*>(out[0].raw());
  for (int64_t i = 0; i < indices.size(); ++i) {
    const int64_t row = embedding_row(indices.get_f64(i), rows);
    std::memcpy(dst + i * row_bytes, src + row * row_bytes, row_bytes);
  }
}

}  // namespace

int64_t embedding_row(double index, int64_t rows) {
  return std::isnan(index) || index < 0           ? 0
         : index >= static_cast<double>(rows) ? rows - 1
                                              : static_cast<int64_t>(index);
}

void register_dense_kernels() {
  register_reference_kernel("FullyConnected", fully_connected);
  register_reference_kernel("_fused_fc", fully_connected);
  register_reference_kernel("dot", dot);
  register_reference_kernel("batch_dot", batch_dot);
  register_reference_kernel("Embedding", embedding);
}

}  // namespace ampfuse::runtime::ref
