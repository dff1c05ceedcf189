#include "engine/planning/fusion_plan.h"

#include "ir/error.h"
#include "ir/op_registry.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace ampfuse::engine {

using ir::Graph;
using ir::Node;
using ir::ValueRef;

AccessMap compose_maps(const AccessMap& inner, const AccessMap& outer) {
  AccessMap r;
  for (size_t k = 0; k < inner.iter_dim.size(); ++k) {
    const int32_t j = inner.iter_dim[k];
    if (j < 0) {
      r.iter_dim.push_back(-1), r.scale.push_back(0), r.offset.push_back(inner.offset[k]);
    } else if (outer.iter_dim[j] < 0) {
      r.iter_dim.push_back(-1), r.scale.push_back(0), r.offset.push_back(inner.offset[k] + inner.scale[k] * outer.offset[j]);
    } else {
      r.iter_dim.push_back(outer.iter_dim[j]);
      r.scale.push_back(inner.scale[k] * outer.scale[j]);
      r.offset.push_back(inner.offset[k] + inner.scale[k] * outer.offset[j]);
    }
  }
  return r;
}

namespace {

bool is_permutation(const AccessMap& a, size_t out_rank) {
  if (a.iter_dim.size() != out_rank) return false;
  std::vector<bool> seen(out_rank, false);
  for (size_t k = 0; k < a.iter_dim.size(); ++k) {
    const int32_t j = a.iter_dim[k];
    if (j < 0 || static_cast<size_t>(j) >= out_rank || seen[j] || a.scale[k] != 1 || a.offset[k] != 0) return false;
    seen[j] = true;
  }
  return true;
}

}  // namespace

ir::Shape operand_shape(const Graph& g, int32_t n, size_t i) {
  const Node& node = g.nodes[n];
  const ir::Shape& in = g.type(node.inputs[i]).shape;
  const ir::OpDef& def = ir::OpRegistry::global().get(node.op);
  if (fusion_role(node) == FusionRole::elementwise && def.broadcast_view)
    return def.broadcast_view(node.attrs, i, in, node.outputs[0].shape);
  return in;
}

ir::DType node_compute_type(const Graph& g, int32_t n) {
  const Node& node = g.nodes[n];
  std::vector<ir::DType> dtypes;
  for (const ir::TensorType& t : node.outputs) dtypes.push_back(t.dtype);
  // A remap only moves values: its compute type just has to hold them exactly.
  if (fusion_role(node) != FusionRole::remap)
    for (ValueRef in : node.inputs) dtypes.push_back(g.type(in).dtype);
  return ir::compute_type(dtypes);
}

FusionRole fusion_role(const Node& n) {
  const ir::OpDef& def = ir::OpRegistry::global().get(n.op);
  if (def.kind == ir::OpKind::view) return FusionRole::view;
  if (!def.fusable) return FusionRole::external;
  if (def.has_recipe(n.attrs)) return FusionRole::elementwise;
  if (def.remap_access) return FusionRole::remap;
  return FusionRole::external;
}

AccessMap input_access(const Graph& g, int32_t n, size_t i) {
  const Node& node = g.nodes[n];
  const ir::Shape& out = node.outputs.at(0).shape;
  const ir::Shape& in = g.type(node.inputs.at(i)).shape;
  switch (fusion_role(node)) {
    case FusionRole::elementwise: return AccessMap::broadcast(operand_shape(g, n, i), out);
    case FusionRole::remap: return ir::OpRegistry::global().get(node.op).remap_access(node.attrs, in, out);
    default: fail("node '{}' ({}) is not fused, so it has no input access map", node.name, node.op);
  }
}

namespace {

// Builds groups greedily in graph order. Each node lives in one step; a fusable node joins
// the group of one of its producers when the maps agree and no cycle between steps appears.
class Planner {
 public:
  Planner(const Graph& g, const PlannerOptions& opts) : g_(g), opts_(opts), step_of_(g.nodes.size(), -1) {}

  Plan run() {
    for (int32_t n = 0; n < static_cast<int32_t>(g_.nodes.size()); ++n) {
      const Node& node = g_.nodes[n];
      if (node.is_var()) continue;
      const FusionRole role = fusion_role(node);
      // A remap of 64-bit integers would pass through the f64 compute type and lose bits
      // above 2^53: such a node runs as an external op.
      const bool exact_remap = role != FusionRole::remap || node.outputs[0].dtype != ir::DType::i64;
      if ((role == FusionRole::elementwise || role == FusionRole::remap) && exact_remap) {
        if (!opts_.fuse || !try_join(n)) start_group(n);
      } else {
        steps_.push_back(Step{role == FusionRole::view ? Kind::view : Kind::external, {n}, {}, {}, {}});
        step_of_[n] = static_cast<int32_t>(steps_.size() - 1);
        add_deps(n, step_of_[n]);
      }
    }
    return finish();
  }

