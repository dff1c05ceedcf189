#include "runtime/tensor.h"

#include "ir/error.h"
#include "runtime/fault_injection.h"
#include "ir/int_conversion.h"
#include "ir/lowp.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

namespace ampfuse::runtime {

namespace {

std::atomic<int64_t> g_allocations{0};

std::shared_ptr<std::byte[]> allocate(size_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (fault_strikes(Fault::alloc)) fail("out of memory allocating {} bytes {}", bytes, injected_fault_note());
  // 64-byte aligned so vector kernels can use aligned loads; at least one byte so that an
  // empty tensor still has storage. From 4 MiB on, whole 2 MiB huge pages where the kernel
  // grants them (as the executor's arena): a kernel streaming through 256 MiB otherwise
  // walks 65536 pages, and C8 through run() took 1.3x its time into such a buffer.
  constexpr size_t kHugePage = size_t{2} << 20;
  const bool huge = bytes >= 2 * kHugePage;
  const size_t align = huge ? kHugePage : 64;
  const size_t rounded = huge ? (bytes + kHugePage - 1) / kHugePage * kHugePage : ((bytes + 63) / 64) * 64 + 64;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) fail("out of memory allocating {} bytes", bytes);
  if (huge) madvise(p, rounded, MADV_HUGEPAGE);
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

// The deleter of wrapped memory: runs its owner's release. A type of its own, so that
// sole_owner() can tell wrapped memory from ours (std::get_deleter).
struct WrappedRelease {
  Tensor::Release release;
  void operator()(std::byte*) const {
    if (release) release();
  }
};

// What wrapped tensors without elements and without a pointer point to: every tensor that
// has a type has storage, as allocate() gives empty tensors a byte.
alignas(64) std::byte g_no_elements[64];

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = step;
    // Wraps only where the strides do not matter: a shape without elements, or one that
    // num_elements rejects.
    __builtin_mul_overflow(step, shape[d], &step);
  }
  return strides;
}

