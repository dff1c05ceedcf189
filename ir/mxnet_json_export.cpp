// MXNet symbol JSON export: the 1.x format MXNet 1.9 writes and loads.
#include "ir/error.h"
#include "ir/mxnet_hidden_keys.h"
#include "ir/mxnet_json.h"
#include "ir/mxnet_type_flags.h"
#include "ir/op_registry.h"

#include <nlohmann/json.hpp>

namespace ampfuse::ir {

namespace {

using ordered_json = nlohmann::ordered_json;

constexpr int kExportedMxnetVersion = 10900;

ordered_json entry(ValueRef v) { return ordered_json::array({v.node, v.index, 0}); }

// Every value as MXNet spells it; keys sorted, as MXNet's std::map-backed writer has them.
std::map<std::string, std::string> exported_attrs(const Node& n) {
  std::map<std::string, std::string> out = n.hints;
  if (n.is_var()) {
    // The type is the truth; a hint left from import (a partial shape) only stands in for it.
    if (!n.outputs.empty()) {
      out["__shape__"] = format_mxnet_attr(n.outputs[0].shape);
      out["__dtype__"] = std::to_string(mxnet_flag_of(n.outputs[0].dtype));
    }
    return out;
  }
  for (const auto& [key, value] : n.attrs.values()) {
    auto [pos, fresh] = out.emplace(key, format_mxnet_attr(value));
    if (!fresh) fail("attribute '{}' is also a hint, and a file can hold only one of them", key);
  }
  return out;
}

int output_count(const Node& n, const OpRegistry& registry) {
  if (n.is_var()) return 1;
  return registry.get(n.op).output_count(n.attrs);
}

}  // namespace

std::string export_mxnet_json(const Graph& graph) {
  const OpRegistry& registry = OpRegistry::global();
  // Hints from a graph built elsewhere (text IR, GraphBuilder) may still spell symbol
  // attributes the pre-1.0 way, which MXNet 1.9 refuses on an op: write them as it would.
  Graph g = graph;
  upgrade_mxnet_hidden_keys(g);
  ordered_json nodes = ordered_json::array();
  ordered_json arg_nodes = ordered_json::array();
  ordered_json row_ptr = ordered_json::array({0});
  int64_t rows = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    with_context(fmt::format("node {} '{}' ({})", i, n.name, n.op), [&] {
      ordered_json jn;
      jn["op"] = n.is_var() ? "null" : n.op;
      jn["name"] = n.name;
      const auto attrs = exported_attrs(n);
      if (!attrs.empty()) {
        ordered_json ja = ordered_json::object();
        for (const auto& [key, value] : attrs) ja[key] = value;
        jn["attrs"] = std::move(ja);
      }
      ordered_json inputs = ordered_json::array();
      for (ValueRef in : n.inputs) inputs.push_back(entry(in));
      jn["inputs"] = std::move(inputs);
      nodes.push_back(std::move(jn));
      if (n.is_var()) arg_nodes.push_back(i);
      rows += output_count(n, registry);
      row_ptr.push_back(rows);
    });
  }
  ordered_json heads = ordered_json::array();
  for (ValueRef out : g.outputs) heads.push_back(entry(out));

  ordered_json root;
  root["nodes"] = std::move(nodes);
  root["arg_nodes"] = std::move(arg_nodes);
  root["node_row_ptr"] = std::move(row_ptr);
  root["heads"] = std::move(heads);
  root["attrs"] = {{"mxnet_version", ordered_json::array({"int", kExportedMxnetVersion})}};
  // Names built in C++ need not be valid UTF-8; replace bad bytes rather than throw.
  return root.dump(2, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace ampfuse::ir