 private:
  enum class Kind { fused, external, view };
  struct Step {
    Kind kind;
    std::vector<int32_t> nodes;
    std::vector<AccessMap> maps;  // fused: per node
    ir::Shape iteration;
    std::set<int32_t> deps;       // steps whose values this step reads
    ir::DType compute = ir::DType::f32;
    bool merged_away = false;     // its nodes moved into another group
  };

  int32_t producer_step(ValueRef v) const { return g_.nodes[v.node].is_var() ? -1 : step_of_[v.node]; }

  void add_deps(int32_t n, int32_t s) {
    for (ValueRef in : g_.nodes[n].inputs) {
      const int32_t p = producer_step(in);
      if (p >= 0 && p != s) steps_[s].deps.insert(p);
    }
  }

  // Does step `from` (transitively) read from step `target`?
  bool depends_on(int32_t from, int32_t target) const {
    std::vector<bool> seen(steps_.size(), false);
    std::vector<int32_t> stack = {from};
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (s == target) return true;
      if (seen[s]) continue;
      seen[s] = true;
      for (int32_t d : steps_[s].deps) stack.push_back(d);
    }
    return false;
  }

  const AccessMap& map_of(int32_t node) const {
    const Step& s = steps_[step_of_[node]];
    const auto it = std::find(s.nodes.begin(), s.nodes.end(), node);
    return s.maps[it - s.nodes.begin()];
  }

