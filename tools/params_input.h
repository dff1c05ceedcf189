// `--params FILE.params`: a model's weights from an MXNet NDArray-list file
// (runtime/mxnet_params.h), bound to its variables by name the way `--inputs` binds .npy files.
#pragma once

#include "ir/graph.h"
#include "runtime/interpreter.h"
#include "runtime/mxnet_params.h"

#include <string>
#include <vector>

namespace ampfuse::tools {

// A .params file as read, with its arrays by variable name ("arg:"/"aux:" dropped).
struct ParamsFile {
  std::string path;
  runtime::NDArrayList list;      // as in the file: names and order kept for --params-out
  runtime::Bindings by_variable;  // variable name -> array
};

// Reads `path`. Throws ampfuse::Error naming the file (and the array) for anything
// read_mxnet_params or params_by_name refuses.
ParamsFile read_params_file(const std::string& path);

// Checks the file against `g`, typed as far as inference got: every array names a variable
// of the model, not one that `--inputs` binds too, and has that variable's shape and dtype
// where the variable is typed. Throws ampfuse::Error naming the file and the array.
void check_params_against_model(const ParamsFile& params, const ir::Graph& g,
                                const runtime::Bindings& inputs = {});

// Weights (param and aux variables) of `g` that the file gives no value, in graph order.
std::vector<std::string> weights_without_values(const ParamsFile& params, const ir::Graph& g);

// The file's arrays for the converted graph `converted` (`ampfuse convert --params-out`), as
// MXNet's convert_model(..., cast_optional_params=True) gives them: same names and order, each
// cast to the dtype its variable has there (a weight stored in low precision offline), the
// others unchanged.
runtime::NDArrayList params_for_converted_model(const ParamsFile& params, const ir::Graph& converted);

}  // namespace ampfuse::tools
