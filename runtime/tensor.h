// Dense, row-major host tensors.
#pragma once

#include "ir/dtype.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace ampfuse::runtime {

using ir::DType;
using ir::Shape;
using ir::TensorType;

// A tensor owns (a share of) a 64-byte aligned buffer of num_elements * dtype_size bytes,
// contiguous in row-major order. Copies share the buffer; clone() copies the data.
// f16 and bf16 elements are stored as their uint16_t bit patterns, bool as uint8_t 0/1.
class Tensor {
 public:
  Tensor() = default;
  // Uninitialized storage of the given type; throws ampfuse::Error if too large.
  explicit Tensor(TensorType type);
  static Tensor zeros(TensorType type);
  // The `capacity` bytes at `data`, inside a buffer that `owner` keeps alive, seen as a
  // tensor of `type` (throws unless it fits): how executors hand out parts of one arena
  // without allocating. Copies of the result keep `owner` alive.
  // A tensor of `type` with no storage yet: share_storage() binds it.
  static Tensor unbound(TensorType type);
  static Tensor view_of(TensorType type, const std::shared_ptr<std::byte[]>& owner, std::byte* data, size_t capacity);

  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t size() const { return size_; }  // elements
  size_t bytes() const { return static_cast<size_t>(size_) * ir::dtype_size(type_.dtype); }
  bool empty_storage() const { return !data_; }

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }
  template <class T> T* data() { return static_cast<T*>(raw()); }
  template <class T> const T* data() const { return static_cast<const T*>(raw()); }

  // Element i as a double, exactly (f16/bf16 widened, ints converted; i64 beyond 2^53
  // rounds). set_f64 converts with the round_to rules of ir/scalar_program.h.
  double get_f64(int64_t i) const;
  void set_f64(int64_t i, double v);

  Tensor clone() const;
  // Same buffer, new shape with the same element count (throws otherwise).
  Tensor reshaped(Shape s) const;
  // Same buffer seen as another type that fits in it (throws otherwise): how the executor
  // reuses a dead value's buffer for a new one.
  Tensor reinterpreted(TensorType t) const;
  // This tensor's type over `other`'s buffer (which must hold it): rebinding a tensor
  // object without allocating. release_storage() drops the buffer, keeping the type.
  void share_storage(const Tensor& other);
  void release_storage() { data_.reset(), capacity_ = 0; }
  // No other Tensor shares this buffer.
  bool sole_owner() const { return data_.use_count() == 1; }
  // Bytes the buffer holds (at least bytes()).
  size_t capacity() const { return capacity_; }

 private:
  TensorType type_;
  int64_t size_ = 0;
  size_t capacity_ = 0;
  std::shared_ptr<std::byte[]> data_;
};

// Buffers allocated for tensors so far in this process (Tensor(type), zeros, clone...; not
// view_of). Tests use it to show that a run allocates nothing.
int64_t tensor_buffer_allocations();

// Converts every element to `to` with the round_to rules (the interpreter's Cast).
Tensor cast(const Tensor& t, DType to);
// Float tensor of the same shape holding the elements as f64 values (for comparisons).
std::vector<double> to_f64_vector(const Tensor& t);

}  // namespace ampfuse::runtime
