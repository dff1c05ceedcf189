// Element types, shapes and tensor types of the IR.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ampfuse::ir {

enum class DType : uint8_t { f32, f16, bf16, f64, i8, u8, i32, i64, boolean };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16,
                                       DType::f64, DType::i8,  DType::u8,
                                       DType::i32, DType::i64, DType::boolean};

// "f32", "f16", "bf16", "f64", "i8", "u8", "i32", "i64", "bool": the IR's spelling.
std::string_view dtype_name(DType t);
// "float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64", "bool".
std::string_view mxnet_dtype_name(DType t);
// Accepts both spellings above; nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view s);

size_t dtype_size(DType t);
bool is_float(DType t);  // f32, f16, bf16, f64
bool is_lowp(DType t);   // f16, bf16: the AMP targets

// The type a computation over operands of these dtypes runs in, f32 or f64: f64 when any
// operand is f64, an integer or bool (f32 holds integers exactly only up to 2^24, f64 up
// to 2^53), else f32 (f16 and bf16 widen to it exactly). The one definition: the
// interpreter evaluates recipes and its reference kernels compute in it, and the fusion
// planner gives each kernel its nodes' common compute type, which both code generators use.
DType compute_type(std::span<const DType> operand_dtypes);
inline DType compute_type(std::initializer_list<DType> operand_dtypes) {
  return compute_type(std::span<const DType>(operand_dtypes.begin(), operand_dtypes.size()));
}

using Shape = std::vector<int64_t>;

// Product of the extents; throws ampfuse::Error on a negative extent or when the product
// does not fit in int64.
int64_t num_elements(const Shape& s);
// "[1,3,224,224]"; "[]" for a scalar.
std::string shape_str(const Shape& s);

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;

  friend bool operator==(const TensorType&, const TensorType&) = default;
};

// "f32[1,3,224,224]"
std::string type_str(const TensorType& t);

}  // namespace ampfuse::ir
