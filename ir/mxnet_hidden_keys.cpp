#include "ir/mxnet_hidden_keys.h"

#include "ir/op_registry.h"

#include <optional>
#include <string>

namespace ampfuse::ir {

namespace {

std::string dunder(std::string_view key) { return "__" + std::string(key) + "__"; }

// For "weight_lr_mult": {"weight", "lr_mult"}.
std::optional<std::pair<std::string, std::string_view>> split_prefixed(const std::string& key) {
  for (std::string_view hidden : kMxnetHiddenKeys)
    if (key.size() > hidden.size() + 1 && key.ends_with(hidden) && key[key.size() - hidden.size() - 1] == '_')
      return std::pair{key.substr(0, key.size() - hidden.size() - 1), hidden};
  return std::nullopt;
}

bool is_bare_hidden_key(std::string_view key) {
  for (std::string_view hidden : kMxnetHiddenKeys)
    if (key == hidden) return true;
  return false;
}

// The variable behind input `slot_name` of op node `n`, looking through casts; or -1.
int32_t variable_of_slot(const Graph& g, const Node& n, const std::string& slot_name) {
  const OpDef* def = OpRegistry::global().find(n.op);
  if (!def) return -1;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    if (def->slot(k, n.attrs).name != slot_name) continue;
    int32_t id = n.inputs[k].node;
    while (is_cast(g.nodes[id]) && !g.nodes[id].inputs.empty()) id = g.nodes[id].inputs[0].node;
    return g.nodes[id].is_var() ? id : -1;
  }
  return -1;
}

}  // namespace

void upgrade_mxnet_hidden_keys(Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    std::map<std::string, std::string> kept;
    for (auto& [key, value] : g.nodes[i].hints) {
      if (is_bare_hidden_key(key)) {
        kept.emplace(dunder(key), value);  // an existing "__key__" wins (emplace below keeps it)
        continue;
      }
      if (!g.nodes[i].is_var()) {
        if (auto prefixed = split_prefixed(key)) {
          const int32_t var = variable_of_slot(g, g.nodes[i], prefixed->first);
          // The op's word wins over the variable's own, as in MXNet's loader.
          if (var >= 0) g.nodes[var].hints.insert_or_assign(dunder(prefixed->second), value);
          continue;
        }
      }
      kept.insert_or_assign(key, value);
    }
    // Keys already spelled "__key__" in the node win over a bare one renamed to them.
    for (auto& [key, value] : g.nodes[i].hints)
      if (key.starts_with("__")) kept.insert_or_assign(key, value);
    g.nodes[i].hints = std::move(kept);
  }
}

}  // namespace ampfuse::ir