// Copies `count` elements between a strided buffer and a dense one, in row-major order:
// Direction::gather reads strided `src` into dense `dst`, Direction::scatter the reverse.
enum class Direction { gather, scatter };
template <class T, Direction kDirection>
void strided_copy(const std::byte* src, const Shape& shape, const std::vector<int64_t>& strides, int64_t count,
                  std::byte* dst) {
  const T* from = reinterpret_cast<const T*>(src);
  T* to = reinterpret_cast<T*>(dst);
  std::vector<int64_t> index(shape.size(), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (kDirection == Direction::gather)
      to[i] = from[offset];
    else
      to[offset] = from[i];
    for (size_t d = shape.size(); d-- > 0;) {  // next index, last dimension fastest
      offset += strides[d];
      if (++index[d] < shape[d]) break;
      offset -= strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

// strided_copy for an element size.
template <Direction kDirection>
void strided_copy(size_t element_size, const std::byte* src, const Shape& shape, const std::vector<int64_t>& strides,
                  int64_t count, std::byte* dst) {
  switch (element_size) {
    case 1: strided_copy<uint8_t, kDirection>(src, shape, strides, count, dst); break;
    case 2: strided_copy<uint16_t, kDirection>(src, shape, strides, count, dst); break;
    case 4: strided_copy<uint32_t, kDirection>(src, shape, strides, count, dst); break;
    case 8: strided_copy<uint64_t, kDirection>(src, shape, strides, count, dst); break;
    default: fail("no strided copy for {}-byte elements", element_size);
  }
}

// Element k of a buffer of T.
template <class T>
const T& at(const std::byte* base, int64_t k) {
  return reinterpret_cast<const T*>(base)[k];
}
template <class T>
T& at(std::byte* base, int64_t k) {
  return reinterpret_cast<T*>(base)[k];
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
  if (!other.strides_.empty()) fail("internal: a tensor cannot share the storage of a non-contiguous one");
  strides_.clear();
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

Tensor Tensor::wrap(void* data, TensorType type, Release release) {
  const std::vector<int64_t> strides = row_major_strides(type.shape);
  return wrap(data, std::move(type), strides, std::move(release));
}

Tensor Tensor::wrap(void* data, TensorType type, std::span<const int64_t> strides, Release release) {
  const int64_t n = ir::num_elements(type.shape);
  const Shape& shape = type.shape;
  const size_t element = ir::dtype_size(type.dtype);
  const auto what = [&] {
    return fmt::format("{} with strides {}", ir::type_str(type), ir::shape_str(Shape(strides.begin(), strides.end())));
  };
  if (strides.size() != shape.size()) fail("cannot wrap {}: one stride per dimension needed", what());
  for (size_t d = 0; d < strides.size(); ++d)
    if (strides[d] < 0) fail("cannot wrap {}: the stride of dimension {} is negative", what(), d);
  if (!data && n > 0) fail("cannot wrap {}: the data pointer is null", what());
  if (reinterpret_cast<uintptr_t>(data) % element != 0)
    fail("cannot wrap {}: the data at {} is not aligned to its {}-byte elements", what(), data, element);

  // The bytes from the first element to the end of the last, and whether the strides are
  // the row-major ones wherever they matter (extents above 1).
  size_t span = 0;
  bool contiguous = true;
  if (n > 0) {
    int64_t last = 0, step = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      int64_t reach = 0;
      if (__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) || __builtin_add_overflow(last, reach, &last) ||
          __builtin_mul_overflow(static_cast<size_t>(last) + 1, element, &span))
        fail("cannot wrap {}: its last element lies beyond the address space", what());
      contiguous &= shape[d] == 1 || strides[d] == step;
      step *= shape[d];
    }
  }

  Tensor t;
  t.type_ = std::move(type);
  t.size_ = n;
  t.capacity_ = span;
  t.data_ = std::shared_ptr<std::byte[]>(data ? static_cast<std::byte*>(data) : g_no_elements,
                                         WrappedRelease{std::move(release)});
  if (!contiguous) t.strides_.assign(strides.begin(), strides.end());
  return t;
}

std::vector<int64_t> Tensor::strides() const { return is_contiguous() ? row_major_strides(shape()) : strides_; }

bool Tensor::sole_owner() const { return data_.use_count() == 1 && !std::get_deleter<WrappedRelease>(data_); }

void Tensor::fail_not_contiguous() const {
  fail("tensor {} with strides {} is not contiguous, and this needs dense row-major data: pass contiguous()",
       ir::type_str(type_), ir::shape_str(strides_));
}

int64_t Tensor::offset_of(int64_t i) const {
  if (strides_.empty()) return i;
  int64_t offset = 0;
  for (size_t d = strides_.size(); d-- > 0;) {
    const int64_t extent = type_.shape[d];
    offset += (i % extent) * strides_[d];
    i /= extent;
  }
  return offset;
}

double Tensor::get_f64(int64_t i) const {
  const int64_t k = offset_of(i);
  const std::byte* p = data_.get();
  switch (dtype()) {
    case DType::f32: return at<float>(p, k);
    case DType::f16: return ir::f16_bits_to_f32(at<uint16_t>(p, k));
    case DType::bf16: return ir::bf16_bits_to_f32(at<uint16_t>(p, k));
    case DType::f64: return at<double>(p, k);
    case DType::i8: return at<int8_t>(p, k);
    case DType::u8: return at<uint8_t>(p, k);
    case DType::i32: return at<int32_t>(p, k);
    case DType::i64: return static_cast<double>(at<int64_t>(p, k));
    case DType::boolean: return at<uint8_t>(p, k) ? 1.0 : 0.0;
  }
  return 0;
}

void Tensor::set_f64(int64_t i, double v) {
  const int64_t k = offset_of(i);
  std::byte* p = data_.get();
  switch (dtype()) {
    case DType::f32: at<float>(p, k) = static_cast<float>(v); break;  // RNE
    case DType::f16: at<uint16_t>(p, k) = ir::f64_to_f16_bits(v); break;
    case DType::bf16: at<uint16_t>(p, k) = ir::f64_to_bf16_bits(v); break;
    case DType::f64: at<double>(p, k) = v; break;
    case DType::i8: at<int8_t>(p, k) = ir::saturating_float_to_int<int8_t>(v); break;
    case DType::u8: at<uint8_t>(p, k) = ir::saturating_float_to_int<uint8_t>(v); break;
    case DType::i32: at<int32_t>(p, k) = ir::saturating_float_to_int<int32_t>(v); break;
    case DType::i64: at<int64_t>(p, k) = ir::saturating_float_to_int<int64_t>(v); break;
    case DType::boolean: at<uint8_t>(p, k) = v != 0 ? 1 : 0; break;  // NaN != 0: true
  }
}

Tensor Tensor::clone() const {
  Tensor t(type_);
  if (is_contiguous()) {
    if (bytes()) std::memcpy(t.raw(), raw(), bytes());
    return t;
  }
  strided_copy<Direction::gather>(ir::dtype_size(dtype()), data_.get(), shape(), strides_, size_, t.data_.get());
  return t;
}

void Tensor::copy_from(const Tensor& from) {
  if (from.type_ != type_)
    fail("cannot copy {} into {}: the types differ", ir::type_str(from.type_), ir::type_str(type_));
  const std::byte* src = static_cast<const std::byte*>(from.raw());
  if (is_contiguous()) {
    if (bytes()) std::memcpy(data_.get(), src, bytes());
    return;
  }
  strided_copy<Direction::scatter>(ir::dtype_size(dtype()), src, shape(), strides_, size_, data_.get());
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::reshaped(Shape s) const {
  if (ir::num_elements(s) != size_)
    fail("cannot reshape {} ({} elements) to {}", ir::type_str(type_), size_, ir::shape_str(s));
  if (!is_contiguous()) fail_not_contiguous();
  Tensor t = *this;
  t.type_.shape = std::move(s);
  return t;
}

Tensor Tensor::reinterpreted(TensorType t) const {
  if (!is_contiguous()) fail_not_contiguous();
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
