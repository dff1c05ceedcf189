// Building graphs in C++ (the embedded default model, tests).
#pragma once

#include "ir/graph.h"

#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ampfuse::ir {

class GraphBuilder {
 public:
  ValueRef input(const std::string& name, TensorType type);
  // A weight or aux state; with no type, inference derives it from the consumer.
  ValueRef param(const std::string& name, std::optional<TensorType> type = std::nullopt);
  ValueRef aux(const std::string& name, std::optional<TensorType> type = std::nullopt);

  // Adds op `op` with attributes in MXNet's string spelling ({"kernel", "(3,3)"}),
  // typed by the op's schema. Returns output 0; node outputs are ValueRef{node, k}.
  ValueRef op(const std::string& op, std::vector<ValueRef> inputs,
              std::map<std::string, std::string> attrs = {}, std::string name = "");
  std::vector<ValueRef> op_multi(const std::string& op, std::vector<ValueRef> inputs,
                                 std::map<std::string, std::string> attrs = {},
                                 std::string name = "");

  void output(ValueRef v) { g_.outputs.push_back(v); }
  // Returns the graph (after infer_types when `infer`).
  Graph finish(bool infer = true);

 private:
  ValueRef var(const std::string& name, VarRole role, std::optional<TensorType> type);
  Graph g_;
  std::map<std::string, int> name_counts_;
  std::set<std::string> var_names_;  // names must be unique; Graph::find_var would scan every node
};

}  // namespace ampfuse::ir
