// Moving tensor data in and out of the reference kernels' compute type.
//
// The kernels compute in ir::compute_type of their data (f32, f64 for f64 data; see
// with_compute_type below): `load` widens any element type exactly, `store` rounds once to
// the output's dtype with the round_to rules of ir/scalar_program.h, so a kernel never
// rounds twice.
#pragma once

#include "ir/lowp.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace ampfuse::runtime::ref {

template <class T>
std::vector<T> load(const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.size()));
  const int64_t n = t.size();
  switch (t.dtype()) {
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(t.data<float>()[i]);
      break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(ir::f16_bits_to_f32(t.data<uint16_t>()[i]));
      break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(ir::bf16_bits_to_f32(t.data<uint16_t>()[i]));
      break;
    case DType::f64:
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(t.data<double>()[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(t.get_f64(i));
  }
  return v;
}

// Writes out.size() values, rounding each once to out's dtype.
template <class T>
void store(const T* values, Tensor& out) {
  const int64_t n = out.size();
  switch (out.dtype()) {
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = static_cast<float>(values[i]);
      break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i)
        out.data<uint16_t>()[i] = sizeof(T) == 4 ? ir::f32_to_f16_bits(static_cast<float>(values[i]))
                                                 : ir::f64_to_f16_bits(static_cast<double>(values[i]));
      break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i)
        out.data<uint16_t>()[i] = sizeof(T) == 4 ? ir::f32_to_bf16_bits(static_cast<float>(values[i]))
                                                 : ir::f64_to_bf16_bits(static_cast<double>(values[i]));
      break;
    case DType::f64:
      for (int64_t i = 0; i < n; ++i) out.data<double>()[i] = static_cast<double>(values[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) out.set_f64(i, static_cast<double>(values[i]));
  }
}

template <class T>
void store(const std::vector<T>& values, Tensor& out) {
  store(values.data(), out);
}

// Runs fn.template operator()<T>() with T the C++ type of ir::compute_type(operand_dtypes)
// (double for f64, else float): how every reference kernel picks its compute type.
template <class Fn>
void with_compute_type(std::initializer_list<DType> operand_dtypes, Fn&& fn) {
  if (ir::compute_type(operand_dtypes) == DType::f64)
    fn.template operator()<double>();
  else
    fn.template operator()<float>();
}

// (batch, rows, cols) -> (batch, cols, rows): channels-last data to channels-first
// (rows = spatial, cols = channels) and back.
template <class T>
std::vector<T> transpose_last_two(const std::vector<T>& v, int64_t batch, int64_t rows, int64_t cols) {
  std::vector<T> out(v.size());
  for (int64_t b = 0; b < batch; ++b) {
    const T* src = v.data() + b * rows * cols;
    T* dst = out.data() + b * rows * cols;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
  return out;
}

// Product of shape[begin, end).
inline int64_t extent(const ir::Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n *= s[i];
  return n;
}

}  // namespace ampfuse::runtime::ref
