// What the commands share: parsing --shape and --inputs, and loading a model file.
#pragma once

#include "ir/graph.h"
#include "runtime/interpreter.h"

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ampfuse::tools {

// "--shape NAME=D0,D1,..." arguments, by name. Throws ampfuse::Error quoting the argument
// on bad syntax, a negative or non-integer extent, 2^63 elements or more, or a name given
// twice. A zero extent is allowed: the tensor is empty, and so are the outputs it reaches.
std::map<std::string, ir::Shape> parse_shape_args(const std::vector<std::string>& args);

// "--inputs NAME=FILE.npy" arguments: file path by name. Same error rules.
std::map<std::string, std::string> parse_input_args(const std::vector<std::string>& args);

// Reads an MXNet *-symbol.json without type inference. Throws naming the file. The graph
// holds what the heads reach, as MXNet's; `unreached`, where set, receives the names of the
// file's variables it dropped (set_variable_shapes accepts and ignores them, as MXNet's
// bind accepts shapes it does not use).
ir::Graph load_model_file(const std::string& path, std::set<std::string>* unreached = nullptr);
// As load_model_file, but an input whose __shape__ hint leaves extents open is typed with
// `placeholder` in their place, its hint as the file spells it put in `open_hints`
// (`ampfuse convert`: MxnetImportOptions::open_extent_placeholder).
ir::Graph load_model_file_with_placeholder(const std::string& path, std::set<std::string>* unreached,
                                           int64_t placeholder, std::map<std::string, std::string>* open_hints);

// The same for JSON text; errors name `source_name` in place of a file.
ir::Graph load_model_text(std::string_view json_text, std::string_view source_name,
                          std::set<std::string>* unreached = nullptr);

// Gives each named variable its type: `types` as they are; `shapes` with the dtype the
// variable already has, else the one its __dtype__ hint names (f32 if none). Throws
// ampfuse::Error for a name that is not a variable of the graph, listing the inputs; names
// in `unreached` (variables of the file no output depends on) are ignored.
void set_variable_types(ir::Graph& g, const std::map<std::string, ir::TensorType>& types);
void set_variable_shapes(ir::Graph& g, const std::map<std::string, ir::Shape>& shapes,
                         const std::set<std::string>& unreached = {});

// The graph's input variables (not weights), in graph order.
std::vector<const ir::Node*> input_variables(const ir::Graph& g);

// Inputs without a type that the user has to give. Labels (SoftmaxOutput's `label`) are
// left out while something else is missing: their shape follows from the data.
std::vector<std::string> inputs_needing_shapes(const ir::Graph& g);

// ir::infer_types; when it fails while inputs lack shapes, the error names the --shape to give.
void infer_types_naming_missing_shapes(ir::Graph& g);

// Op name -> number of nodes.
std::map<std::string, int> op_histogram(const ir::Graph& g);

// The typed graph of `model` (an MXNet *-symbol.json path), or of the embedded default
// model when `model` is empty (--shape data=N,3,32,32 sets its batch). `shapes` come from
// --shape; `given` are variables bound from --inputs files, whose types count unless
// --shape says otherwise. Throws ampfuse::Error naming the option or input at fault.
// An untyped graph as load_model_file gives it, typed: `given`'s types for their variables
// unless `shapes` names them, `shapes` (each with the variable's dtype), then inference,
// naming missing shapes. What load_model does for a model file.
ir::Graph type_model(ir::Graph g, const std::set<std::string>& unreached, const std::map<std::string, ir::Shape>& shapes,
                     const runtime::Bindings& given = {});

ir::Graph load_model(const std::string& model, const std::map<std::string, ir::Shape>& shapes,
                     const runtime::Bindings& given = {});

}  // namespace ampfuse::tools
