#include "runtime/tensor.h"

#include "ir/error.h"
#include "ir/int_conversion.h"
#include "ir/lowp.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

namespace ampfuse::runtime {

namespace {

std::atomic<int64_t> g_allocations{0};

std::shared_ptr<std::byte[]> allocate(size_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  // 64-byte aligned so vector kernels can use aligned loads; at least one byte so that an
  // empty tensor still has storage.
  const size_t rounded = ((bytes + 63) / 64) * 64 + 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail("out of memory allocating {} bytes", bytes);
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

}  // namespace

Tensor::Tensor(TensorType type) : type_(std::move(type)) {
  size_ = ir::num_elements(type_.shape);
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(size_), ir::dtype_size(type_.dtype), &bytes) ||
      bytes > (size_t{1} << 46))
    fail("tensor {} is too large to allocate", ir::type_str(type_));
  data_ = allocate(bytes);
  capacity_ = bytes;
}

int64_t tensor_buffer_allocations() { return g_allocations.load(std::memory_order_relaxed); }

Tensor Tensor::unbound(TensorType type) {
  Tensor t;
  t.type_ = std::move(type);
  t.size_ = ir::num_elements(t.type_.shape);
  return t;
}

Tensor Tensor::view_of(TensorType type, const std::shared_ptr<std::byte[]>& owner, std::byte* data, size_t capacity) {
  Tensor t;
  t.type_ = std::move(type);
  t.size_ = ir::num_elements(t.type_.shape);
  if (t.bytes() > capacity)
    fail("internal: {} needs {} bytes, more than the {} it is given", ir::type_str(t.type_), t.bytes(), capacity);
  t.data_ = std::shared_ptr<std::byte[]>(owner, data);
  t.capacity_ = capacity;
  return t;
}

void Tensor::share_storage(const Tensor& other) {
  if (bytes() > other.capacity_)
    fail("internal: {} does not fit in a buffer of {} bytes", ir::type_str(type_), other.capacity_);
  data_ = other.data_;
  capacity_ = other.capacity_;
}

Tensor Tensor::zeros(TensorType type) {
  Tensor t(std::move(type));
  std::memset(t.raw(), 0, t.bytes());
  return t;
}

double Tensor::get_f64(int64_t i) const {
  switch (dtype()) {
    case DType::f32: return data<float>()[i];
    case DType::f16: return ir::f16_bits_to_f32(data<uint16_t>()[i]);
    case DType::bf16: return ir::bf16_bits_to_f32(data<uint16_t>()[i]);
    case DType::f64: return data<double>()[i];
    case DType::i8: return data<int8_t>()[i];
    case DType::u8: return data<uint8_t>()[i];
    case DType::i32: return data<int32_t>()[i];
    case DType::i64: return static_cast<double>(data<int64_t>()[i]);
    case DType::boolean: return data<uint8_t>()[i] ? 1.0 : 0.0;
  }
  return 0;
}

void Tensor::set_f64(int64_t i, double v) {
  switch (dtype()) {
    case DType::f32: data<float>()[i] = static_cast<float>(v); break;  // RNE
    case DType::f16: data<uint16_t>()[i] = ir::f64_to_f16_bits(v); break;
    case DType::bf16: data<uint16_t>()[i] = ir::f64_to_bf16_bits(v); break;
    case DType::f64: data<double>()[i] = v; break;
    case DType::i8: data<int8_t>()[i] = ir::saturating_float_to_int<int8_t>(v); break;
    case DType::u8: data<uint8_t>()[i] = ir::saturating_float_to_int<uint8_t>(v); break;
    case DType::i32: data<int32_t>()[i] = ir::saturating_float_to_int<int32_t>(v); break;
    case DType::i64: data<int64_t>()[i] = ir::saturating_float_to_int<int64_t>(v); break;
    case DType::boolean: data<uint8_t>()[i] = v != 0 ? 1 : 0; break;  // NaN != 0: true
  }
}

Tensor Tensor::clone() const {
  Tensor t(type_);
  if (bytes()) std::memcpy(t.raw(), raw(), bytes());
  return t;
}

Tensor Tensor::reshaped(Shape s) const {
  if (ir::num_elements(s) != size_)
    fail("cannot reshape {} ({} elements) to {}", ir::type_str(type_), size_, ir::shape_str(s));
  Tensor t = *this;
  t.type_.shape = std::move(s);
  return t;
}

Tensor Tensor::reinterpreted(TensorType t) const {
  const int64_t n = ir::num_elements(t.shape);
  if (static_cast<size_t>(n) * ir::dtype_size(t.dtype) > capacity_)
    fail("cannot view a buffer of {} bytes as {}", capacity_, ir::type_str(t));
  Tensor r = *this;
  r.type_ = std::move(t);
  r.size_ = n;
  return r;
}

Tensor cast(const Tensor& t, DType to) {
  Tensor out({to, t.shape()});
  for (int64_t i = 0; i < t.size(); ++i) out.set_f64(i, t.get_f64(i));
  return out;
}

std::vector<double> to_f64_vector(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) v[i] = t.get_f64(i);
  return v;
}

}  // namespace ampfuse::runtime
