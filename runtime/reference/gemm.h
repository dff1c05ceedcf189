// The matrix product behind the reference convolution, FullyConnected, dot, batch_dot
// and RNN kernels.
#pragma once


#include <cstdint>

namespace ampfuse::runtime::ref {

// C = op(A) * op(B), or C += op(A) * op(B) when `accumulate`. All matrices are row-major:
// op(A) is M x K (A stored K x M when trans_a), op(B) is K x N (B stored N x K when
// trans_b); lda, ldb, ldc are row strides in elements. Sums accumulate in T (float for
// every non-f64 kernel). Plain C++ that the compiler vectorizes: packed panels and a
// register-blocked inner kernel, fast enough to run ResNet-152 in seconds.
template <class T>
void gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb, bool trans_b,
          T* C, int64_t ldc, bool accumulate = false);

extern template void gemm<float>(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*, int64_t, bool,
                                 float*, int64_t, bool);
extern template void gemm<double>(int64_t, int64_t, int64_t, const double*, int64_t, bool, const double*, int64_t, bool,
                                  double*, int64_t, bool);

}  // namespace ampfuse::runtime::ref
