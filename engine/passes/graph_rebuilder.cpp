#include "engine/passes/graph_rebuilder.h"

#include "ir/error.h"
#include "ir/op_registry.h"

namespace ampfuse::engine {

GraphRebuilder::GraphRebuilder(const ir::Graph& old) : old_(old), map_(old.nodes.size()) {}

int32_t GraphRebuilder::emit(ir::Node n) { return out_.add(std::move(n)); }

int32_t GraphRebuilder::copy(int32_t i) {
  ir::Node n = old_.nodes.at(i);
  for (ir::ValueRef& in : n.inputs) in = map(in);
  const size_t outs = n.is_var() ? 1 : ir::OpRegistry::global().get(n.op).output_count(n.attrs);
  const int32_t id = emit(std::move(n));
  for (size_t k = 0; k < outs; ++k) set({i, static_cast<int32_t>(k)}, {id, static_cast<int32_t>(k)});
  return id;
}

bool GraphRebuilder::has(ir::ValueRef v) const {
  return v.node >= 0 && static_cast<size_t>(v.node) < map_.size() &&
         static_cast<size_t>(v.index) < map_[v.node].size() && map_[v.node][v.index].node >= 0;
}

ir::ValueRef GraphRebuilder::map(ir::ValueRef v) const {
  if (!has(v)) fail("internal: value {}:{} used before it was emitted", v.node, v.index);
  return map_[v.node][v.index];
}

void GraphRebuilder::set(ir::ValueRef v, ir::ValueRef to) {
  auto& slots = map_.at(v.node);
  if (slots.size() <= static_cast<size_t>(v.index)) slots.resize(v.index + 1);
  slots[v.index] = to;
}

ir::Graph GraphRebuilder::finish() {
  for (ir::ValueRef o : old_.outputs) out_.outputs.push_back(map(o));
  return std::move(out_);
}

}  // namespace ampfuse::engine
