// MXNet symbol JSON (*-symbol.json) import and export.
#pragma once

#include "ir/graph.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace ampfuse::ir {

struct MxnetImportOptions {
  // Shapes for input variables ("data" -> {1,3,224,224}); override __shape__ hints.
  std::map<std::string, Shape> input_shapes;
  std::map<std::string, DType> input_dtypes;  // default f32 (or the __dtype__ hint)
  // Run infer_types once an input variable has a shape. Inputs that consumers type (a
  // SoftmaxOutput label) may be left out; one that stays unknown is an error naming it.
  bool infer = true;
  // Out: where set, receives the names of the file's variables that no head reaches. The
  // import drops them (MXNet's symbol holds only what its heads reach); input_shapes and
  // input_dtypes may name them, as MXNet's bind accepts shapes of names it does not use.
  std::set<std::string>* unreached_variables = nullptr;
  // Where set, an input whose __shape__ hint leaves extents open (0 in a 1.x file, -1 in a
  // numpy-shape one) and that input_shapes does not name is typed with this extent in
  // their place, and `open_shape_hints` (if set) receives its hint as the file spells it.
  // For `ampfuse convert`, whose result does not depend on them (tools/model_steps.h).
  std::optional<int64_t> open_extent_placeholder;
  std::map<std::string, std::string>* open_shape_hints = nullptr;
};

// Reads every MXNet version's format: attributes under "attrs", "attr" or "param";
// 2- or 3-element input entries; files with or without node_row_ptr; "heads";
// "arg_nodes"; __shape__/__dtype__ hints. The graph is what MXNet's loader makes of the
// file: only the nodes the heads reach (in file order), and one variable per name (MXNet
// binds variables by name, so two nodes with one name read one array). Variables become
// input, param or aux by the slots they feed, through casts. Pre-0.9 files omit
// auxiliary-state inputs: as MXNet's loader does, a variable "<node>_<slot>" is added
// for each, just before its consumer. Errors name the source and the node: "resnet.json:
// node 12 'conv0' (Convolution): unknown attribute 'foo'". INT8 graphs are refused with one
// message naming the first unsupported op.
Graph import_mxnet_json(std::string_view json_text, std::string_view source_name,
                        const MxnetImportOptions& opts = {});
Graph load_mxnet_json_file(const std::string& path, const MxnetImportOptions& opts = {});

// The type a variable's `__dtype__` hint names (an MXNet type flag or a name), or nullopt
// when it has none or MXNet's "not known yet" (-1). Import spends the hints of the
// variables it types and leaves the others' for whoever gives their shape later (the CLI's
// --shape). Throws for a type ampfuse does not support.
std::optional<DType> variable_dtype_hint(const Node& var);

// Writes the 1.x format that MXNet 1.9 loads (attrs, 3-element entries, node_row_ptr,
// mxnet_version 10900). import_mxnet_json(export_mxnet_json(g)) == g for graphs whose
// variables carry their types in __shape__/__dtype__ hints (export writes them).
std::string export_mxnet_json(const Graph& g);

}  // namespace ampfuse::ir
