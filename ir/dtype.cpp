#include "ir/dtype.h"

#include "ir/error.h"

namespace ampfuse::ir {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  std::string_view mxnet_name;
  size_t size;
};
constexpr DTypeInfo kInfo[] = {
    {DType::f32, "f32", "float32", 4}, {DType::f16, "f16", "float16", 2},
    {DType::bf16, "bf16", "bfloat16", 2}, {DType::f64, "f64", "float64", 8},
    {DType::i8, "i8", "int8", 1},         {DType::u8, "u8", "uint8", 1},
    {DType::i32, "i32", "int32", 4},      {DType::i64, "i64", "int64", 8},
    {DType::boolean, "bool", "bool", 1},
};
const DTypeInfo& info(DType t) { return kInfo[static_cast<int>(t)]; }
}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }
std::string_view mxnet_dtype_name(DType t) { return info(t).mxnet_name; }
size_t dtype_size(DType t) { return info(t).size; }

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& i : kInfo)
    if (s == i.name || s == i.mxnet_name) return i.type;
  return std::nullopt;
}

bool is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}
bool is_lowp(DType t) { return t == DType::f16 || t == DType::bf16; }

DType compute_type(std::span<const DType> operand_dtypes) {
  for (DType t : operand_dtypes)
    if (t == DType::f64 || !is_float(t)) return DType::f64;
  return DType::f32;
}

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) fail("negative extent in shape {}", shape_str(s));
    if (__builtin_mul_overflow(n, d, &n)) fail("shape {} has more than 2^63 elements", shape_str(s));
  }
  return n;
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }

std::string type_str(const TensorType& t) {
  return fmt::format("{}{}", dtype_name(t.dtype), shape_str(t.shape));
}

}  // namespace ampfuse::ir
