// Host tensors: dense and row-major, in memory of their own or wrapped (a framework's).
#pragma once

#include "ir/dtype.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace ampfuse::runtime {

using ir::DType;
using ir::Shape;
using ir::TensorType;

// A tensor owns (a share of) a 64-byte aligned buffer of num_elements * dtype_size bytes,
// contiguous in row-major order, or wraps memory someone else owns (wrap()). Copies share
// the buffer; clone() copies the data.
// f16 and bf16 elements are stored as their uint16_t bit patterns, bool as uint8_t 0/1.
//
// Wrapped memory may have any non-negative strides. Everything that computes (kernels, the
// interpreter, the executors, .npy I/O) needs dense row-major data and gets it through raw()
// and data(), which throw ampfuse::Error for a non-contiguous tensor; contiguous() makes the
// dense copy explicitly. Element access (get_f64, set_f64), clone(), contiguous() and
// strides() work on any tensor.
class Tensor {
 public:
  // Runs once, on the thread that drops the last Tensor sharing wrapped memory; must not
  // throw.
  using Release = std::function<void()>;

  Tensor() = default;
  // Uninitialized storage of the given type; throws ampfuse::Error if too large.
  explicit Tensor(TensorType type);
  static Tensor zeros(TensorType type);
  // A tensor of `type` with no storage yet: share_storage() binds it.
  static Tensor unbound(TensorType type);
  // The `capacity` bytes at `data`, inside a buffer that `owner` keeps alive, seen as a
  // tensor of `type` (throws unless it fits): how executors hand out parts of one arena
  // without allocating. Copies of the result keep `owner` alive.
  static Tensor view_of(TensorType type, const std::shared_ptr<std::byte[]>& owner, std::byte* data, size_t capacity);

  // Wraps `data`, elements of `type` in row-major order, without copying: how a framework's
  // tensor goes in. The memory must stay valid until `release` runs, exactly once, when
  // the last Tensor sharing it is gone: copies, reshaped() and reinterpreted() views and
  // results that alias it (an executor output that is a view of an input) count.
  // sole_owner() is false for wrapped memory, so the executor never reuses it as scratch.
  // `data` must be aligned to the element size and may be null only when there are no
  // elements. On invalid arguments throws ampfuse::Error before taking ownership: `release`
  // does not run.
  static Tensor wrap(void* data, TensorType type, Release release = {});
  // The same with `strides[d]`, in elements (DLPack's and PyTorch's unit, not numpy's
  // bytes), one per dimension, each >= 0. Row-major strides give a contiguous tensor
  // (whatever the strides of extent-1 dimensions); others give a non-contiguous one.
  static Tensor wrap(void* data, TensorType type, std::span<const int64_t> strides, Release release = {});

  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t size() const { return size_; }  // elements
  size_t bytes() const { return static_cast<size_t>(size_) * ir::dtype_size(type_.dtype); }
  bool empty_storage() const { return !data_; }

  // The dense data; throws ampfuse::Error when the tensor is not contiguous.
  void* raw() { return dense_data(); }
  const void* raw() const { return dense_data(); }
  template <class T> T* data() { return static_cast<T*>(raw()); }
  template <class T> const T* data() const { return static_cast<const T*>(raw()); }

  // Dense row-major: always, except for wrap() with other strides.
  bool is_contiguous() const { return strides_.empty(); }
  // Elements from one element to the next along each dimension.
  std::vector<int64_t> strides() const;

  // Element i (in row-major order) as a double, exactly (f16/bf16 widened, ints converted;
  // i64 beyond 2^53 rounds). set_f64 converts with the round_to rules of
  // ir/scalar_program.h.
  double get_f64(int64_t i) const;
  void set_f64(int64_t i, double v);

  // A dense copy in a buffer of its own.
  Tensor clone() const;
  // Copies the elements of `from`, a contiguous tensor of the same type, into this
  // tensor's buffer, whatever its strides (how a result goes into a framework's tensor).
  void copy_from(const Tensor& from);
  // This tensor when contiguous, otherwise clone().
  Tensor contiguous() const;
  // Same buffer, new shape with the same element count (throws otherwise, and for a
  // non-contiguous tensor).
  Tensor reshaped(Shape s) const;
  // Same buffer seen as another type that fits in it (throws otherwise, and for a
  // non-contiguous tensor): how the executor reuses a dead value's buffer for a new one.
  Tensor reinterpreted(TensorType t) const;
  // This tensor's type over `other`'s buffer (which must hold it, densely): rebinding a
  // tensor object without allocating. release_storage() drops the buffer, keeping the type.
  void share_storage(const Tensor& other);
  void release_storage() { data_.reset(), capacity_ = 0; }
  // No other Tensor shares this buffer and it is not wrapped memory (which belongs to
  // someone else): whoever holds it may reuse the buffer.
  bool sole_owner() const;
  // Bytes the buffer holds: at least bytes() when contiguous; for a non-contiguous tensor,
  // those from its first element to the end of its last.
  size_t capacity() const { return capacity_; }

 private:
  void* dense_data() const {
    if (!strides_.empty()) [[unlikely]]
      fail_not_contiguous();
    return data_.get();
  }
  [[noreturn]] void fail_not_contiguous() const;
  // Where element i (row-major order) lies, in elements from the first.
  int64_t offset_of(int64_t i) const;

  TensorType type_;
  int64_t size_ = 0;
  size_t capacity_ = 0;
  std::shared_ptr<std::byte[]> data_;
  // Empty for dense row-major (every tensor but some wrapped ones): copies stay as cheap.
  std::vector<int64_t> strides_;
};

// Buffers allocated for tensors so far in this process (Tensor(type), zeros, clone...; not
// view_of). Tests use it to show that a run allocates nothing.
int64_t tensor_buffer_allocations();

// Converts every element to `to` with the round_to rules (the interpreter's Cast).
Tensor cast(const Tensor& t, DType to);
// Float tensor of the same shape holding the elements as f64 values (for comparisons).
std::vector<double> to_f64_vector(const Tensor& t);

}  // namespace ampfuse::runtime
