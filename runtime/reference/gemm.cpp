#include "runtime/reference/gemm.h"

#include <algorithm>
#include <vector>

namespace ampfuse::runtime::ref {

namespace {

// Register block (kMR x kNR accumulators), and the cache blocks around it: a kKC-deep
// panel of B (kKC x kNR) stays in L1 while it meets every kMR-row panel of a kMC x kKC
// block of A held in L2.
constexpr int64_t kMR = 4, kNR = 8, kKC = 256, kMC = 128, kNC = 2048;

// Copies op(A)[i0 .. i0+mc, k0 .. k0+kc) into kMR-row panels, k-major inside a panel,
// zero-filling rows past the edge so the inner kernel never branches.
template <class T>
void pack_a(const T* A, int64_t lda, bool trans, int64_t i0, int64_t k0, int64_t mc, int64_t kc, T* out) {
  for (int64_t ip = 0; ip < mc; ip += kMR, out += kMR * kc) {
    const int64_t rows = std::min(kMR, mc - ip);
    for (int64_t r = 0; r < kMR; ++r) {
      if (r >= rows) {
        for (int64_t k = 0; k < kc; ++k) out[k * kMR + r] = T(0);
      } else if (trans) {
        for (int64_t k = 0; k < kc; ++k) out[k * kMR + r] = A[(k0 + k) * lda + i0 + ip + r];
      } else {
        const T* row = A + (i0 + ip + r) * lda + k0;
        for (int64_t k = 0; k < kc; ++k) out[k * kMR + r] = row[k];
      }
    }
  }
}

// Copies op(B)[k0 .. k0+kc, j0 .. j0+nc) into kNR-column panels, k-major, zero-filled.
template <class T>
void pack_b(const T* B, int64_t ldb, bool trans, int64_t k0, int64_t j0, int64_t kc, int64_t nc, T* out) {
  for (int64_t jp = 0; jp < nc; jp += kNR, out += kNR * kc) {
    const int64_t cols = std::min(kNR, nc - jp);
    if (trans) {
      for (int64_t c = 0; c < kNR; ++c) {
        const T* col = B + (j0 + jp + c) * ldb + k0;
        for (int64_t k = 0; k < kc; ++k) out[k * kNR + c] = c < cols ? col[k] : T(0);
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const T* row = B + (k0 + k) * ldb + j0 + jp;
        for (int64_t c = 0; c < kNR; ++c) out[k * kNR + c] = c < cols ? row[c] : T(0);
      }
    }
  }
}

// The register-blocked kernel: fixed trip counts, so the compiler keeps `acc` in vector
// registers and unrolls the update.
template <class T>
void micro_kernel(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, int64_t rows, int64_t cols, bool overwrite) {
  T acc[kMR][kNR] = {};
  for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR)
    for (int64_t r = 0; r < kMR; ++r)
      for (int64_t j = 0; j < kNR; ++j) acc[r][j] += a[r] * b[j];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] = overwrite ? acc[r][j] : c[r * ldc + j] + acc[r][j];
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

template <class T>
void gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb, bool trans_b,
          T* C, int64_t ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
    return;
  }
  thread_local std::vector<T> a_pack, b_pack;
  a_pack.resize(round_up(std::min(M, kMC), kMR) * std::min(K, kKC));
  b_pack.resize(round_up(std::min(N, kNC), kNR) * std::min(K, kKC));
  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = std::min(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = std::min(kKC, K - pc);
      const bool overwrite = !accumulate && pc == 0;
      pack_b(B, ldb, trans_b, pc, jc, kc, nc, b_pack.data());
      for (int64_t ic = 0; ic < M; ic += kMC) {
        const int64_t mc = std::min(kMC, M - ic);
        pack_a(A, lda, trans_a, ic, pc, mc, kc, a_pack.data());
        for (int64_t jp = 0; jp < nc; jp += kNR)
          for (int64_t ip = 0; ip < mc; ip += kMR)
            micro_kernel(kc, a_pack.data() + ip * kc, b_pack.data() + jp * kc, C + (ic + ip) * ldc + jc + jp, ldc,
                         std::min(kMR, mc - ip), std::min(kNR, nc - jp), overwrite);
      }
    }
  }
}

template void gemm<float>(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*, int64_t, bool, float*,
                          int64_t, bool);
template void gemm<double>(int64_t, int64_t, int64_t, const double*, int64_t, bool, const double*, int64_t, bool,
                           double*, int64_t, bool);

}  // namespace ampfuse::runtime::ref
