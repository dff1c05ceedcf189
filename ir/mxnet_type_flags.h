// MXNet's integer dtype codes (mshadow's TypeFlag), as written in "__dtype__" hints.
#pragma once

#include "ir/dtype.h"

#include <cstdint>
#include <optional>

namespace ampfuse::ir {

// Codes ampfuse has no type for (int16 = 8, uint16 = 9, uint32 = 10, uint64 = 11) are absent.
struct MxnetTypeFlag {
  int code;
  DType dtype;
};
inline constexpr MxnetTypeFlag kMxnetTypeFlags[] = {
    {0, DType::f32}, {1, DType::f64}, {2, DType::f16},  {3, DType::u8},   {4, DType::i32},
    {5, DType::i8},  {6, DType::i64}, {7, DType::boolean}, {12, DType::bf16},
};

inline std::optional<DType> dtype_from_mxnet_flag(int64_t code) {
  for (const auto& f : kMxnetTypeFlags)
    if (f.code == code) return f.dtype;
  return std::nullopt;
}

inline int mxnet_flag_of(DType t) {
  for (const auto& f : kMxnetTypeFlags)
    if (f.dtype == t) return f.code;
  return -1;  // unreachable: every DType has a code
}

}  // namespace ampfuse::ir
