#include "engine/passes/cast_fold.h"

#include "engine/passes/amp_options.h"
#include "engine/passes/graph_rebuilder.h"
#include "engine/passes/remove_unused.h"
#include "engine/passes/typed_graph.h"
#include "ir/op_registry.h"

#include <algorithm>
#include <map>

namespace ampfuse::engine {

namespace {

using ir::DType;
using ir::ValueRef;

bool amp_inserted(const ir::Node& n) {
  auto it = n.hints.find(kAmpInsertedHint);
  return it != n.hints.end() && it->second == "1";
}

// Every value of `from` is exactly a value of `to`. A conversion depends only on the value
// it converts (round to nearest even, truncate, x != 0), so cast(cast(x, to), B) is then
// cast(x, B) for every B.
bool preserves_values(DType from, DType to) {
  if (from == to) return true;
  switch (from) {
    case DType::boolean: return true;  // 0 and 1 exist in every type
    case DType::i8:
    case DType::u8:  // |x| <= 255 fits the 8 significant bits of bf16 and the 11 of f16
      return to == DType::i32 || to == DType::i64 || ir::is_float(to);
    case DType::i32: return to == DType::i64 || to == DType::f64;
    case DType::f16:
    case DType::bf16: return to == DType::f32 || to == DType::f64;
    case DType::f32: return to == DType::f64;
    default: return false;
  }
}

// amp_cast retypes only f32/f16/bf16 and passes other types through; when a chain is
// shortened to start from such a type, only Cast still converts.
bool amp_cast_retypes(DType from) { return from == DType::f32 || ir::is_lowp(from); }

int count_casts(const ir::Graph& g) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), ir::is_cast));
}

class Folder {
 public:
  explicit Folder(const ir::Graph& g) : g_(g), rb_(g) {}

  ir::Graph run() {
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i) {
      if (ir::is_cast(g_.nodes[i]))
        rb_.set({i, 0}, fold(g_.nodes[i]));
      else
        rb_.copy(i);
    }
    return rb_.finish();
  }

 private:
  const ir::Graph& out() { return rb_.out(); }
  DType type_of(ValueRef v) { return out().type(v).dtype; }

  // The new value standing for cast node `n`: its input, an earlier cast, or a new cast.
  ValueRef fold(const ir::Node& n) {
    const DType to = n.outputs.at(0).dtype;
    ValueRef x = rb_.map(n.inputs.at(0));
    for (;;) {
      if (type_of(x) == to) return x;
      const ir::Node& p = out().node(x);
      if (!ir::is_cast(p)) break;
      const ValueRef y = p.inputs.at(0);
      if (preserves_values(type_of(y), type_of(x))) {
        x = y;
        continue;
      }
      if (amp_inserted(n) && amp_inserted(p) && type_of(y) == DType::f32 && ir::is_lowp(type_of(x)) &&
          to == DType::f32)
        return y;
      break;
    }
    auto [it, fresh] = first_cast_.try_emplace({x, to});
    if (!fresh) return it->second;
    ir::Node cast = n;
    cast.inputs = {x};
    if (cast.op == "amp_cast" && !amp_cast_retypes(type_of(x))) {
      cast.op = "Cast";
      cast.attrs = ir::complete_attrs(ir::OpRegistry::global().get("Cast"), cast.attrs);
    }
    it->second = {rb_.emit(std::move(cast)), 0};
    return it->second;
  }

  const ir::Graph& g_;
  GraphRebuilder rb_;
  std::map<std::pair<ValueRef, DType>, ValueRef> first_cast_;  // (input, type) -> cast
};

}  // namespace

int cast_fold(ir::Graph& g) {
  infer_if_untyped(g);
  const int before = count_casts(g);
  g = Folder(g).run();
  remove_unused(g, [&](int32_t i) { return ir::is_cast(g.nodes[i]); });
  return before - count_casts(g);
}

}  // namespace ampfuse::engine
