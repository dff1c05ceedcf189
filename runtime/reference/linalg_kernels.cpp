// Reference kernels: _linalg_gemm2 and _linalg_gemm (ir/ops/nn_loss_linalg.cpp), one matrix
// product per batch entry on the reference gemm, accumulating in the compute type. The loss
// heads of that file have scalar recipes and need no kernel.
#include "ir/error.h"
#include "runtime/reference/gemm.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

namespace ampfuse::runtime::ref {

namespace {

// out = alpha * op(A) op(B) (+ beta * C when `in` has C).
void linalg_gemm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const bool ta = node.attrs.get_bool("transpose_a"), tb = node.attrs.get_bool("transpose_b");
  const ir::Shape& a_shape = in[0].shape();
  const ir::Shape& o = out[0].shape();
  const size_t rank = a_shape.size();
  const int64_t m = o[rank - 2], n = o[rank - 1], k = ta ? a_shape[rank - 2] : a_shape[rank - 1];
  const int64_t batches = extent(a_shape, 0, rank - 2);
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> a = load<T>(in[0]), b = load<T>(in[1]);
    const T alpha = static_cast<T>(node.attrs.get_float("alpha"));
    std::vector<T> y(static_cast<size_t>(batches * m * n));
    for (int64_t i = 0; i < batches; ++i)
      gemm<T>(m, n, k, a.data() + i * m * k, ta ? m : k, ta, b.data() + i * k * n, tb ? k : n, tb, y.data() + i * m * n,
              n);
    if (in.size() > 2) {
      const std::vector<T> c = load<T>(in[2]);
      const T beta = static_cast<T>(node.attrs.get_float("beta"));
      for (size_t i = 0; i < y.size(); ++i) y[i] = alpha * y[i] + beta * c[i];
    } else {
      for (T& v : y) v *= alpha;
    }
    store(y, out[0]);
  });
}

}  // namespace

void register_linalg_kernels() {
  register_reference_kernel("_linalg_gemm2", linalg_gemm);
  register_reference_kernel("_linalg_gemm", linalg_gemm);
}

}  // namespace ampfuse::runtime::ref
