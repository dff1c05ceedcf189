#include "engine/passes/layout_optimize.h"

#include "engine/passes/graph_rebuilder.h"
#include "engine/passes/remove_unused.h"
#include "engine/passes/typed_graph.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/ops/nn_params.h"
#include "ir/ops/tensor_shapes.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace ampfuse::engine {

namespace {

using ir::ValueRef;
using Perm = std::vector<int64_t>;

// transpose(x, p) has out.shape[i] = x.shape[p[i]].
Perm to_last(size_t rank) {  // NCHW -> NHWC
  Perm p{0};
  for (size_t d = 2; d < rank; ++d) p.push_back(static_cast<int64_t>(d));
  p.push_back(1);
  return p;
}
Perm to_first(size_t rank) {  // NHWC -> NCHW
  Perm p{0, static_cast<int64_t>(rank) - 1};
  for (size_t d = 1; d + 1 < rank; ++d) p.push_back(static_cast<int64_t>(d));
  return p;
}
bool has_layouts(size_t rank) { return rank >= 3 && rank <= 5; }

bool is_identity(const Perm& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}
// transpose(transpose(x, inner), outer) == transpose(x, compose(inner, outer)).
Perm compose(const Perm& inner, const Perm& outer) {
  Perm c;
  for (int64_t o : outer) c.push_back(inner[o]);
  return c;
}
ir::Shape permute(const ir::Shape& s, const Perm& p) {
  ir::Shape out;
  for (int64_t d : p) out.push_back(s[d]);
  return out;
}

// The permutation a transpose node applies.
Perm perm_of(const ir::Graph& g, const ir::Node& t) {
  return ir::transpose_permutation(g.type(t.inputs[0]).shape, t.attrs.get_ints("axes"));
}

// The op's channels-last rule (ir::ChannelsLastRule), if the data of node n has a layout.
const ir::ChannelsLastRule* rule_of(const ir::Graph& g, const ir::Node& n) {
  if (n.is_var() || n.inputs.empty() || !has_layouts(g.type(n.inputs[0]).shape.size())) return nullptr;
  const ir::OpDef& def = ir::OpRegistry::global().get(n.op);
  return def.channels_last ? &*def.channels_last : nullptr;
}

bool channels_first(const ir::Node& n, const ir::ChannelsLastRule& rule, size_t rank) {
  return !ir::nn::layout_channels_last(n.attrs, rank, rule.attr);
}

// The ops a channels-last region starts from (convolutions), still channels-first.
bool is_seed(const ir::Graph& g, const ir::Node& n) {
  const ir::ChannelsLastRule* rule = rule_of(g, n);
  return rule && rule->starts_region && channels_first(n, *rule, g.type(n.inputs[0]).shape.size());
}

// A node that computes the same thing on channels-last data once told so: which inputs
// and outputs carry that data, and its attributes for channels-last.
struct Movable {
  size_t rank = 0;
  std::vector<size_t> inputs, outputs;
  ir::Attrs attrs;
};

std::optional<Movable> movable(const ir::Graph& g, const ir::Node& n) {
  using Channels = ir::ChannelsLastRule::Channels;
  const ir::ChannelsLastRule* rule = rule_of(g, n);
  if (!rule || rule->starts_region) return std::nullopt;
  Movable m{g.type(n.inputs[0]).shape.size(), {0}, {0}, n.attrs};
  if (rule->every_input)
    for (size_t k = 1; k < n.inputs.size(); ++k) m.inputs.push_back(k);
  if (rule->output_per_input) m.outputs = m.inputs;
  for (size_t k : m.inputs) {
    const ir::Shape& in = g.type(n.inputs[k]).shape;
    if (in.size() != m.rank) return std::nullopt;
    // Broadcasting, or a per-channel view of an input (PReLU's gamma), would not commute
    // with a transpose: an op that finds channels anywhere must see them where its output does.
    if (rule->channels == Channels::anywhere && !rule->output_per_input && in != n.outputs[0].shape)
      return std::nullopt;
  }
  switch (rule->channels) {
    case Channels::anywhere: break;
    case Channels::layout_attr:
      if (!channels_first(n, *rule, m.rank)) return std::nullopt;
      m.attrs.set(rule->attr, std::string(ir::nn::layout_name(m.rank, /*channels_last=*/true)));
      break;
    case Channels::axis_attr: {
      // Where that axis of the data lands once the data is channels-last.
      const int64_t axis = ir::nn::normalize_axis(n.attrs.get_int(rule->attr), m.rank, rule->attr);
      m.attrs.set(rule->attr, to_first(m.rank)[axis]);
      break;
    }
  }
  return m;
}

// One rewrite sweep over the graph, in node order.
class Sweep {
 public:
  explicit Sweep(const ir::Graph& g) : g_(g), rb_(g), uses_(ir::use_counts(g)), users_(g.nodes.size()) {
    for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i)
      for (ValueRef in : g.nodes[i].inputs) users_[in.node].push_back(i);
  }