  // The map node n must be computed under to read group `s`'s values consistently, or
  // nullopt when no such map exists.
  std::optional<AccessMap> required_map(int32_t n, int32_t s) const {
    const Node& node = g_.nodes[n];
    const size_t out_rank = node.outputs[0].shape.size();
    std::optional<AccessMap> result;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (producer_step(node.inputs[i]) != s) continue;
      const AccessMap a = input_access(g_, n, i);
      if (!is_permutation(a, out_rank)) return std::nullopt;  // broadcasts / slices of an inner value
      const AccessMap& mv = map_of(node.inputs[i].node);
      // a maps output dim a.iter_dim[k] to input dim k, so output dim a.iter_dim[k] runs
      // under the map of input dim k.
      AccessMap m = AccessMap::identity(out_rank);
      for (size_t k = 0; k < a.iter_dim.size(); ++k) m.iter_dim[a.iter_dim[k]] = mv.iter_dim[k];
      if (result && *result != m) return std::nullopt;
      result = m;
    }
    if (!result) return std::nullopt;
    // The node's output extents must be the iteration extents its map names.
    const ir::Shape& it = steps_[s].iteration;
    for (size_t j = 0; j < out_rank; ++j)
      if (node.outputs[0].shape[j] != it[result->iter_dim[j]]) return std::nullopt;
    for (const auto& t : node.outputs)
      if (t.shape != node.outputs[0].shape) return std::nullopt;
    return result;
  }

  bool try_join(int32_t n) {
    const Node& node = g_.nodes[n];
    std::vector<int32_t> candidates;
    for (ValueRef in : node.inputs) {
      const int32_t s = producer_step(in);
      if (s >= 0 && steps_[s].kind == Kind::fused &&
          std::find(candidates.begin(), candidates.end(), s) == candidates.end())
        candidates.push_back(s);
    }
    const ir::DType compute = node_compute_type(g_, n);
    for (int32_t s : candidates) {
      if (steps_[s].compute != compute) continue;
      std::optional<AccessMap> m = required_map(n, s);
      if (!m) continue;
      bool cycle = false;
      for (ValueRef in : node.inputs) {
        const int32_t p = producer_step(in);
        if (p >= 0 && p != s && depends_on(p, s)) cycle = true;
      }
      if (cycle) continue;
      steps_[s].nodes.push_back(n);
      steps_[s].maps.push_back(*m);
      step_of_[n] = s;
      add_deps(n, s);
      // n may also read other groups under the same map (two casts feeding one multiply):
      // fold them in, so that leaves started on their own do not stay separate kernels.
      for (int32_t other : candidates)
        if (other != s && steps_[other].iteration == steps_[s].iteration && steps_[other].compute == compute &&
            required_map(n, other) == m)
          try_merge(s, other);
      return true;
    }
    return false;
  }

  // Moves group `from` into group `into` unless that closes a cycle through a third step.
  void try_merge(int32_t into, int32_t from) {
    for (int32_t d : steps_[into].deps)
      if (d != from && depends_on(d, from)) return;
    for (int32_t d : steps_[from].deps)
      if (d != into && depends_on(d, into)) return;
    Step& a = steps_[into];
    Step& b = steps_[from];
    for (size_t i = 0; i < b.nodes.size(); ++i) {
      a.nodes.push_back(b.nodes[i]);
      a.maps.push_back(b.maps[i]);
      step_of_[b.nodes[i]] = into;
    }
    // Keep graph order inside the kernel (the lowering evaluates nodes in this order).
    std::vector<size_t> order(a.nodes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return a.nodes[x] < a.nodes[y]; });
    std::vector<int32_t> nodes;
    std::vector<AccessMap> maps;
    for (size_t i : order) nodes.push_back(a.nodes[i]), maps.push_back(a.maps[i]);
    a.nodes = std::move(nodes), a.maps = std::move(maps);
    for (int32_t d : b.deps)
      if (d != into) a.deps.insert(d);
    a.deps.erase(from);
    b = Step{Kind::fused, {}, {}, {}, {}, ir::DType::f32, true};
    for (Step& st : steps_)
      if (st.deps.erase(from)) st.deps.insert(into);
    steps_[into].deps.erase(into);
  }

  void start_group(int32_t n) {
    const ir::Shape& shape = g_.nodes[n].outputs.at(0).shape;
    steps_.push_back(Step{Kind::fused, {n}, {AccessMap::identity(shape.size())}, shape, {}, node_compute_type(g_, n)});
    step_of_[n] = static_cast<int32_t>(steps_.size() - 1);
    add_deps(n, step_of_[n]);
  }

  FusedKernel make_kernel(const Step& s) const {
    FusedKernel k;
    k.iteration = s.iteration;
    k.compute = s.compute;
    k.nodes = s.nodes;
    k.node_maps = s.maps;
    const int32_t self = step_of_[s.nodes[0]];
    for (size_t idx = 0; idx < s.nodes.size(); ++idx) {
      const int32_t n = s.nodes[idx];
      const Node& node = g_.nodes[n];
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (producer_step(node.inputs[i]) == self) continue;
        KernelOperand op{node.inputs[i], operand_shape(g_, n, i), compose_maps(input_access(g_, n, i), s.maps[idx])};
        if (std::find(k.inputs.begin(), k.inputs.end(), op) == k.inputs.end()) k.inputs.push_back(op);
      }
    }
    // Outputs: values read by another step or by the graph.
    std::set<ValueRef> needed(g_.outputs.begin(), g_.outputs.end());
    for (int32_t m = 0; m < static_cast<int32_t>(g_.nodes.size()); ++m)
      if (!g_.nodes[m].is_var() && step_of_[m] != self)
        for (ValueRef in : g_.nodes[m].inputs) needed.insert(in);
    for (size_t idx = 0; idx < s.nodes.size(); ++idx) {
      const int32_t n = s.nodes[idx];
      for (size_t o = 0; o < g_.nodes[n].outputs.size(); ++o) {
        const ValueRef v{n, static_cast<int32_t>(o)};
        if (needed.count(v)) k.outputs.push_back({v, g_.nodes[n].outputs[o].shape, s.maps[idx]});
      }
    }
    return k;
  }

  Plan finish() const {
    // Steps in dependency order (Kahn's algorithm, lowest index first for stable output).
    std::vector<int> pending(steps_.size());
    std::vector<std::vector<int32_t>> users(steps_.size());
    size_t alive = 0;
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (steps_[s].merged_away) {
        pending[s] = -1;
        continue;
      }
      ++alive;
      pending[s] = static_cast<int>(steps_[s].deps.size());
      for (int32_t d : steps_[s].deps) users[d].push_back(static_cast<int32_t>(s));
    }
    std::set<int32_t> ready;
    for (size_t s = 0; s < steps_.size(); ++s)
      if (pending[s] == 0) ready.insert(static_cast<int32_t>(s));
    Plan plan;
    while (!ready.empty()) {
      const int32_t s = *ready.begin();
      ready.erase(ready.begin());
      const Step& step = steps_[s];
      switch (step.kind) {
        case Kind::fused: plan.steps.emplace_back(make_kernel(step)); break;
        case Kind::external: plan.steps.emplace_back(ExternalStep{step.nodes[0]}); break;
        case Kind::view: plan.steps.emplace_back(ViewStep{step.nodes[0]}); break;
      }
      for (int32_t u : users[s])
        if (--pending[u] == 0) ready.insert(u);
    }
    if (plan.steps.size() != alive) fail("internal: the fusion plan has a cycle");
    return plan;
  }

  const Graph& g_;
  PlannerOptions opts_;
  std::vector<int32_t> step_of_;
  std::vector<Step> steps_;
};

}  // namespace

