// MXNet's NDArray-list files (`*.params`, what mx.nd.save and HybridBlock.export write):
// read and write.
#pragma once

#include "runtime/tensor.h"

#include <cstdint>
#include <istream>
#include <map>
#include <string>
#include <vector>

namespace ampfuse::runtime {

// The arrays of one file, in file order. `names` holds one name per array for a named
// list (mx.nd.save of a dict: HybridBlock.export writes "arg:NAME" and "aux:NAME",
// Block.save_parameters plain names) and is empty for an unnamed one (mx.nd.save of a list).
struct NDArrayList {
  std::vector<Tensor> arrays;
  std::vector<std::string> names;
};

// Reads every version MXNet 1.x loads: 2 (magic 0xF993FAC9, what MXNet 1.x writes), 3
// (0xF993FACA, numpy shape semantics, for 0-d and zero-size arrays), 1 (0xF993FAC8) and the
// first one, without a magic. Arrays are dense (MXNet's default storage) of the types
// float32, float16, bfloat16, float64, uint8, int8, int32, int64 and bool, saved from any
// device. Anything else (sparse storage, int16 and the unsigned types ampfuse lacks, an
// array saved without data, a truncated or corrupt file, bytes after the names) throws
// ampfuse::Error naming the file, the array (its index, and its name once known) and what
// is wrong, before allocating more than the file's size.
NDArrayList read_mxnet_params(const std::string& path);
// The same from a stream holding `size` bytes from its position; `source` names it in errors.
NDArrayList read_mxnet_params(std::istream& in, uint64_t size, const std::string& source);

// Writes `list` as MXNet 1.x does (version 2, each array on cpu(0)), so that mx.nd.load reads
// it back and a file ampfuse read is written byte for byte as MXNet wrote it. When an array
// is 0-d or has a zero extent, which version 2 cannot hold, every array is written in version
// 3, which MXNet loads under numpy shape semantics (mx.util.np_shape(True)), as it writes
// such files. `names` must be empty or hold one name per array. Throws ampfuse::Error naming
// the file on an I/O failure.
void write_mxnet_params(const std::string& path, const NDArrayList& list);
void write_mxnet_params(std::ostream& out, const NDArrayList& list);

// The variable an array binds: its name with an "arg:" or "aux:" prefix dropped, as MXNet's
// loaders do ("arg:fc1_weight" -> "fc1_weight").
std::string param_variable_name(const std::string& array_name);

// The arrays by variable name (param_variable_name).
// Throws ampfuse::Error naming `source` for an unnamed list or a name that appears twice.
std::map<std::string, Tensor> params_by_name(const NDArrayList& list, const std::string& source);

}  // namespace ampfuse::runtime