  ir::Graph run() {
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i) {
      const ir::Node& n = g_.nodes[i];
      if (rb_.has({i, 0})) continue;  // a transpose a hoist already stands in for
      if (n.op == "transpose") {
        rb_.set({i, 0}, transpose(rb_.map(n.inputs[0]), perm_of(g_, n), &n));
      } else if (is_seed(g_, n)) {
        convert(i);
      } else if (auto m = movable(g_, n); !m || (!sink(i, *m) && !hoist(i, *m))) {
        rb_.copy(i);
      }
    }
    ir::Graph out = rb_.finish();
    remove_unused(out, [&](int32_t k) { return out.nodes[k].op == "transpose"; });
    return out;
  }

 private:
  const ir::Graph& out() { return rb_.out(); }

  // The producer of new value v when it is a transpose: its input and permutation.
  std::optional<std::pair<ValueRef, Perm>> as_transpose(ValueRef v) {
    const ir::Node& p = out().node(v);
    if (p.op != "transpose") return std::nullopt;
    return std::pair{p.inputs[0], perm_of(out(), p)};
  }

  bool exists(ValueRef v, const Perm& p) {
    if (is_identity(p) || cse_.count({v, p})) return true;
    auto t = as_transpose(v);
    return t && (is_identity(compose(t->second, p)) || cse_.count({t->first, compose(t->second, p)}));
  }

  // transpose(x, p) in the new graph, merged with a transpose producing x, and shared with
  // an equal one. `keep` is the old node being copied: its name and hints survive.
  ValueRef transpose(ValueRef x, Perm p, const ir::Node* keep = nullptr) {
    bool merged = false;
    if (auto t = as_transpose(x)) {
      p = compose(t->second, p);
      x = t->first;
      merged = true;
    }
    if (is_identity(p)) return x;
    if (auto it = cse_.find({x, p}); it != cse_.end()) return it->second;
    const ir::TensorType in = out().type(x);
    ir::Node t;
    if (keep) {
      t = *keep;
      if (merged) t.attrs.set("axes", p);
    } else {
      const size_t r = p.size();
      const std::string_view suffix = !has_layouts(r) ? "transposed"
                                      : p == to_last(r) ? ir::nn::layout_name(r, true)
                                      : p == to_first(r) ? ir::nn::layout_name(r, false)
                                                         : "transposed";
      t.op = "transpose";
      t.name = fmt::format("{}_{}", out().node(x).name, suffix);
      ir::Attrs a;
      a.set("axes", p);
      t.attrs = ir::complete_attrs(ir::OpRegistry::global().get("transpose"), std::move(a));
    }
    t.inputs = {x};
    t.outputs = {ir::TensorType{in.dtype, permute(in.shape, p)}};
    const ValueRef v{rb_.emit(std::move(t)), 0};
    cse_[{x, p}] = v;
    return v;
  }

  void convert(int32_t i) {
    const ir::Node& n = g_.nodes[i];
    const size_t rank = g_.type(n.inputs[0]).shape.size();
    ir::Node c = n;
    for (ValueRef& in : c.inputs) in = rb_.map(in);
    c.inputs[0] = transpose(c.inputs[0], to_last(rank));
    c.inputs[1] = transpose(c.inputs[1], to_last(rank));  // OIHW -> OHWI, as MXNet wants
    c.attrs.set(rule_of(g_, n)->attr, std::string(ir::nn::layout_name(rank, /*channels_last=*/true)));
    c.outputs[0].shape = permute(c.outputs[0].shape, to_last(rank));
    const int32_t id = rb_.emit(std::move(c));
    rb_.set({i, 0}, transpose({id, 0}, to_first(rank)));
  }

  // Emits node i reading its data channels-last; `data_in` gives each data input in that
  // layout. Returns the new node.
  int32_t emit_channels_last(int32_t i, const Movable& m, const std::map<size_t, ValueRef>& data_in) {
    ir::Node e = g_.nodes[i];
    for (ValueRef& in : e.inputs) in = rb_.map(in);
    for (const auto& [k, v] : data_in) e.inputs[k] = v;
    e.attrs = m.attrs;
    for (size_t k : m.outputs) e.outputs[k].shape = permute(e.outputs[k].shape, to_last(m.rank));
    return rb_.emit(std::move(e));
  }

  // Moves transposes to channels-first from the inputs of node i to its outputs, when
  // that does not add transposes.
  bool sink(int32_t i, const Movable& m) {
    const ir::Node& n = g_.nodes[i];
    const Perm back = to_first(m.rank), there = to_last(m.rank);
    int added = static_cast<int>(m.outputs.size()), removed = 0, sunk = 0;
    std::set<ValueRef> counted;
    for (size_t k : m.inputs) {
      const ValueRef v = rb_.map(n.inputs[k]);
      auto t = as_transpose(v);
      if (t && t->second == back) {
        ++sunk;
        const int reads_here = static_cast<int>(std::count(n.inputs.begin(), n.inputs.end(), n.inputs[k]));
        if (counted.insert(n.inputs[k]).second && uses_.at(n.inputs[k]) == reads_here) ++removed;
      } else if (!exists(v, there)) {
        ++added;
      }
    }
    if (sunk == 0 || added > removed) return false;
    std::map<size_t, ValueRef> data_in;
    for (size_t k : m.inputs) data_in[k] = transpose(rb_.map(n.inputs[k]), there);
    const int32_t id = emit_channels_last(i, m, data_in);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const ValueRef o{id, static_cast<int32_t>(k)};
      const bool permuted = std::find(m.outputs.begin(), m.outputs.end(), k) != m.outputs.end();
      rb_.set({i, static_cast<int32_t>(k)}, permuted ? transpose(o, back) : o);
    }
    return true;
  }

  // Moves the one transpose to channels-last that reads node i's only output above the
  // node, when that adds at most the transpose it removes.
  bool hoist(int32_t i, const Movable& m) {
    const ir::Node& n = g_.nodes[i];
    if (m.outputs != std::vector<size_t>{0} || users_[i].size() != 1) return false;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      auto it = uses_.find({i, static_cast<int32_t>(k)});
      if (it != uses_.end() && it->second != (k == 0 ? 1 : 0)) return false;
    }
    const int32_t user = users_[i][0];
    const ir::Node& t = g_.nodes[user];
    const Perm there = to_last(m.rank);
    if (t.op != "transpose" || perm_of(g_, t) != there) return false;
    int added = 0;
    for (size_t k : m.inputs) added += exists(rb_.map(n.inputs[k]), there) ? 0 : 1;
    if (added > 1) return false;
    std::map<size_t, ValueRef> data_in;
    for (size_t k : m.inputs) data_in[k] = transpose(rb_.map(n.inputs[k]), there);
    rb_.set({user, 0}, {emit_channels_last(i, m, data_in), 0});
    return true;
  }

  const ir::Graph& g_;
  GraphRebuilder rb_;
  std::map<ValueRef, int> uses_;
  std::vector<std::vector<int32_t>> users_;  // old node -> nodes reading any of its outputs
  std::map<std::pair<ValueRef, Perm>, ValueRef> cse_;
};

