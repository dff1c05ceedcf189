// The graph IR: nodes in topological order, each producing one or more typed values.
#pragma once

#include "ir/attrs.h"
#include "ir/dtype.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ampfuse::ir {

struct OpDef;

// One output of one node.
struct ValueRef {
  int32_t node = -1;
  int32_t index = 0;
  friend bool operator==(const ValueRef&, const ValueRef&) = default;
  friend auto operator<=>(const ValueRef&, const ValueRef&) = default;
};

// The op name of graph variables (MXNet's "null").
inline constexpr const char* kVarOp = "var";

// What a variable holds. A param or aux variable is what MXNet keeps in its .params file;
// aux is the state ops update in training (BatchNorm's moving mean and variance).
enum class VarRole : uint8_t { input, param, aux };
std::string_view var_role_name(VarRole r);

struct Node {
  std::string op;    // registry name, or kVarOp
  std::string name;  // not necessarily unique (MXNet graphs repeat names); var names are unique
  std::vector<ValueRef> inputs;
  Attrs attrs;  // typed by the op's schema
  // Attributes ampfuse does not interpret but keeps for export: MXNet's "__layout__",
  // "__shape__", "lr_mult", "ctx_group" ... as their original strings.
  std::map<std::string, std::string> hints;
  // One type per output. Empty until type inference for ops; for a variable, empty means
  // "not known yet" (a weight whose shape the consumer's inference fills in).
  std::vector<TensorType> outputs;
  VarRole role = VarRole::input;  // variables only

  bool is_var() const { return op == kVarOp; }
  friend bool operator==(const Node&, const Node&) = default;
};

struct Graph {
  std::vector<Node> nodes;       // topological: every input refers to an earlier node
  std::vector<ValueRef> outputs;  // graph outputs, in order

  const Node& node(ValueRef v) const { return nodes.at(v.node); }
  const TensorType& type(ValueRef v) const;  // throws if not inferred yet

  // Appends a node and returns its index.
  int32_t add(Node n);
  // Index of the variable called `name`, or nullopt.
  std::optional<int32_t> find_var(const std::string& name) const;
  // Names of graph outputs as MXNet spells them: "<node>_output", or "<node>_output<i>"
  // when the node has several outputs.
  std::string output_name(size_t i) const;

  friend bool operator==(const Graph&, const Graph&) = default;
};

// For each value, how many times it is read by nodes or graph outputs.
std::map<ValueRef, int> use_counts(const Graph& g);

// Per node: a param or aux variable (weights, BatchNorm statistics), or an op with inputs
// that reads only such nodes: what stays the same from run to run at inference.
std::vector<bool> computed_from_params(const Graph& g);

}  // namespace ampfuse::ir
