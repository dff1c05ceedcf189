// NumPy .npy files (format 1.0/2.0/3.0): read and write.
#pragma once

#include "runtime/tensor.h"

#include <cstdint>
#include <istream>
#include <string>

namespace ampfuse::runtime {

// Reads little-endian <f2 <f4 <f8 |i1 |u1 <i4 <i8 |b1 arrays in C order ('|' or '<' for
// one-byte types; '=' is accepted on this little-endian host). Anything else (big-endian,
// Fortran order, object arrays, other types, truncated data) throws ampfuse::Error naming
// the file and the problem.
Tensor read_npy(const std::string& path);
// The same from a stream holding `size` bytes from its position; `source` names it in errors.
Tensor read_npy(std::istream& in, uint64_t size, const std::string& source);
// Writes `t` in format 1.0 (2.0 if the header needs it). bf16 is written as <f4 (exact);
// f16 as <f2. Throws ampfuse::Error naming the file on an I/O failure.
void write_npy(const std::string& path, const Tensor& t);

}  // namespace ampfuse::runtime