// The graph's outputs keep the names they had (ir::Graph::output_name: what autodiff names
// the head gradients after, what `run` reports and saves them as). An output the pass ends
// with a transpose back to channels-first would be named after that transpose; it takes the
// name of the node it transposes instead, which is renamed for its layout. (An output of a
// multi-output node, "N_output1", cannot be named by a one-output transpose and keeps the
// transpose's name.)
void keep_output_names(ir::Graph& g, const std::vector<std::string>& before) {
  std::set<std::string> taken;
  for (const ir::Node& n : g.nodes) taken.insert(n.name);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    if (g.output_name(k) == before[k] || !before[k].ends_with("_output")) continue;
    ir::Node& t = g.nodes[g.outputs[k].node];
    if (t.op != "transpose") continue;
    const std::string name = before[k].substr(0, before[k].size() - std::string_view("_output").size());
    if (taken.count(name)) {
      auto holder = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.name == name; });
      const size_t rank = g.type(g.outputs[k]).shape.size();
      const std::string base = fmt::format("{}_{}", name, ir::nn::layout_name(rank, /*channels_last=*/true));
      std::string renamed = base;
      for (int i = 2; taken.count(renamed); ++i) renamed = fmt::format("{}{}", base, i);
      holder->name = renamed;
      taken.insert(renamed);
    }
    taken.erase(t.name);
    t.name = name;
    taken.insert(name);
  }
}

}  // namespace

bool layout_optimize(ir::Graph& g, std::string_view layout) {
  if (layout != "nhwc" && layout != "NHWC")
    fail("layout '{}' is not supported: layout_optimize knows \"nhwc\" (channels last)", layout);
  // Transposes to channels-first only move down and those to channels-last only up, and no
  // step adds one, so the sweeps settle; the cap is a guard, not a tuning knob.
  infer_if_untyped(g);
  const size_t max_sweeps = g.nodes.size() + 8;
  std::vector<std::string> output_names;
  for (size_t k = 0; k < g.outputs.size(); ++k) output_names.push_back(g.output_name(k));
  bool changed = false;
  for (size_t sweep = 0; sweep < max_sweeps; ++sweep) {
    ir::Graph next = Sweep(g).run();
    if (next == g) break;
    g = std::move(next);
    changed = true;
  }
  if (changed) keep_output_names(g, output_names);
  return changed;
}

}  // namespace ampfuse::engine