std::string value_name(const Graph& g, ValueRef v) {
  const Node& n = g.nodes[v.node];
  return v.index == 0 ? "%" + n.name : fmt::format("%{}:{}", n.name, v.index);
}

Plan plan_fusion(const Graph& g, const PlannerOptions& opts) { return Planner(g, opts).run(); }

int32_t step_node(const PlanStep& step) {
  return std::holds_alternative<ExternalStep>(step) ? std::get<ExternalStep>(step).node : std::get<ViewStep>(step).node;
}

std::vector<ValueRef> step_reads(const ir::Graph& g, const PlanStep& step) {
  if (const auto* k = std::get_if<FusedKernel>(&step)) {
    std::vector<ValueRef> reads;
    for (const KernelOperand& op : k->inputs) reads.push_back(op.value);
    return reads;
  }
  return g.nodes[step_node(step)].inputs;
}

std::vector<ValueRef> step_writes(const ir::Graph& g, const PlanStep& step) {
  std::vector<ValueRef> writes;
  if (const auto* k = std::get_if<FusedKernel>(&step)) {
    for (const KernelOperand& op : k->outputs) writes.push_back(op.value);
    return writes;
  }
  const int32_t n = step_node(step);
  for (size_t o = 0; o < g.nodes[n].outputs.size(); ++o) writes.push_back({n, static_cast<int32_t>(o)});
  return writes;
}

std::vector<std::vector<ValueRef>> values_dead_after(const ir::Graph& g, const Plan& p) {
  const std::set<ValueRef> outputs(g.outputs.begin(), g.outputs.end());
  std::map<ValueRef, size_t> last_read;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (ValueRef v : step_writes(g, p.steps[s])) last_read[v] = s;  // never read: dies at once
    for (ValueRef v : step_reads(g, p.steps[s])) last_read[v] = s;
  }
  std::vector<std::vector<ValueRef>> dead(p.steps.size());
  for (const auto& [v, s] : last_read)
    if (!outputs.count(v) && !g.nodes[v.node].is_var()) dead[s].push_back(v);
  return dead;
}

int64_t kernel_bytes(const Graph& g, const FusedKernel& k) {
  int64_t bytes = 0;
  for (const auto* list : {&k.inputs, &k.outputs})
    for (const KernelOperand& op : *list) {
      const ir::TensorType& t = g.type(op.value);
      bytes += ir::num_elements(t.shape) * static_cast<int64_t>(ir::dtype_size(t.dtype));
    }
  return bytes;
}

std::string print_plan(const Graph& g, const Plan& p) {
  std::string out;
  int kernel = 0;
  for (const PlanStep& step : p.steps) {
    if (const auto* k = std::get_if<FusedKernel>(&step)) {
      std::vector<std::string> nodes, ins, outs;
      for (int32_t n : k->nodes) nodes.push_back(fmt::format("%{}={}", g.nodes[n].name, g.nodes[n].op));
      for (const auto& op : k->inputs) ins.push_back(value_name(g, op.value) + (op.map.is_identity() ? "" : "(mapped)"));
      for (const auto& op : k->outputs) outs.push_back(value_name(g, op.value) + (op.map.is_identity() ? "" : "(permuted)"));
      out += fmt::format("kernel {} {} nodes: {}  in: {}  out: {}  bytes: {}\n", kernel++, ir::shape_str(k->iteration),
                         fmt::join(nodes, " "), fmt::join(ins, " "), fmt::join(outs, " "), kernel_bytes(g, *k));
    } else if (const auto* e = std::get_if<ExternalStep>(&step)) {
      out += fmt::format("external %{}={}\n", g.nodes[e->node].name, g.nodes[e->node].op);
    } else {
      const auto& v = std::get<ViewStep>(step);
      out += fmt::format("view %{}={}\n", g.nodes[v.node].name, g.nodes[v.node].op);
    }
  }
  return out;
}

}  // namespace ampfuse::engine
