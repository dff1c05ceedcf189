// MXNet's Custom op (operators written in Python), dispatched on its op_type.
//
// A graph node `Custom(op_type="positional_encodings", length="100", ...)` keeps its extra
// attributes as the strings MXNet wrote (OpDef::open_attrs). The op_type's CustomOpDef
// gives those attributes a schema, fixes the input count and infers the output types, so a
// known op_type behaves like any registered op and an unknown one is an error naming it.
// The reference kernels live on the runtime side, in a table keyed by the same op_type.
#pragma once

#include "ir/op_registry.h"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ampfuse::ir {

struct CustomOpDef {
  std::string op_type;
  std::vector<AttrSpec> attrs;      // the extra attributes, MXNet's names and spellings
  std::vector<std::string> inputs;  // input names; their number is the input count
  int num_outputs = 1;
  // Infers the outputs from the typed extra attributes (see custom_op_attrs).
  std::function<void(const Attrs& typed, InferContext& ctx)> infer;
  // Whether its outputs stay constant as its float inputs move (a length mask, a table of
  // constants), so that it gives its inputs no gradient. Otherwise differentiating through
  // it is an error: its backward would be Python code ampfuse does not have.
  bool zero_gradient = false;
};

class CustomOpRegistry {
 public:
  // The process-wide table. It starts empty: register_nn_ops fills it.
  static CustomOpRegistry& global();

  void add(CustomOpDef def);  // throws on a duplicate op_type
  const CustomOpDef* find(std::string_view op_type) const;
  // Throws ampfuse::Error "unknown Custom op_type 'X' (known: ...)".
  const CustomOpDef& get(std::string_view op_type) const;
  bool empty() const { return defs_.empty(); }

 private:
  std::map<std::string, CustomOpDef, std::less<>> defs_;
};

// The CustomOpDef for op_type, after making sure the built-in op registry (and with it
// this table) is populated. Throws on an unknown op_type.
const CustomOpDef& custom_op(std::string_view op_type);

// The extra attributes of a Custom node typed by `def`'s schema, defaults filled in.
// Throws on a malformed, missing required or undeclared attribute, naming it.
Attrs custom_op_attrs(const CustomOpDef& def, const Attrs& node_attrs);

// The registry entry for "Custom" itself: open attributes, op_type required, input count,
// outputs and inference taken from the op_type's CustomOpDef.
OpDef make_custom_op_def();

// Sockeye 1.18's three custom ops (ir/ops/sockeye_custom.cpp).
void register_sockeye_custom_ops(CustomOpRegistry& r);

}  // namespace ampfuse::ir
