#include "engine/passes/compute_in_f32.h"

#include "engine/passes/graph_rebuilder.h"
#include "ir/op_registry.h"

#include <fmt/format.h>

#include <map>

namespace ampfuse::engine {

namespace {

using ir::DType;
using ir::ValueRef;

bool has_lowp_operand(const ir::Graph& g, const ir::Node& n) {
  for (ValueRef in : n.inputs)
    if (ir::is_lowp(g.type(in).dtype)) return true;
  for (const ir::TensorType& t : n.outputs)
    if (ir::is_lowp(t.dtype)) return true;
  return false;
}

ir::Node make_cast(std::string name, ValueRef input, const ir::TensorType& from, DType to) {
  static const ir::OpDef& def = ir::OpRegistry::global().get("amp_cast");
  ir::Node cast;
  cast.op = "amp_cast";
  cast.name = std::move(name);
  cast.inputs = {input};
  ir::Attrs attrs;
  attrs.set("dtype", to);
  cast.attrs = ir::complete_attrs(def, std::move(attrs));
  cast.outputs = {ir::TensorType{to, from.shape}};
  return cast;
}

}  // namespace

int compute_in_f32(ir::Graph& g, const std::function<bool(const ir::Graph&, int32_t)>& computes_in_f32) {
  std::vector<int32_t> chosen;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i)
    if (!g.nodes[i].is_var() && has_lowp_operand(g, g.nodes[i]) && computes_in_f32(g, i)) chosen.push_back(i);
  if (chosen.empty()) return 0;

  GraphRebuilder rb(g);
  std::map<ValueRef, ValueRef> widened;  // old low-precision value -> its f32 cast (one per value)
  size_t next = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    if (next == chosen.size() || chosen[next] != i) {
      rb.copy(i);
      continue;
    }
    ++next;
    ir::Node n = g.nodes[i];
    for (ValueRef& in : n.inputs) {
      const ir::TensorType& t = g.type(in);
      if (!ir::is_lowp(t.dtype)) {
        in = rb.map(in);
        continue;
      }
      auto [it, fresh] = widened.try_emplace(in);
      if (fresh) {
        const std::string name = fmt::format("{}_f32", g.node(in).name);
        it->second = {rb.emit(make_cast(name, rb.map(in), t, DType::f32)), 0};
      }
      in = it->second;
    }
    const std::vector<ir::TensorType> narrow_types = n.outputs;
    for (ir::TensorType& t : n.outputs)
      if (ir::is_lowp(t.dtype)) t.dtype = DType::f32;
    // An attribute that names the output's type (softmax's and _backward_softmax's `dtype`)
    // widens with it, or type inference would give the node its narrow type back.
    if (n.attrs.has("dtype") && !n.attrs.is_none("dtype") && ir::is_lowp(n.attrs.get_dtype("dtype")) &&
        n.attrs.get_dtype("dtype") == narrow_types[0].dtype)
      n.attrs.set("dtype", DType::f32);
    const std::string name = n.name;
    n.name += "_f32";
    const int32_t wide = rb.emit(std::move(n));
    for (int32_t o = 0; o < static_cast<int32_t>(narrow_types.size()); ++o) {
      ValueRef result{wide, o};
      if (ir::is_lowp(narrow_types[o].dtype)) {
        const std::string cast_name = narrow_types.size() > 1 ? fmt::format("{}_output{}", name, o) : name;
        result = {rb.emit(make_cast(cast_name, result, narrow_types[o], narrow_types[o].dtype)), 0};
      }
      rb.set({i, o}, result);
    }
  }
  g = rb.finish();
  return static_cast<int>(chosen.size());
}

}  // namespace ampfuse::engine
